package launcher

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/gompi/gompi/internal/testkit"
)

func TestSSHStartEcho(t *testing.T) {
	e := newClientEnv(t)
	b := e.backend(t, nil)
	var stderr testkit.Buffer
	p := startOK(t, b, Spec{
		Argv:   []string{"/bin/sh", "-c", `echo "A=$A B=$B" >&2; exec cat`},
		Env:    []string{"A=1", "B=it's here"},
		Stderr: &stderr,
	})
	if _, err := p.Write([]byte("hello proxy\n")); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(p).ReadString('\n')
	if err != nil || line != "hello proxy\n" {
		t.Fatalf("read %q, %v", line, err)
	}
	p.Close()
	if err := p.Wait(); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if got := stderr.String(); got != "A=1 B=it's here\n" {
		t.Errorf("stderr %q", got)
	}
	// /bin/sh is the same file "remotely": no upload happened.
	for _, c := range e.srv.commands() {
		if strings.Contains(c, "cat > ") {
			t.Errorf("unexpected upload: %s", c)
		}
	}
}

func TestSSHExitStatusAndKill(t *testing.T) {
	e := newClientEnv(t)
	b := e.backend(t, nil)
	p := startOK(t, b, Spec{Argv: []string{"/bin/sh", "-c", "exit 3"}})
	var ee *ssh.ExitError
	if err := p.Wait(); !errors.As(err, &ee) || ee.ExitStatus() != 3 || !strings.Contains(err.Error(), "testhost") {
		t.Fatalf("Wait: %v, want exit status 3 naming the host", err)
	}
	p = startOK(t, b, Spec{Argv: []string{"/bin/sleep", "60"}})
	start := time.Now()
	p.Kill()
	p.Wait()
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("Kill+Wait took %v", d)
	}
}

func TestSSHHostKeyPolicy(t *testing.T) {
	other := newSigner(t, "ed25519").PublicKey()
	tests := []struct {
		name      string
		known     func(e *clientEnv) // known_hosts content (file starts empty)
		acceptNew bool
		want      error
		wantMsg   []string
	}{
		{"unknown", func(*clientEnv) {}, false, ErrUnknownHostKey,
			[]string{"testhost", "ssh-keyscan -p ", "127.0.0.1 >> ~/.ssh/known_hosts", "SHA256:", "-ssh-accept-new"}},
		{"changed", func(e *clientEnv) { e.addKnown(t, other) }, false, ErrHostKeyMismatch,
			[]string{"testhost", "man-in-the-middle", "ssh-keygen -R", "known_hosts:1"}},
		{"changed, accept-new", func(e *clientEnv) { e.addKnown(t, other) }, true, ErrHostKeyMismatch, nil},
		{"unknown, accept-new", func(*clientEnv) {}, true, nil, nil},
		{"known", func(e *clientEnv) { e.addKnown(t, e.srv.hostKeys[0].PublicKey()) }, false, nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newClientEnv(t)
			os.Remove(e.knownHostsFile())
			tc.known(e)
			b := e.backend(t, func(c *SSHConfig) { c.AcceptNew = tc.acceptNew })
			p, err := b.Start(context.Background(), Spec{Host: "testhost", Argv: []string{"/bin/true"}})
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Start: %v", err)
				}
				p.Wait()
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			var hk *HostKeyError
			if !errors.As(err, &hk) || hk.Host != "testhost" {
				t.Fatalf("not a HostKeyError for testhost: %#v", err)
			}
			for _, m := range tc.wantMsg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("message lacks %q: %v", m, err)
				}
			}
		})
	}
}

func TestSSHAcceptNewRecordsKey(t *testing.T) {
	e := newClientEnv(t)
	os.Remove(e.knownHostsFile())
	b := e.backend(t, func(c *SSHConfig) { c.AcceptNew = true })
	p := startOK(t, b, Spec{Argv: []string{"/bin/true"}})
	p.Wait()
	data, err := os.ReadFile(e.knownHostsFile())
	if err != nil {
		t.Fatal(err)
	}
	want := knownhosts.Line([]string{knownhosts.Normalize(e.srv.addr)}, e.srv.hostKeys[0].PublicKey())
	if strings.TrimSpace(string(data)) != want {
		t.Fatalf("known_hosts = %q, want %q", data, want)
	}
	// Now strict checking passes on the recorded key.
	p = startOK(t, e.backend(t, nil), Spec{Argv: []string{"/bin/true"}})
	if err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	// ssh_config's StrictHostKeyChecking accept-new works as the option does.
	e2 := newClientEnv(t)
	os.Remove(e2.knownHostsFile())
	e2.writeConfig(t, "Host testhost\n  HostName 127.0.0.1\n  Port "+e2.srv.port+"\n  StrictHostKeyChecking accept-new\n")
	p = startOK(t, e2.backend(t, nil), Spec{Argv: []string{"/bin/true"}})
	p.Wait()
	if _, err := os.Stat(e2.knownHostsFile()); err != nil {
		t.Fatal("accept-new from ssh_config did not record the key")
	}
}

// TestSSHHostKeyAlgorithms: the server has ed25519 and ECDSA keys; whichever
// one known_hosts holds must be the one negotiated.
func TestSSHHostKeyAlgorithms(t *testing.T) {
	for i, name := range []string{"ed25519 known", "ecdsa known"} {
		t.Run(name, func(t *testing.T) {
			e := newClientEnv(t, "ed25519", "ecdsa")
			os.Remove(e.knownHostsFile())
			e.addKnown(t, e.srv.hostKeys[i].PublicKey())
			p := startOK(t, e.backend(t, nil), Spec{Argv: []string{"/bin/true"}})
			if err := p.Wait(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestSSHAuthFailures(t *testing.T) {
	t.Run("unauthorized key", func(t *testing.T) {
		e := newClientEnv(t)
		_, other, _ := ed25519.GenerateKey(rand.Reader)
		writeKey(t, filepath.Join(e.home, ".ssh", "id_ed25519"), other, "")
		_, err := e.backend(t, nil).Start(context.Background(), Spec{Host: "testhost", User: "alice", Argv: []string{"/bin/true"}})
		if !errors.Is(err, ErrAuth) {
			t.Fatalf("got %v, want ErrAuth", err)
		}
		for _, m := range []string{"alice@testhost", "id_ed25519", "no ssh-agent"} {
			if !strings.Contains(err.Error(), m) {
				t.Errorf("message lacks %q: %v", m, err)
			}
		}
	})
	t.Run("encrypted key, no agent", func(t *testing.T) {
		e := newClientEnv(t)
		_, priv, _ := ed25519.GenerateKey(rand.Reader)
		writeKey(t, filepath.Join(e.home, ".ssh", "id_ed25519"), priv, "secret")
		start := time.Now()
		_, err := e.backend(t, nil).Start(context.Background(), Spec{Host: "testhost", Argv: []string{"/bin/true"}})
		if !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), "passphrase-protected") {
			t.Fatalf("got %v", err)
		}
		if time.Since(start) > 3*time.Second {
			t.Fatal("auth failure was retried")
		}
	})
}

// TestSSHConfigHonoured: HostName, Port, User and IdentityFile come from
// ~/.ssh/config; the default identity is absent.
func TestSSHConfigHonoured(t *testing.T) {
	e := newClientEnv(t)
	os.Rename(filepath.Join(e.home, ".ssh", "id_ed25519"), filepath.Join(e.home, ".ssh", "cluster_key"))
	e.writeConfig(t, "Host node*\n  HostName 127.0.0.1\n  Port "+e.srv.port+"\n  User mpiuser\n  IdentityFile ~/.ssh/cluster_key\n")
	p := startOK(t, e.backend(t, nil), Spec{Host: "node7", Argv: []string{"/bin/true"}})
	if err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	e.srv.mu.Lock()
	users := e.srv.users
	e.srv.mu.Unlock()
	if len(users) == 0 || users[0] != "mpiuser" {
		t.Fatalf("server saw users %v, want mpiuser", users)
	}
	// UserKnownHostsFile /dev/null with StrictHostKeyChecking no: nothing is
	// known, any key is taken, nothing recorded (a changed key in the
	// default file does not matter, as with OpenSSH).
	os.WriteFile(e.knownHostsFile(), []byte(knownhosts.Line([]string{knownhosts.Normalize(e.srv.addr)}, newSigner(t, "ed25519").PublicKey())+"\n"), 0o600)
	e.writeConfig(t, "Host *\n  HostName 127.0.0.1\n  Port "+e.srv.port+"\n  IdentityFile ~/.ssh/cluster_key\n"+
		"  UserKnownHostsFile /dev/null\n  StrictHostKeyChecking no\n")
	p = startOK(t, e.backend(t, nil), Spec{Host: "any", Argv: []string{"/bin/true"}})
	if err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(e.knownHostsFile()); strings.Count(string(b), "\n") != 1 {
		t.Fatalf("known_hosts changed: %q", b)
	}
	// ... and with strict checking every host is unknown.
	e.writeConfig(t, "Host *\n  HostName 127.0.0.1\n  Port "+e.srv.port+"\n  IdentityFile ~/.ssh/cluster_key\n  UserKnownHostsFile /dev/null\n")
	if _, err := e.backend(t, nil).Start(context.Background(), Spec{Host: "any", Argv: []string{"/bin/true"}}); !errors.Is(err, ErrUnknownHostKey) {
		t.Fatalf("got %v", err)
	}
	os.Remove(e.knownHostsFile())
	e.addKnown(t, e.srv.hostKeys[0].PublicKey())
	// ProxyCommand is refused clearly rather than ignored.
	e.writeConfig(t, "Host behind\n  ProxyCommand nc %h %p\n")
	_, err := e.backend(t, nil).Start(context.Background(), Spec{Host: "behind", Argv: []string{"/bin/true"}})
	if err == nil || !strings.Contains(err.Error(), "ProxyCommand") || !strings.Contains(err.Error(), "-launcher-exec ssh") {
		t.Fatalf("got %v", err)
	}
	// An explicit ConfigFile overrides ~/.ssh/config.
	alt := filepath.Join(t.TempDir(), "cfg")
	os.WriteFile(alt, []byte("Host *\n  HostName 127.0.0.1\n  Port "+e.srv.port+"\n  IdentityFile ~/.ssh/cluster_key\n"), 0o600)
	p = startOK(t, e.backend(t, func(c *SSHConfig) { c.ConfigFile = alt }), Spec{Host: "other", Argv: []string{"/bin/true"}})
	if err := p.Wait(); err != nil {
		t.Fatal(err)
	}
}

// closedPort reserves a loopback port that refuses connections: a bound
// socket that does not listen, so no other process can take the port
// meanwhile. listen starts listening on it.
func closedPort(t *testing.T) (port string, listen func() net.Listener) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "reserved-port")
	t.Cleanup(func() { f.Close() })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(sa.(*syscall.SockaddrInet4).Port), func() net.Listener {
		if err := syscall.Listen(fd, 16); err != nil {
			t.Error(err)
			return nil
		}
		ln, err := net.FileListener(f)
		if err != nil {
			t.Error(err)
		}
		return ln
	}
}

func TestSSHConnectionRefused(t *testing.T) {
	e := newClientEnv(t)
	port, _ := closedPort(t)
	e.writeConfig(t, "Host deadhost\n  HostName 127.0.0.1\n  Port "+port+"\n")
	b := e.backend(t, func(c *SSHConfig) { c.ConnectTimeout = 3 * time.Second })
	start := time.Now()
	_, err := b.Start(context.Background(), Spec{Host: "deadhost", Argv: []string{"/bin/true"}})
	d := time.Since(start)
	if !errors.Is(err, syscall.ECONNREFUSED) || !strings.Contains(err.Error(), "127.0.0.1:"+port) ||
		!strings.Contains(err.Error(), "deadhost") || !strings.Contains(err.Error(), "4 attempts") {
		t.Fatalf("got %v", err)
	}
	// 3 retries back off 250+500+1000 ms.
	if d < 1700*time.Millisecond || d > 3*time.Second {
		t.Fatalf("failed after %v", d)
	}
}

// TestSSHRetryUntilUp: sshd starts listening 600ms after the first try.
func TestSSHRetryUntilUp(t *testing.T) {
	e := newClientEnv(t)
	port, listen := closedPort(t)
	e.writeConfig(t, "Host testhost\n  HostName 127.0.0.1\n  Port "+port+"\n")
	os.WriteFile(e.knownHostsFile(), []byte(knownhosts.Line([]string{knownhosts.Normalize("127.0.0.1:" + port)}, e.srv.hostKeys[0].PublicKey())+"\n"), 0o600)
	go func() {
		time.Sleep(600 * time.Millisecond)
		if ln := listen(); ln != nil {
			serveRelay(t, ln, e.srv.addr, nil)
		}
	}()
	p := startOK(t, e.backend(t, nil), Spec{Argv: []string{"/bin/true"}})
	if err := p.Wait(); err != nil {
		t.Fatal(err)
	}
}

func TestSSHKeepaliveEndsFrozenConnection(t *testing.T) {
	e := newClientEnv(t)
	var paused atomic.Bool
	addr, _ := relay(t, "127.0.0.1:0", e.srv.addr, &paused)
	_, port, _ := net.SplitHostPort(addr)
	e.writeConfig(t, "Host testhost\n  HostName 127.0.0.1\n  Port "+port+"\n")
	os.WriteFile(e.knownHostsFile(), []byte(knownhosts.Line([]string{knownhosts.Normalize(addr)}, e.srv.hostKeys[0].PublicKey())+"\n"), 0o600)
	b := e.backend(t, func(c *SSHConfig) { c.KeepaliveInterval = 100 * time.Millisecond; c.KeepaliveCountMax = 3 })
	p := startOK(t, b, Spec{Argv: []string{"/bin/cat"}})
	p.Write([]byte("x\n"))
	buf := make([]byte, 10)
	if _, err := p.Read(buf); err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond) // keepalives are answered meanwhile
	paused.Store(true)
	start := time.Now()
	errc := make(chan error, 1)
	go func() {
		_, err := p.Read(buf)
		errc <- err
	}()
	select {
	case err := <-errc:
		if !errors.Is(err, ErrConnectionLost) || !strings.Contains(err.Error(), "testhost") {
			t.Fatalf("Read: %v, want ErrConnectionLost naming the host", err)
		}
		if d := time.Since(start); d > 4*time.Second { // 3 x 100ms, with room for a loaded machine
			t.Fatalf("took %v", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Read still blocked 5s after the connection froze")
	}
	if err := p.Wait(); !errors.Is(err, ErrConnectionLost) {
		t.Fatalf("Wait: %v", err)
	}
}

func TestSSHContextCancelsHandshake(t *testing.T) {
	e := newClientEnv(t)
	// A listener that accepts and never speaks.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	e.writeConfig(t, "Host mute\n  HostName 127.0.0.1\n  Port "+port+"\n")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = e.backend(t, nil).Start(ctx, Spec{Host: "mute", Argv: []string{"/bin/true"}})
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Fatalf("after %v: %v", time.Since(start), err)
	}
	// Without a caller deadline, ConnectTimeout bounds it.
	b := e.backend(t, func(c *SSHConfig) { c.ConnectTimeout = 400 * time.Millisecond })
	start = time.Now()
	_, err = b.Start(context.Background(), Spec{Host: "mute", Argv: []string{"/bin/true"}})
	if err == nil || !strings.Contains(err.Error(), "mute") || !strings.Contains(err.Error(), "no connection within 400ms") ||
		time.Since(start) > 2*time.Second {
		t.Fatalf("after %v: %v", time.Since(start), err)
	}
}

func TestSSHProxyUpload(t *testing.T) {
	e := newClientEnv(t)
	local := filepath.Join(t.TempDir(), "gompi-proxy")
	os.WriteFile(local, []byte("#!/bin/sh\necho proxy-up \"$@\"\nexec cat\n"), 0o755)
	b := e.backend(t, func(c *SSHConfig) { c.LocalProxy = local })
	sum, err := b.localHash(local)
	if err != nil {
		t.Fatal(err)
	}
	cached := filepath.Join(e.srv.remoteHome, ".cache", "gompi", "proxy-"+sum)
	uploads := func() int {
		n := 0
		for _, c := range e.srv.commands() {
			if strings.Contains(c, `cat > "$t"`) {
				n++
			}
		}
		return n
	}
	for round := 1; round <= 2; round++ {
		p := startOK(t, b, Spec{Argv: []string{"/nonexistent/gompi-proxy", "-x"}})
		line, err := bufio.NewReader(p).ReadString('\n')
		if err != nil || line != "proxy-up -x\n" {
			t.Fatalf("round %d: read %q, %v", round, line, err)
		}
		p.Close()
		if err := p.Wait(); err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(cached)
		if err != nil || st.Mode().Perm() != 0o755 {
			t.Fatalf("round %d: cached proxy %v %v", round, st, err)
		}
		if n := uploads(); n != 1 {
			t.Fatalf("round %d: %d uploads, want 1 (then reuse)", round, n)
		}
	}
	leftovers, _ := filepath.Glob(filepath.Join(e.srv.remoteHome, ".cache", "gompi", ".proxy-*"))
	if len(leftovers) > 0 {
		t.Errorf("temporary files left: %v", leftovers)
	}

	// A different build at the configured path is replaced by ours.
	stale := filepath.Join(e.srv.remoteHome, "stale-proxy")
	os.WriteFile(stale, []byte("#!/bin/sh\necho stale\n"), 0o755)
	p := startOK(t, b, Spec{Argv: []string{stale}})
	if line, _ := bufio.NewReader(p).ReadString('\n'); line != "proxy-up\n" {
		t.Fatalf("ran %q, want the uploaded proxy", line)
	}
	p.Close()
	p.Wait()

	// -no-proxy-upload: a missing proxy is an error naming host and path.
	nb := e.backend(t, func(c *SSHConfig) { c.LocalProxy = local; c.NoProxyUpload = true })
	_, err = nb.Start(context.Background(), Spec{Host: "testhost", Argv: []string{"/nonexistent/gompi-proxy"}})
	if !errors.Is(err, ErrProxyMissing) || !strings.Contains(err.Error(), "testhost") ||
		!strings.Contains(err.Error(), "/nonexistent/gompi-proxy") || !strings.Contains(err.Error(), "-no-proxy-upload") {
		t.Fatalf("got %v", err)
	}
	// A bare name is looked up in the remote PATH.
	_, err = nb.Start(context.Background(), Spec{Host: "testhost", Argv: []string{"no-such-gompi-proxy"}})
	if !errors.Is(err, ErrProxyMissing) {
		t.Fatalf("got %v", err)
	}
	p = startOK(t, nb, Spec{Argv: []string{"sh", "-c", "echo via PATH"}})
	if line, _ := bufio.NewReader(p).ReadString('\n'); line != "via PATH\n" {
		t.Fatalf("ran %q", line)
	}
	p.Wait()
	// ... and a present one is used as is.
	p = startOK(t, nb, Spec{Argv: []string{stale}})
	if line, _ := bufio.NewReader(p).ReadString('\n'); line != "stale\n" {
		t.Fatalf("ran %q, want the host's own proxy", line)
	}
}

func TestUnameMatches(t *testing.T) {
	tests := []struct {
		uname, goos, goarch string
		want                bool
	}{
		{"Linux x86_64", "linux", "amd64", true},
		{"Linux aarch64", "linux", "arm64", true},
		{"Linux aarch64", "linux", "amd64", false},
		{"Darwin arm64", "darwin", "arm64", true},
		{"Darwin arm64", "linux", "arm64", false},
		{"FreeBSD amd64", "freebsd", "amd64", true},
		{"Linux i686", "linux", "386", true},
		{"", "linux", "amd64", false},
		{"Linux", "linux", "amd64", false},
	}
	for _, tc := range tests {
		if got := unameMatches(tc.uname, tc.goos, tc.goarch); got != tc.want {
			t.Errorf("unameMatches(%q, %s/%s) = %v", tc.uname, tc.goos, tc.goarch, got)
		}
	}
	// The probe reports this machine as matching itself.
	out, err := exec.Command("uname", "-sm").Output()
	if err == nil && !unameMatches(strings.TrimSpace(string(out)), runtime.GOOS, runtime.GOARCH) {
		t.Errorf("local uname %q does not match %s/%s", out, runtime.GOOS, runtime.GOARCH)
	}
}

func TestParseProbe(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	r, err := parseProbe("Linux x86_64\nhome=/home/u\nproxy=present " + sum + "\ncached=yes\n")
	if err != nil || r.uname != "Linux x86_64" || r.home != "/home/u" || !r.present || r.sum != sum || !r.cached {
		t.Fatalf("%+v %v", r, err)
	}
	r, err = parseProbe("Linux x86_64\nhome=/h\nproxy=present \n")
	if err != nil || !r.present || r.sum != "" || r.cached {
		t.Fatalf("%+v %v", r, err)
	}
	for _, bad := range []string{"", "Linux\n", "Linux x\nhome=relative\nproxy=missing\n", "motd\nhome=/h\n",
		"Linux x\nhome=/\nproxy=present " + sum + "\nproxy\n"} {
		if _, err := parseProbe(bad); err == nil {
			t.Errorf("parseProbe(%q) accepted", bad)
		}
	}
	// The real script, run by a local shell, parses.
	out, err := exec.Command("/bin/sh", "-c", probeScript("/bin/sh", sum)).Output()
	if err != nil {
		t.Fatal(err)
	}
	if r, err := parseProbe(string(out)); err != nil || !r.present || len(r.sum) != 64 || r.cached {
		t.Fatalf("%q: %+v %v", out, r, err)
	}
}

func FuzzParseProbe(f *testing.F) {
	f.Add("Linux x86_64\nhome=/home/u\nproxy=present " + strings.Repeat("0", 64) + "\ncached=no\n")
	f.Add("Linux x86_64\nhome=/\nproxy=missing\n")
	f.Fuzz(func(t *testing.T, s string) {
		r, err := parseProbe(s)
		if err != nil {
			return
		}
		if !strings.HasPrefix(r.home, "/") || (r.sum != "" && !isHexSum(r.sum)) || (r.sum != "" && !r.present) {
			t.Fatalf("inconsistent %+v from %q", r, s)
		}
	})
}

func TestNewSSHConfig(t *testing.T) {
	home := t.TempDir()
	b, err := NewSSH(SSHConfig{Home: home})
	if err != nil {
		t.Fatal(err)
	}
	c := b.cfg
	if c.ConnectTimeout != 10*time.Second || c.Retries != 3 || c.KeepaliveInterval != 2*time.Second ||
		c.KeepaliveCountMax != 3 || c.KnownHosts[0] != home+"/.ssh/known_hosts" {
		t.Fatalf("defaults: %+v", c)
	}
	for _, bad := range []SSHConfig{
		{Home: home, ConnectTimeout: -1},
		{Home: home, KeepaliveCountMax: -1},
		{Home: home, ConfigFile: filepath.Join(home, "missing")},
	} {
		if _, err := NewSSH(bad); err == nil {
			t.Errorf("NewSSH(%+v) accepted", bad)
		}
	}
	t.Setenv("HOME", home)
	if b, err := NewSSH(SSHConfig{}); err != nil || b.cfg.Home != home {
		t.Fatalf("HOME not used: %v", err)
	}
}

// The run script quotes every word of the proxy's environment and
// arguments: the remote side hands it to a login shell.
func TestRunScriptQuoting(t *testing.T) {
	script := runScript(runSpec{proxy: "/bin/sh", fixed: true, env: []string{"V=a b'c", "W=$HOME"},
		args: []string{"-c", `printf '%s|%s' "$V" "$W"`}})
	out, err := exec.Command("/bin/sh", "-c", script).Output()
	if want := probeRun + "/bin/sh\na b'c|$HOME"; err != nil || string(out) != want {
		t.Fatalf("got %q %v, want %q", out, err, want)
	}
}

// TestSSHAgentAuth: with no identity files, the key comes from ssh-agent
// at $SSH_AUTH_SOCK.
func TestSSHAgentAuth(t *testing.T) {
	e := newClientEnv(t)
	pemBytes, _ := os.ReadFile(filepath.Join(e.home, ".ssh", "id_ed25519"))
	os.Remove(filepath.Join(e.home, ".ssh", "id_ed25519"))
	raw, err := ssh.ParseRawPrivateKey(pemBytes)
	if err != nil {
		t.Fatal(err)
	}
	keyring := agent.NewKeyring()
	if err := keyring.Add(agent.AddedKey{PrivateKey: raw}); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { agent.ServeAgent(keyring, c); c.Close() }()
		}
	}()
	t.Setenv("SSH_AUTH_SOCK", sock)
	b, err := NewSSH(SSHConfig{Home: e.home})
	if err != nil {
		t.Fatal(err)
	}
	p := startOK(t, b, Spec{Argv: []string{"/bin/true"}})
	if err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	// Without the agent the same setup fails, saying so.
	_, err = e.backend(t, nil).Start(context.Background(), Spec{Host: "testhost", Argv: []string{"/bin/true"}})
	if !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), "no ssh-agent") || !strings.Contains(err.Error(), "no usable") {
		t.Fatalf("got %v", err)
	}
}

// TestSSHProxyJump reaches the target through a jump host named by
// ProxyJump; the jump connection ends with the proxy.
func TestSSHProxyJump(t *testing.T) {
	e := newClientEnv(t)
	bastion := startServer(t, e.signer.PublicKey())
	e.addKnownAt(t, bastion.addr, bastion.hostKeys[0].PublicKey())
	e.writeConfig(t, "Host bastion\n  HostName 127.0.0.1\n  Port "+bastion.port+"\n"+
		"Host target\n  HostName 127.0.0.1\n  Port "+e.srv.port+"\n  ProxyJump bastion\n")
	p := startOK(t, e.backend(t, nil), Spec{Host: "target", Argv: []string{"/bin/sh", "-c", "echo through"}})
	if line, err := bufio.NewReader(p).ReadString('\n'); err != nil || line != "through\n" {
		t.Fatalf("read %q, %v", line, err)
	}
	if err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	bastion.mu.Lock()
	tunnels, cmds := bastion.tunnel, len(bastion.cmds)
	bastion.mu.Unlock()
	if tunnels != 1 || cmds != 0 || len(e.srv.commands()) == 0 {
		t.Fatalf("bastion: %d tunnels, %d commands; target: %d commands", tunnels, cmds, len(e.srv.commands()))
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		bastion.mu.Lock()
		n := bastion.active
		bastion.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("jump connection still open after Wait")
		}
		time.Sleep(20 * time.Millisecond)
	}

	// An unknown jump host key is an error naming the jump host.
	e2 := newClientEnv(t)
	b2 := startServer(t, e2.signer.PublicKey())
	e2.writeConfig(t, "Host bastion\n  HostName 127.0.0.1\n  Port "+b2.port+"\n"+
		"Host target\n  HostName 127.0.0.1\n  Port "+e2.srv.port+"\n  ProxyJump bastion\n")
	_, err := e2.backend(t, nil).Start(context.Background(), Spec{Host: "target", Argv: []string{"/bin/true"}})
	var hk *HostKeyError
	if !errors.As(err, &hk) || hk.Host != "bastion" || !strings.Contains(err.Error(), "jump host") {
		t.Fatalf("got %v", err)
	}
}

// TestSSHNoGoroutineLeak: successful and failed starts leave nothing
// running once their Procs are waited for.
func TestSSHNoGoroutineLeak(t *testing.T) {
	e := newClientEnv(t)
	port, _ := closedPort(t)
	e.writeConfig(t, "Host testhost\n  HostName 127.0.0.1\n  Port "+e.srv.port+"\nHost dead\n  HostName 127.0.0.1\n  Port "+port+"\n")
	b := e.backend(t, func(c *SSHConfig) { c.KeepaliveInterval = 50 * time.Millisecond; c.Retries = -1 })
	base := runtime.NumGoroutine()
	for i := 0; i < 3; i++ {
		p, err := b.Start(context.Background(), Spec{Host: "testhost", Argv: []string{"/bin/cat"}})
		if err != nil {
			t.Fatal(err)
		}
		p.Write([]byte("x"))
		p.Read(make([]byte, 1))
		time.Sleep(120 * time.Millisecond) // a keepalive or two in flight
		if i == 2 {
			p.Kill()
		} else {
			p.Close()
		}
		p.Wait()
		if _, err := b.Start(context.Background(), Spec{Host: "dead", Argv: []string{"/bin/true"}}); err == nil {
			t.Fatal("dead host started")
		}
		if _, err := b.Start(context.Background(), Spec{Host: "testhost", User: "x", Argv: []string{"/nonexistent/proxy"}}); err == nil {
			t.Fatal("missing proxy started")
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines, %d before:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}
