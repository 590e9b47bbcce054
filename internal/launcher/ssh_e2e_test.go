package launcher_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gompi/gompi/hostfile"
	"github.com/gompi/gompi/internal/launcher"
	"github.com/gompi/gompi/internal/mpiexec"
	"github.com/gompi/gompi/internal/testkit"
)

// buildProxy builds the real gompi-proxy for the jobs below.
func buildProxy(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds gompi-proxy")
	}
	dir := t.TempDir()
	if err := testkit.Build(dir, testkit.Pkg("cmd/gompi-proxy")); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "gompi-proxy")
}

func sshJob(t *testing.T, srv *launcher.TestSSHServer, proxy string, argv ...string) (mpiexec.Config, *testkit.Buffer, *testkit.Buffer) {
	b, err := launcher.NewSSH(launcher.SSHConfig{Home: srv.Home, AgentSocket: "none", LocalProxy: proxy})
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr testkit.Buffer
	return mpiexec.Config{
		Hosts:    []hostfile.Host{{Name: "node1", Slots: 2}, {Name: "node2", Slots: 2}},
		Segments: []mpiexec.Segment{{Argv: argv, N: 4, Wdir: t.TempDir()}},
		Env:      []string{"PATH=/usr/bin:/bin"},
		// Not on the "hosts": both upload the local one, concurrently, into
		// the same remote home.
		ProxyPath:   "/nonexistent/gompi-proxy",
		Backend:     func(hostfile.Host) launcher.Backend { return b },
		PrependRank: true,
		Stdout:      &stdout,
		Stderr:      &stderr,
	}, &stdout, &stderr
}

// TestSSHJob runs a 4-rank job on two "hosts" through the built-in SSH
// client and the real proxy, uploaded on first use.
func TestSSHJob(t *testing.T) {
	proxy := buildProxy(t)
	srv := launcher.NewTestSSHServer(t)
	for round := 0; round < 2; round++ {
		cfg, stdout, stderr := sshJob(t, srv, proxy, "/bin/sh", "-c", `echo "rank $PMI_RANK of $PMI_SIZE"`)
		code, err := mpiexec.Run(context.Background(), cfg)
		if err != nil || code != 0 {
			t.Fatalf("round %d: code %d, %v\n%s", round, code, err, stderr)
		}
		for _, r := range []string{"0", "1", "2", "3"} {
			if !strings.Contains(stdout.String(), "["+r+"] rank "+r+" of 4\n") {
				t.Fatalf("round %d: rank %s missing in\n%s\nstderr:\n%s", round, r, stdout, stderr)
			}
		}
	}
	cached, _ := filepath.Glob(filepath.Join(srv.RemoteHome, ".cache", "gompi", "*"))
	if len(cached) != 1 {
		t.Fatalf("remote cache holds %v, want one proxy", cached)
	}
}

// TestSSHJobNetworkCut: the network to the hosts freezes mid-job; keepalives
// notice and the job ends well within 15 s.
func TestSSHJobNetworkCut(t *testing.T) {
	proxy := buildProxy(t)
	srv := launcher.NewTestSSHServer(t)
	marker := fmt.Sprintf("%d.%d", 100+os.Getpid()%1000, time.Now().UnixNano()%1000) // unique sleep argument
	cfg, _, stderr := sshJob(t, srv, proxy, "/bin/sh", "-c", `echo up; exec sleep `+marker)
	cfg.Grace = 500 * time.Millisecond
	go func() {
		for !strings.Contains(cfg.Stdout.(*testkit.Buffer).String(), "[3] up") {
			time.Sleep(20 * time.Millisecond)
		}
		srv.Freeze()
	}()
	start := time.Now()
	code, err := mpiexec.Run(context.Background(), cfg)
	if d := time.Since(start); d > 15*time.Second {
		t.Fatalf("job ended %v after start", d)
	}
	if code != mpiexec.ExitInternal || !strings.Contains(stderr.String(), "node") {
		t.Fatalf("code %d, %v, stderr:\n%s", code, err, stderr)
	}
	// Once sshd drops the dead connection, the proxies see their launcher
	// gone and take their ranks with them.
	srv.Drop()
	deadline := time.Now().Add(5 * time.Second)
	for {
		out, _ := exec.Command("pgrep", "-f", "sleep "+marker).Output()
		if len(bytes.TrimSpace(out)) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ranks still running: %s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
