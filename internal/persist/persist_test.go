package persist

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var testBuild = strings.Repeat("ab", 32)

// TestMain lets this test binary be the daemon Ensure starts.
func TestMain(m *testing.M) {
	if code, ok := Main(os.Args[1:], os.Stdout); ok {
		os.Exit(code)
	}
	os.Exit(m.Run())
}

func TestHandshake(t *testing.T) {
	const tok = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	other := strings.Replace(tok, "0", "1", 1)
	cases := []struct {
		name       string
		role       string
		clientTok  string
		serverTok  string
		req        Request
		clientErr  error // errors.Is
		serverErr  error
		wantServer bool
	}{
		{name: "main", role: RoleMain, clientTok: tok, serverTok: tok, req: Request{Env: []string{"A=1"}, Idle: "1m", Stderr: strings.Repeat("c", 32)}, wantServer: true},
		{name: "ping", role: RolePing, clientTok: tok, serverTok: tok, wantServer: true},
		{name: "stderr", role: RoleStderr, clientTok: tok, serverTok: tok, wantServer: true},
		// A daemon that does not know our token (a socket someone else
		// put there) is refused before anything is sent to it.
		{name: "impostor daemon", role: RoleMain, clientTok: tok, serverTok: other, clientErr: ErrAuth},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := net.Pipe()
			defer a.Close()
			defer b.Close()
			type res struct {
				acc accepted
				err error
			}
			got := make(chan res, 1)
			go func() {
				acc, err := accept(b, c.serverTok, testBuild)
				if err == nil {
					switch acc.role {
					case RoleMain:
						io.WriteString(b, "RUN\n")
					case RolePing:
						io.WriteString(b, "PONG\n")
					case RoleStderr:
						io.WriteString(b, "READY\n")
					}
				}
				got <- res{acc, err}
				b.Close()
			}()
			nonce, _ := NewNonce()
			build, err := Dial(a, c.clientTok, c.role, nonce, c.req)
			a.Close()
			r := <-got
			if c.clientErr != nil {
				if !errors.Is(err, c.clientErr) {
					t.Fatalf("client: got %v, want %v", err, c.clientErr)
				}
				if r.err == nil {
					t.Fatal("server accepted a client that gave up")
				}
				return
			}
			if err != nil || r.err != nil {
				t.Fatalf("client %v, server %v", err, r.err)
			}
			if build != testBuild {
				t.Errorf("build %q", build)
			}
			if r.acc.role != c.role || fmt.Sprint(r.acc.req) != fmt.Sprint(c.req) {
				t.Errorf("server saw %+v, want role %s req %+v", r.acc, c.role, c.req)
			}
		})
	}
}

// A launcher that does not know the token gets ERR and nothing runs.
func TestHandshakeRefusesUnknownLauncher(t *testing.T) {
	const tok = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	a, b := net.Pipe()
	defer a.Close()
	errc := make(chan error, 1)
	go func() {
		_, err := accept(b, tok, testBuild)
		errc <- err
		b.Close()
	}()
	br := bufio.NewReader(a)
	fmt.Fprintf(a, "GOMPI-PERSIST 1 main %s\n", strings.Repeat("0", 32))
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(a, "%s {}\n", strings.Repeat("0", 64))
	line, _ := br.ReadString('\n')
	if !strings.HasPrefix(line, "ERR ") {
		t.Errorf("answer %q, want ERR", line)
	}
	if err := <-errc; !errors.Is(err, ErrAuth) {
		t.Errorf("server: %v, want ErrAuth", err)
	}
}

// newTestDaemon serves a daemon in dir whose per-job program is script.
func newTestDaemon(t *testing.T, script string, idle time.Duration) (*Daemon, Info, chan error) {
	t.Helper()
	dir := t.TempDir()
	exe := filepath.Join(dir, "proxy.sh")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Dir: dir, Build: testBuild, Idle: idle, Exe: exe}
	if err := cfg.fill(); err != nil {
		t.Fatal(err)
	}
	p := cfg.paths()
	tok, _ := NewToken()
	if err := os.WriteFile(p.token, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: p.sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewDaemon(cfg, ln, p.sock, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Serve() }()
	t.Cleanup(func() {
		d.Close()
		<-done
	})
	return d, Info{Sock: p.sock, Token: tok}, done
}

func dialRole(t *testing.T, in Info, role, nonce string, req Request) net.Conn {
	t.Helper()
	c, err := net.Dial("unix", in.Sock)
	if err != nil {
		t.Fatal(err)
	}
	if nonce == "" {
		nonce, _ = NewNonce()
	}
	if _, err := Dial(c, in.Token, role, nonce, req); err != nil {
		c.Close()
		t.Fatalf("%s: %v", role, err)
	}
	return c
}

// A job's proxy gets the main connection as stdin and stdout, the stderr
// connection its request names as stderr, and the requested environment.
func TestDaemonRunsJob(t *testing.T) {
	t.Setenv("SSH_CONNECTION", "10.0.0.1 2222 10.0.0.2 22") // of the login that started the daemon
	_, in, _ := newTestDaemon(t, `echo "env $GOMPI_X${SSH_CONNECTION:+ leaked}"; read line; echo "got $line"; echo "diag $line" >&2`, time.Minute)
	nonce, _ := NewNonce()
	ec := dialRole(t, in, RoleStderr, nonce, Request{})
	defer ec.Close()
	c := dialRole(t, in, RoleMain, "", Request{Env: []string{"GOMPI_X=42"}, Stderr: nonce})
	defer c.Close()
	br := bufio.NewReader(c)
	if l, _ := br.ReadString('\n'); l != "env 42\n" {
		t.Fatalf("first line %q", l)
	}
	io.WriteString(c, "ping\n")
	if l, _ := br.ReadString('\n'); l != "got ping\n" {
		t.Fatalf("second line %q", l)
	}
	if rest, _ := io.ReadAll(br); len(rest) != 0 {
		t.Fatalf("trailing %q", rest)
	}
	if diag, _ := io.ReadAll(ec); string(diag) != "diag ping\n" {
		t.Fatalf("stderr %q", diag)
	}
}

func TestDaemonIdleExit(t *testing.T) {
	_, in, done := newTestDaemon(t, `cat >/dev/null`, 300*time.Millisecond)
	c := dialRole(t, in, RoleMain, "", Request{})
	// A running job keeps the daemon: well past its idle time it answers.
	time.Sleep(700 * time.Millisecond)
	p := dialRole(t, in, RolePing, "", Request{})
	p.Close()
	c.Close() // the job ends (cat sees EOF)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
		done <- nil // for the cleanup
	case <-time.After(5 * time.Second):
		t.Fatal("daemon still running 5s after its last job")
	}
	for _, f := range []string{in.Sock, strings.TrimSuffix(in.Sock, ".sock") + ".token"} {
		if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left behind (%v)", f, err)
		}
	}
}

// A daemon whose socket file was replaced leaves, and leaves the new files.
func TestDaemonSocketReplaced(t *testing.T) {
	_, in, done := newTestDaemon(t, `true`, time.Hour)
	os.Remove(in.Sock)
	os.WriteFile(in.Sock, []byte("not ours"), 0o600)
	select {
	case <-done:
		done <- nil
	case <-time.After(5 * time.Second):
		t.Fatal("daemon did not notice its socket was replaced")
	}
	if b, err := os.ReadFile(in.Sock); err != nil || string(b) != "not ours" {
		t.Errorf("replacement touched: %q %v", b, err)
	}
}

func TestEnsure(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "gompi-test")
	cfg := Config{Dir: dir, Build: testBuild, Idle: time.Minute}
	// Launches, several at once, start one daemon and agree on it.
	ensureAll := func() Info {
		t.Helper()
		var wg sync.WaitGroup
		got := make([]Info, 4)
		errs := make([]error, 4)
		for i := range got {
			wg.Add(1)
			go func() { defer wg.Done(); got[i], errs[i] = Ensure(cfg) }()
		}
		wg.Wait()
		for i := range got {
			if errs[i] != nil || got[i] != got[0] {
				t.Fatalf("concurrent Ensure: %+v %v, want %+v", got[i], errs[i], got[0])
			}
		}
		return got[0]
	}
	in1 := ensureAll()
	t.Cleanup(func() { stopDaemon(t, in1) })
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("dir %v %v", fi, err)
	}
	// Later ones find it.
	if in2 := ensureAll(); in2 != in1 {
		t.Fatalf("second Ensure: %+v, want %+v", in2, in1)
	}
	// Once it is gone, a new one with a new token takes its place.
	stopDaemon(t, in1)
	in3, err := Ensure(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopDaemon(t, in3) })
	if in3.Token == in1.Token {
		t.Error("token reused")
	}
	if err := ping(in3, time.Minute); err != nil {
		t.Fatal(err)
	}
}

// stopDaemon SIGTERMs the daemon behind in and waits until it is gone.
func stopDaemon(t *testing.T, in Info) {
	t.Helper()
	b, err := os.ReadFile(PIDFile(in.Sock))
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 || pid == os.Getpid() {
		t.Fatalf("pid file %q", b)
	}
	syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat(in.Sock); errors.Is(err, os.ErrNotExist) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon %d still there 5s after SIGTERM", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestPrivateDir(t *testing.T) {
	base := t.TempDir()
	open := filepath.Join(base, "open")
	os.Mkdir(open, 0o755)
	os.Chmod(open, 0o755)
	link := filepath.Join(base, "link")
	os.Symlink(base, link)
	for _, d := range []string{open, link} {
		if err := privateDir(d); err == nil || !strings.Contains(err.Error(), "not a private directory") {
			t.Errorf("%s: %v", d, err)
		}
	}
	if _, err := Ensure(Config{Dir: open, Build: testBuild}); err == nil {
		t.Error("Ensure used a directory others can enter")
	}
	if err := privateDir(filepath.Join(base, "new")); err != nil {
		t.Error(err)
	}
}

func TestInfoRoundTrip(t *testing.T) {
	in := Info{Sock: "/tmp/gompi-0/p-abababababababab.sock", Token: strings.Repeat("0f", 32)}
	got, err := ParseInfo(FormatInfo(in, nil))
	if err != nil || got != in {
		t.Fatalf("%+v %v", got, err)
	}
	_, err = ParseInfo(FormatInfo(Info{}, errors.New("no /tmp\nhere")))
	if err == nil || !strings.Contains(err.Error(), "no /tmp here") {
		t.Fatalf("error line: %v", err)
	}
	for _, bad := range []string{"", "gompi-persist: ok", "gompi-persist: ok rel " + in.Token, "gompi-persist: ok /s 12", "x ok /s " + in.Token} {
		if _, err := ParseInfo(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
