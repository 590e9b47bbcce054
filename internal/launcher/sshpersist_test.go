package launcher

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gompi/gompi/internal/persist"
	"github.com/gompi/gompi/internal/testkit"
)

// testProxyEnv makes this test binary an echo "proxy" that first names its
// PID and parent on stderr; with persist's flags it is the daemon.
const testProxyEnv = "GOMPI_LAUNCHER_TEST_PROXY"

func TestMain(m *testing.M) {
	if code, ok := persist.Main(os.Args[1:], os.Stdout); ok {
		os.Exit(code)
	}
	if os.Getenv(testProxyEnv) == "echo" {
		fmt.Fprintf(os.Stderr, "proxy %d %d\n", os.Getpid(), os.Getppid())
		io.Copy(os.Stdout, os.Stdin)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestSSHPersistentProxy: the first launch logs in and leaves a persistent
// proxy; the next ones reach it over a direct-streamlocal channel (no
// session on the server) with stdin, stdout, stderr, environment, EOF and
// Kill working as through a session; a forged record is refused and
// replaced through a login.
func TestSSHPersistentProxy(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	e := newClientEnv(t)
	b := e.backend(t, func(c *SSHConfig) { c.Persist = time.Minute; c.NoProxyUpload = true })
	spec := func(stderr io.Writer) Spec {
		return Spec{Argv: []string{exe}, Env: []string{testProxyEnv + "=echo"}, Stderr: stderr}
	}
	t.Cleanup(func() {
		pids, _ := filepath.Glob(filepath.Join(e.srv.remoteHome, "tmp", "gompi-*", "p-*.pid"))
		for _, f := range pids {
			b, _ := os.ReadFile(f)
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				syscall.Kill(pid, syscall.SIGTERM)
			}
		}
	})
	// echo checks a round trip and returns the proxy's PID and parent.
	echo := func(p Proc, stderr *testkit.Buffer) (pid, ppid int) {
		t.Helper()
		if _, err := io.WriteString(p, "hello\n"); err != nil {
			t.Fatal(err)
		}
		if line, err := bufio.NewReader(p).ReadString('\n'); err != nil || line != "hello\n" {
			t.Fatalf("read %q, %v", line, err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(stderr.String(), "\n") {
			if time.Now().After(deadline) {
				t.Fatalf("no stderr from the proxy: %q", stderr.String())
			}
			time.Sleep(5 * time.Millisecond)
		}
		if _, err := fmt.Sscanf(stderr.String(), "proxy %d %d", &pid, &ppid); err != nil {
			t.Fatalf("stderr %q", stderr.String())
		}
		return pid, ppid
	}
	daemonPID := func() int {
		t.Helper()
		f, _ := filepath.Glob(filepath.Join(e.srv.remoteHome, "tmp", "gompi-*", "p-*.pid"))
		if len(f) != 1 {
			t.Fatalf("pid files %v, want one", f)
		}
		b, _ := os.ReadFile(f[0])
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return pid
	}

	// Cold: one session, which also starts the daemon.
	var stderr testkit.Buffer
	p := startOK(t, b, spec(&stderr))
	echo(p, &stderr)
	p.Close()
	if err := p.Wait(); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	sessions := len(e.srv.commands())
	if sessions != 1 {
		t.Fatalf("%d sessions for the first launch, want 1", sessions)
	}
	recs, _ := filepath.Glob(filepath.Join(e.home, PersistCacheDir, "*"))
	if len(recs) != 1 {
		t.Fatalf("records %v, want one", recs)
	}
	daemon := daemonPID()

	// Warm: no session; the proxy is the daemon's child; closing stdin
	// ends it and Wait returns.
	for round := 0; round < 2; round++ {
		var stderr testkit.Buffer
		p := startOK(t, b, spec(&stderr))
		pid, ppid := echo(p, &stderr)
		if ppid != daemon {
			t.Fatalf("proxy %d is a child of %d, not of the persistent proxy %d", pid, ppid, daemon)
		}
		p.Close()
		if err := p.Wait(); err != nil {
			t.Fatalf("Wait: %v", err)
		}
		if n := len(e.srv.commands()); n != sessions {
			t.Fatalf("a warm launch opened a session: %v", e.srv.commands())
		}
		if !gone(pid, 5*time.Second) {
			t.Fatalf("proxy %d still running after EOF", pid)
		}
	}

	// Kill ends a warm proxy promptly.
	stderr = testkit.Buffer{}
	p = startOK(t, b, spec(&stderr))
	pid, _ := echo(p, &stderr)
	start := time.Now()
	p.Kill()
	p.Wait()
	if !gone(pid, 5*time.Second) {
		t.Fatalf("proxy %d still running after Kill", pid)
	}
	// (About 1 s under -race: the race runtime sleeps at exit.)
	t.Logf("Kill+Wait+exit in %v", time.Since(start).Round(time.Millisecond))

	// A record whose token the daemon does not know: refused, with a
	// launch through a login instead, which records the real one again.
	orig, _ := os.ReadFile(recs[0])
	f := strings.Fields(string(orig))
	os.WriteFile(recs[0], []byte(strings.Join(f[:len(f)-1], " ")+" "+strings.Repeat("0", 64)+"\n"), 0o600)
	logs := &testkit.Buffer{}
	b2 := e.backend(t, func(c *SSHConfig) {
		c.Persist = time.Minute
		c.NoProxyUpload = true
		c.Log = slog.New(slog.NewTextHandler(logs, nil))
	})
	stderr = testkit.Buffer{}
	p = startOK(t, b2, spec(&stderr))
	echo(p, &stderr)
	p.Close()
	p.Wait()
	if n := len(e.srv.commands()); n != sessions+1 {
		t.Fatalf("%d sessions, want a login after the refusal", n-sessions)
	}
	if !strings.Contains(logs.String(), "refusing a persistent proxy socket") || !strings.Contains(logs.String(), "authentication failed") {
		t.Fatalf("log: %s", logs.String())
	}
	if now, _ := os.ReadFile(recs[0]); string(now) != string(orig) {
		t.Fatalf("record %q, want %q again", now, orig)
	}
	if daemonPID() != daemon {
		t.Fatal("the daemon was replaced")
	}
}

// gone waits up to d for pid to exit (its parent reaps it).
func gone(pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return true
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err == nil && strings.Contains(string(b), ") Z ") {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}
