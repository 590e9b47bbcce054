// Package rt runs real multi-process jobs of Go rank programs that use the
// runtime (package mpi): under gompiexec, under MPICH's mpiexec.hydra, and
// under a launcher-free harness where the test serves PMI itself (so a rank
// can die without the launcher tearing the job down).
package rt

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gompi/gompi/internal/testkit"
	"github.com/gompi/gompi/pmi"
)

var binDir string

func TestMain(m *testing.M) {
	os.Exit(testkit.MainWithBinaries(m, &binDir, "gompi-rt-",
		testkit.Pkg("cmd/gompiexec"), testkit.Pkg("cmd/gompi-proxy"),
		testkit.Pkg("test/rt/progs/rtprog"), testkit.Pkg("examples/pi")))
}

func bin(name string) string { return filepath.Join(binDir, name) }

// run runs a command with a deadline and returns its combined output.
func run(t *testing.T, limit time.Duration, name string, args ...string) (string, error) {
	t.Helper()
	return runEnv(t, limit, nil, name, args...)
}

// runEnv is run with extra environment variables.
func runEnv(t *testing.T, limit time.Duration, env []string, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(append(os.Environ(), "GOMPI_PROXY="+bin("gompi-proxy")), env...)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s %v did not finish within %s:\n%s", name, args, limit, out)
	}
	return string(out), err
}

// wantOK checks that every rank of n printed "rank R: ok".
func wantOK(t *testing.T, out string, n int) {
	t.Helper()
	for r := 0; r < n; r++ {
		if !strings.Contains(out, fmt.Sprintf("rank %d: ok\n", r)) {
			t.Fatalf("rank %d did not report ok:\n%s", r, out)
		}
	}
}

func TestGompiexecAll(t *testing.T) {
	for _, n := range []int{1, 2, 4, 8} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			out, err := run(t, 2*time.Minute, bin("gompiexec"), "-n", strconv.Itoa(n), bin("rtprog"), "all")
			if err != nil {
				t.Fatalf("%v:\n%s", err, out)
			}
			wantOK(t, out, n)
		})
	}
}

// The same under gompiexec's Hydra-compatible PMI_PORT mode.
func TestGompiexecPMIPort(t *testing.T) {
	out, err := run(t, 2*time.Minute, bin("gompiexec"), "-pmi-port", "-n", "4", bin("rtprog"), "all")
	if err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	wantOK(t, out, 4)
}

func TestGompiexecStranger(t *testing.T) {
	out, err := run(t, 2*time.Minute, bin("gompiexec"), "-n", "3", bin("rtprog"), "stranger")
	if err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if !strings.Contains(out, "stranger dropped") {
		t.Fatalf("no stranger line:\n%s", out)
	}
	wantOK(t, out, 3)
}

// A rank that leaves without the runtime's Finalize (but after PMI
// finalize, so gompiexec lets the job go on): the others get *PeerError.
func TestGompiexecPeerLeaves(t *testing.T) {
	out, err := run(t, 2*time.Minute, bin("gompiexec"), "-n", "4", bin("rtprog"), "die")
	if err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	for r := 0; r < 3; r++ {
		if !strings.Contains(out, fmt.Sprintf("rank %d: saw mpi: peer rank 3", r)) {
			t.Fatalf("rank %d did not see the peer error:\n%s", r, out)
		}
	}
	wantOK(t, out, 3)
}

// Shared-memory files: none are left after a normal job (the runtime
// unlinks them once mapped), nor after one whose rank was SIGKILLed (the
// proxy sweeps the job's files when its ranks have exited).
func TestGompiexecNoShmLeftovers(t *testing.T) {
	dir := t.TempDir()
	env := []string{"GOMPI_SHM_DIR=" + dir}
	out, err := runEnv(t, 2*time.Minute, env, bin("gompiexec"), "-n", "4", bin("rtprog"), "all")
	if err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	wantOK(t, out, 4)
	leftovers := func() {
		t.Helper()
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			t.Errorf("left in %s: %s", dir, e.Name())
		}
	}
	leftovers()
	out, err = runEnv(t, 2*time.Minute, env, bin("gompiexec"), "-n", "3", bin("rtprog"), "shmkill")
	if err == nil || strings.Contains(out, "FAIL") {
		t.Fatalf("want the job to fail by the kill: %v\n%s", err, out)
	}
	leftovers()
}

// TCP only (GOMPI_SHM=0) still passes everything.
func TestGompiexecNoShm(t *testing.T) {
	out, err := runEnv(t, 2*time.Minute, []string{"GOMPI_SHM=0"}, bin("gompiexec"), "-n", "4", bin("rtprog"), "all")
	if err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	wantOK(t, out, 4)
}

func TestPiExample(t *testing.T) {
	out, err := run(t, 2*time.Minute, bin("gompiexec"), "-n", "4", bin("pi"), "-n", "1000000")
	if err != nil || !strings.Contains(out, "pi is approximately 3.14159") {
		t.Fatalf("%v:\n%s", err, out)
	}
}

func TestHydra(t *testing.T) {
	hydra, err := exec.LookPath("mpiexec.hydra")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("mpiexec.hydra not installed (test/setup.sh installs Debian's mpich)")
		}
		t.Skip("mpiexec.hydra not installed (test/setup.sh installs Debian's mpich): skipping")
	}
	out, err := run(t, 2*time.Minute, hydra, "-n", "4", bin("rtprog"), "all")
	if err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	wantOK(t, out, 4)
}

// harnessUplink connects the test's PMI node straight to a pmi.Job.
type harnessUplink struct{ job *pmi.Job }

func (u harnessUplink) Fence(ctx context.Context, puts []pmi.KV) (map[string]string, error) {
	return u.job.Fence(ctx, 0, puts)
}
func (u harnessUplink) Abort(rank, code int, msg string) error         { return nil }
func (u harnessUplink) Publish(context.Context, string, string) error  { return nil }
func (u harnessUplink) Unpublish(context.Context, string) error        { return nil }
func (u harnessUplink) Lookup(context.Context, string) (string, error) { return "", pmi.ErrNotFound }

// harness runs n ranks of rtprog with args under a PMI server of the
// test's own, with no launcher to end the job when a rank dies; it
// returns each rank's output and exit error.
func harness(t *testing.T, n int, env []string, args ...string) ([]string, []error) {
	t.Helper()
	job := pmi.NewJob(1)
	defer job.Close(nil)
	ranks := make([]int, n)
	for i := range ranks {
		ranks[i] = i
	}
	node, err := pmi.NewNode(pmi.NodeConfig{KVSName: "kvs_harness", Size: n, Ranks: ranks, UniverseSize: n, Uplink: harnessUplink{job}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go node.Serve(ctx, -1, c)
		}
	}()
	outs := make([]strings.Builder, n)
	cmds := make([]*exec.Cmd, n)
	for r := 0; r < n; r++ {
		cmd := exec.CommandContext(ctx, bin("rtprog"), args...)
		cmd.Env = append(append(os.Environ(), env...), "PMI_PORT="+ln.Addr().String(), "PMI_ID="+strconv.Itoa(r))
		cmd.Stdout, cmd.Stderr = &outs[r], &outs[r]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[r] = cmd
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r := range cmds {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			errs[r] = cmds[r].Wait()
		}(r)
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatal("ranks did not finish in time")
	}
	s := make([]string, n)
	for r := range outs {
		s[r] = outs[r].String()
	}
	return s, errs
}

// A rank killed by SIGKILL, with no launcher to end the job: the
// survivors' pending and later operations with it return *PeerError
// promptly and the survivors finish normally.
func TestHarnessPeerKilled(t *testing.T) {
	const n = 4
	outs, errs := harness(t, n, nil, "kill")
	if errs[n-1] == nil || !strings.Contains(errs[n-1].Error(), "killed") {
		t.Fatalf("victim: %v\n%s", errs[n-1], outs[n-1])
	}
	for r := 0; r < n-1; r++ {
		out := outs[r]
		if errs[r] != nil || !strings.Contains(out, fmt.Sprintf("rank %d: saw mpi: peer rank %d", r, n-1)) ||
			!strings.Contains(out, fmt.Sprintf("rank %d: ok", r)) {
			t.Fatalf("rank %d: %v\n%s", r, errs[r], out)
		}
	}
}

// An abort ends the job, under -disable-auto-cleanup too (Hydra's
// survivors hang there: mpich#1537).
func TestGompiexecAbort(t *testing.T) {
	for _, args := range [][]string{{"-n", "3"}, {"-disable-auto-cleanup", "-n", "3"}} {
		out, err := run(t, time.Minute, bin("gompiexec"), append(args, bin("rtprog"), "abort")...)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 7 || strings.Contains(out, "FAIL") {
			t.Fatalf("%v: want exit 7: %v\n%s", args, err, out)
		}
	}
}

// gompiexec gives every rank of a job the same fresh 32-byte secret.
func TestGompiexecJobSecret(t *testing.T) {
	secret := func() []string {
		out, err := run(t, time.Minute, bin("gompiexec"), "-n", "2", "/bin/sh", "-c", "echo $GOMPI_JOB_SECRET")
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		return strings.Fields(out)
	}
	a, b := secret(), secret()
	if len(a) != 2 || a[0] != a[1] || len(a[0]) != 64 || len(b) != 2 || b[0] == a[0] {
		t.Fatalf("secrets %q then %q", a, b)
	}
}

// Under -disable-auto-cleanup a SIGKILLed rank does not end the job: the
// others get *PeerError for it, PMI_dead_processes names it, they finish,
// and the job's exit status is the victim's (128+9).
func TestGompiexecDisableAutoCleanup(t *testing.T) {
	for _, flag := range []string{"-disable-auto-cleanup", "-dac"} {
		t.Run(flag, func(t *testing.T) {
			const n = 4
			out, err := run(t, 2*time.Minute, bin("gompiexec"), flag, "-n", strconv.Itoa(n), bin("rtprog"), "killdac")
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 128+9 {
				t.Fatalf("exit %v, want 137:\n%s", err, out)
			}
			for r := 0; r < n-1; r++ {
				if !strings.Contains(out, fmt.Sprintf("rank %d: saw mpi: peer rank %d", r, n-1)) {
					t.Fatalf("rank %d did not see the peer error:\n%s", r, out)
				}
			}
			wantOK(t, out, n-1)
			if !strings.Contains(out, fmt.Sprintf("rank %d on localhost was killed by signal 9 (SIGKILL); the others go on", n-1)) {
				t.Fatalf("no notice of the failed rank:\n%s", out)
			}
		})
	}
	// Without it the same job ends at the failure: no survivor finishes.
	out, err := run(t, 2*time.Minute, bin("gompiexec"), "-n", "4", bin("rtprog"), "killdac")
	if err == nil || strings.Contains(out, ": ok\n") {
		t.Fatalf("without -disable-auto-cleanup the job went on (%v):\n%s", err, out)
	}
}
