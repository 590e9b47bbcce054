package launcher

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gompi/gompi/internal/portrange"
)

// fakeSrun writes an srun stand-in: body runs with $hosts set to the
// --nodelist hosts (space-separated) and "$@" the proxy command.
func fakeSrun(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "srun")
	script := `#!/bin/sh
hosts=""
while [ $# -gt 0 ]; do
  case "$1" in
    --nodelist=*) hosts=$(echo "${1#--nodelist=}" | tr , ' ') ;;
    --*) ;;
    *) break ;;
  esac
  shift
done
` + body
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestHelperConnectBackProxy is not a test: the fake srun runs the test
// binary as a "proxy" that connects back and echoes its session.
func TestHelperConnectBackProxy(t *testing.T) {
	if os.Getenv("GOMPI_TEST_FAKE_PROXY") == "" {
		t.Skip("helper process")
	}
	addrs, err := ParseConnectEnv(os.Getenv(ConnectEnv), os.Getenv("SLURM_LAUNCH_NODE_IPADDR"))
	if err != nil {
		t.Fatal(err)
	}
	secret, err := ParseSecret(os.Getenv(ConnectSecretEnv))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := DialConnectBack(context.Background(), addrs, secret, os.Getenv("SLURMD_NODENAME"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(conn, conn)
	conn.Close()
}

func TestSlurmBackendFakeSrun(t *testing.T) {
	// Without SLURM_OVERLAP the step could wait for the previous one's
	// memory (OverlapEnv): this srun refuses to start.
	srun := fakeSrun(t, `[ "$SLURM_OVERLAP" = 1 ] || { echo "srun: step creation temporarily disabled (SLURM_OVERLAP unset)" >&2; exit 1; }
for h in $hosts; do SLURMD_NODENAME=$h GOMPI_TEST_FAKE_PROXY=1 "$@" & done; wait`)
	var stderr bytes.Buffer
	be, err := NewSlurm(SlurmConfig{Srun: srun, Listen: "127.0.0.1:0", Advertise: nil, Stderr: &stderr, ConnectTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	hosts := []string{"h1", "h2", "h3"}
	be.Expect(hosts)
	argv := []string{os.Args[0], "-test.run=^TestHelperConnectBackProxy$"}
	procs := make([]Proc, len(hosts))
	errs := make(chan error, len(hosts))
	for i, h := range hosts {
		go func(i int, h string) {
			p, err := be.Start(context.Background(), Spec{Host: h, Argv: argv})
			procs[i] = p
			errs <- err
		}(i, h)
	}
	for range hosts {
		if err := <-errs; err != nil {
			t.Fatalf("start: %v\nsrun output: %s", err, stderr.String())
		}
	}
	for i, p := range procs {
		msg := "hello " + hosts[i]
		if _, err := p.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(p, buf); err != nil || string(buf) != msg {
			t.Fatalf("%s echoed %q, %v", hosts[i], buf, err)
		}
	}
	if _, err := be.Start(context.Background(), Spec{Host: "h9", Argv: argv}); err == nil || !strings.Contains(err.Error(), "h9") {
		t.Errorf("start of a host not announced: %v", err)
	}
	done := make(chan struct{})
	go func() {
		for _, p := range procs {
			p.Close()
			p.Wait()
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("procs did not end after Close")
	}
	select {
	case <-be.srunDone:
	default:
		t.Fatal("srun still running after every proc was waited for")
	}
}

func TestSlurmBackendFailures(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		timeout    time.Duration
		want       []string
	}{
		{"srun fails", `echo "srun: error: Unable to create step for job 42: Invalid node name specified" >&2; exit 1`, 20 * time.Second,
			[]string{"srun ended before the proxy on h1 connected back", "Invalid node name specified"}},
		{"proxy never connects", `sleep 30`, 300 * time.Millisecond,
			[]string{"proxy on h1 did not connect back within 300ms"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			be, err := NewSlurm(SlurmConfig{Srun: fakeSrun(t, tc.body), Listen: "127.0.0.1:0", ConnectTimeout: tc.timeout})
			if err != nil {
				t.Fatal(err)
			}
			defer be.Close()
			be.Expect([]string{"h1"})
			_, err = be.Start(context.Background(), Spec{Host: "h1", Argv: []string{"/bin/true"}})
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	// srun's messages shown on Stderr are not repeated in the error.
	var stderr bytes.Buffer
	be, err := NewSlurm(SlurmConfig{Srun: fakeSrun(t, `echo "srun: error: Invalid node name specified" >&2; exit 1`),
		Listen: "127.0.0.1:0", ConnectTimeout: 20 * time.Second, Stderr: &stderr})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	be.Expect([]string{"h1"})
	_, err = be.Start(context.Background(), Spec{Host: "h1", Argv: []string{"/bin/true"}})
	if err == nil || strings.Contains(err.Error(), "Invalid node name") || !strings.Contains(err.Error(), "srun's messages above") ||
		!strings.Contains(stderr.String(), "Invalid node name") {
		t.Errorf("srun's error shown on Stderr (%q) and in the error: %v", stderr.String(), err)
	}
	if _, err := NewSlurm(SlurmConfig{Srun: "/nonexistent/srun"}); err == nil || !strings.Contains(err.Error(), "/nonexistent/srun") {
		t.Errorf("missing srun: %v", err)
	}
}

func TestSrunArgs(t *testing.T) {
	got := strings.Join(SrunArgs("srun", []string{"--partition=p"}, []string{"a", "b"}, []string{"/x/gompi-proxy"}), " ")
	want := "srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --nodelist=a,b --input=none --mpi=none --kill-on-bad-exit=1 --export=ALL --job-name=gompi-proxy --partition=p /x/gompi-proxy"
	if got != want {
		t.Fatalf("SrunArgs:\n got %s\nwant %s", got, want)
	}
}

// A proxy that finishes (its connection closed) before another host's
// proxy has connected back does not end the step for the others: the
// listener stays open until every expected proxy has connected and
// closed. (Proxies exit as soon as their own ranks are done, so the first
// node can be finished before srun has started the last one's proxy.)
func TestSlurmEarlyFinisherKeepsListener(t *testing.T) {
	// h1's proxy starts at once; h2's only when h1's has gone.
	srun := fakeSrun(t, `set -- "$@"
SLURMD_NODENAME=h1 GOMPI_TEST_FAKE_PROXY=1 "$@"
SLURMD_NODENAME=h2 GOMPI_TEST_FAKE_PROXY=1 "$@"`)
	var stderr bytes.Buffer
	be, err := NewSlurm(SlurmConfig{Srun: srun, Listen: "127.0.0.1:0", Stderr: &stderr, ConnectTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	be.Expect([]string{"h1", "h2"})
	argv := []string{os.Args[0], "-test.run=^TestHelperConnectBackProxy$"}
	h2 := make(chan error, 1)
	var p2 Proc
	p1, err := be.Start(context.Background(), Spec{Host: "h1", Argv: argv})
	if err != nil {
		t.Fatalf("h1: %v (%s)", err, stderr.String())
	}
	go func() {
		var err error
		p2, err = be.Start(context.Background(), Spec{Host: "h2", Argv: argv})
		h2 <- err
	}()
	// h1 finishes first: the launcher closes its session.
	p1.Close()
	if err := <-h2; err != nil {
		t.Fatalf("h2 after h1 finished: %v (%s)", err, stderr.String())
	}
	msg := []byte("still here")
	if _, err := p2.Write(msg); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(p2, buf); err != nil || !bytes.Equal(buf, msg) {
		t.Fatalf("h2 echoed %q, %v", buf, err)
	}
	p2.Close()
	done := make(chan struct{})
	go func() { p1.Wait(); p2.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("procs did not end after Close")
	}
	select {
	case <-be.srunDone:
	default:
		t.Fatal("srun still running after every proc was waited for")
	}
}

// Behind a firewall's port range the proxies connect back to a port of it.
func TestSlurmListenPortRange(t *testing.T) {
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lo := probe.Addr().(*net.TCPAddr).Port
	probe.Close()
	if lo > 65000 {
		lo = 42000
	}
	r := portrange.Range{Lo: lo, Hi: lo + 7, From: "MPIEXEC_PORT_RANGE"}
	be, err := NewSlurm(SlurmConfig{Srun: fakeSrun(t, "exit 0"), Listen: "127.0.0.1:0", Ports: r})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	p := be.ln.Addr().(*net.TCPAddr).Port
	if p < r.Lo || p > r.Hi || len(be.cfg.Advertise) != 1 || be.cfg.Advertise[0] != fmt.Sprintf("127.0.0.1:%d", p) {
		t.Fatalf("listening on %d (range %d-%d), advertised %v", p, r.Lo, r.Hi, be.cfg.Advertise)
	}
}
