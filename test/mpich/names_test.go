package mpich

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gompi/gompi/internal/testkit"
)

// startNameServer runs argv with -port PORT on a free port and waits until
// it listens; it returns HOST:PORT.
func startNameServer(t *testing.T, argv ...string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	cmd := exec.Command(argv[0], append(argv[1:], "-port", port)...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr := "127.0.0.1:" + port
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not listen on %s", argv[0], addr)
		}
	}
}

// TestNameserverAcrossJobs: with -nameserver, a name one job publishes
// (MPI_Publish_name) is what another job's ranks look up, until it is
// unpublished, whichever of gompi-nameserver and MPICH's hydra_nameserver
// keeps the names and whichever of gompiexec and mpiexec.hydra runs the
// jobs. Without -nameserver names stay inside a job, as under Hydra.
func TestNameserverAcrossJobs(t *testing.T) {
	needSetup(t)
	launchers := [][]string{mpiexec}
	if hydra, err := exec.LookPath("mpiexec.hydra"); err == nil && mpiexec[0] != hydra {
		launchers = append(launchers, []string{hydra})
	}
	servers := [][]string{{prog("gompi-nameserver")}}
	if ns, err := exec.LookPath("hydra_nameserver"); err == nil {
		servers = append(servers, []string{ns})
	} else if os.Getenv("CI") != "" {
		t.Fatal("MPICH's hydra_nameserver is not installed (test/setup.sh installs mpich)")
	}
	for _, srv := range servers {
		t.Run(filepath.Base(srv[0]), func(t *testing.T) {
			ns := startNameServer(t, srv...)
			name := fmt.Sprintf("gompi-svc-%d", os.Getpid())
			dir := t.TempDir()
			ready, done := filepath.Join(dir, "ready"), filepath.Join(dir, "done")
			pub := testkit.NewJob("", "", mpiexec[0], append(mpiexec[1:], "-nameserver", ns, "-n", "1",
				prog("names"), "publish", name, "tcp://10.1.2.3:4242", ready, done)...)
			if err := pub.Start(); err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				if _, err := os.Stat(ready); err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the publishing job did not publish")
				}
			}
			lookup := func(l []string, want string) {
				t.Helper()
				j := testkit.NewJob("", "", l[0], append(l[1:], "-nameserver", ns, "-n", "2", prog("names"), "lookup", name)...)
				if err := j.Start(); err != nil {
					t.Fatal(err)
				}
				r, err := j.Wait(60 * time.Second)
				if err != nil || r.Code != 0 || strings.Count(r.Stdout, want) != 2 {
					t.Errorf("%s: exit %d (%v), want %q from both ranks:\n%s%s", filepath.Base(l[0]), r.Code, err, want, r.Stdout, r.Stderr)
				}
			}
			for _, l := range launchers {
				lookup(l, "found tcp://10.1.2.3:4242\n")
			}
			// Inside a job without -nameserver the name is not seen.
			if r := launch(t, "-n", "1", prog("names"), "lookup", name); r.code != 0 || !strings.Contains(r.out, "rank 0 notfound") {
				t.Errorf("lookup without -nameserver: exit %d\n%s%s", r.code, r.out, r.err)
			}
			if err := os.WriteFile(done, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			r, err := pub.Wait(60 * time.Second)
			if err != nil || r.Code != 0 || !strings.Contains(r.Stdout, "publish rc=0\n") || !strings.Contains(r.Stdout, "unpublish rc=0\n") {
				t.Fatalf("publishing job: exit %d (%v)\n%s%s", r.Code, err, r.Stdout, r.Stderr)
			}
			for _, l := range launchers {
				lookup(l, "notfound\n")
			}
		})
	}
}

// A name server that cannot be reached fails the rank's call, and the
// launcher says which server and why.
func TestNameserverUnreachable(t *testing.T) {
	needSetup(t)
	if os.Getenv("GOMPI_MPIEXEC") != "" {
		t.Skip("gompiexec's message")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	r := launch(t, "-nameserver", addr, "-n", "1", prog("names"), "lookup", "x")
	if want := `-nameserver: lookup "x": name server ` + addr; r.code != 0 || !strings.Contains(r.out, "rank 0 notfound") || !strings.Contains(r.err, want) {
		t.Errorf("exit %d, want the rank's lookup to fail and %q:\n%s%s", r.code, want, r.out, r.err)
	}
	if r := launch(t, "-nameserver", "host:x", "-n", "1", prog("names"), "lookup", "x"); r.code == 0 || !strings.Contains(r.err, "-nameserver") {
		t.Errorf("-nameserver host:x: exit %d\n%s", r.code, r.err)
	}
}
