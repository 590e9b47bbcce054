package cluster_test

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"syscall"
	"time"

	"github.com/gompi/gompi/internal/launcher"
	"github.com/gompi/gompi/internal/testkit"
	"strings"
	"sync"
	"testing"

	"github.com/gompi/gompi/test/cluster"
)

var (
	slurmOnce sync.Once
	slurmC    *cluster.Cluster
	slurmS    *cluster.Slurm
	slurmErr  error
)

// slurmSetup returns a 3-host cluster of its own running Slurm (built on
// first use, torn down by TestMain's cleanup of clusters). It skips where
// Slurm is not installed, and fails under CI.
func slurmSetup(t *testing.T) (*cluster.Cluster, *cluster.Slurm) {
	t.Helper()
	if skipWhy != nil {
		if os.Getenv("CI") != "" || os.Getenv("GOMPI_REQUIRE_CLUSTER") != "" {
			t.Fatalf("test cluster unavailable: %v", skipWhy)
		}
		t.Skipf("test cluster unavailable: %v", skipWhy)
	}
	if err := cluster.CheckSlurm(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	slurmOnce.Do(func() {
		slurmC, slurmErr = cluster.New(cluster.Config{Hosts: 3, Logf: func(f string, a ...any) {
			fmt.Fprintf(os.Stderr, f+"\n", a...)
		}})
		if slurmErr != nil {
			return
		}
		slurmS, slurmErr = slurmC.StartSlurm()
	})
	if slurmErr != nil {
		if slurmS != nil {
			t.Log(slurmS.Logs())
		}
		t.Fatal(slurmErr)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(slurmS.Logs())
		}
	})
	return slurmC, slurmS
}

func TestSlurmBringUp(t *testing.T) {
	c, s := slurmSetup(t)
	out, err := s.Client("srun", "-N", "3", "--ntasks-per-node=1", "cat", cluster.IdentityFile).CombinedOutput()
	if err != nil {
		t.Fatalf("srun: %v\n%s", err, out)
	}
	for _, h := range c.Hosts {
		if !strings.Contains(string(out), h.Identity) {
			t.Errorf("srun output %q lacks %s", out, h.Identity)
		}
	}
}

// sallocJob runs `salloc SALLOC... sh -c 'gompiexec ARGS...; status'`-like
// jobs: salloc with sallocArgs, then argv (gompiexec and its arguments, or
// a shell command). The marker is in every process's environment (srun
// exports it to the proxies; -genv to the ranks).
func sallocJob(t *testing.T, s *cluster.Slurm, marker string, sallocArgs []string, argv ...string) *job {
	t.Helper()
	args := append(append([]string{"--quiet", "-J", marker}, sallocArgs...), argv...)
	j := &job{Job: testkit.NewJob(marker, "", "salloc", args...), t: t, c: slurmC}
	j.Cmd.Env = append(j.Cmd.Env, s.Env()...)
	j.Cmd.Dir = binDir
	j.Cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := j.StartWith(launcher.StartLocked); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Marked processes first: a shell under salloc holds its output
		// pipes, and Kill waits for them.
		testkit.KillMarked(marker)
		j.Kill()
		s.Client("scancel", "-n", marker).Run()
	})
	t.Logf("salloc %s", strings.Join(args, " "))
	return j
}

// gompiexecArgs are the arguments every slurm test passes: the marker to
// the ranks, the proxy and working directory on the shared filesystem.
func gompiexecArgs(j *job, args ...string) []string {
	return append([]string{bin("gompiexec"), "-genv", testkit.MarkerVar, j.Marker, "-proxy-path", bin("gompi-proxy"), "-wdir", binDir}, args...)
}

// startSalloc starts gompiexec ARGS inside `salloc SALLOC`.
func startSalloc(t *testing.T, s *cluster.Slurm, sallocArgs []string, args ...string) *job {
	t.Helper()
	marker := testkit.NewMarker("gompi-slurm-test")
	j := &job{Job: &testkit.Job{Marker: marker}}
	full := gompiexecArgs(j, args...)
	return sallocJob(t, s, marker, sallocArgs, full...)
}

// TestSlurmLauncher runs Go PMI ranks inside salloc with no -launcher: the
// slurm launcher is chosen (named under -v), one srun step starts a proxy
// per node, placement follows SLURM_TASKS_PER_NODE, and output, PMI
// fences and exit codes work as over SSH.
func TestSlurmLauncher(t *testing.T) {
	c, s := slurmSetup(t)
	const n, slots = 6, 2
	on := placement(c, n, slots)
	j := startSalloc(t, s, []string{"-N", "3", "--ntasks-per-node=2"}, "-v", "-l", bin("nodeprog"), "where")
	r := j.wait(90 * time.Second)
	if r.Code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
	}
	for rk := 0; rk < n; rk++ {
		right := (rk + 1) % n
		want := fmt.Sprintf("[%d] rank=%d size=%d local=%d/%d host=%s right=%d@%s\n",
			rk, rk, n, rk%slots, slots, on[rk].Identity, right, on[right].Identity)
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("missing %q in\n%s", want, r.Stdout)
		}
	}
	if !strings.Contains(r.Stderr, "launcher=slurm") || !strings.Contains(r.Stderr, "srun") {
		t.Errorf("-v does not name the slurm launcher and its srun step:\n%s", r.Stderr)
	}
	j.assertNoLeftovers(10 * time.Second)
}

// TestSlurmExitCode: a failing rank's code is gompiexec's (and salloc's),
// naming rank and host; -launcher slurm given explicitly, as -bootstrap.
func TestSlurmExitCode(t *testing.T) {
	c, s := slurmSetup(t)
	j := startSalloc(t, s, []string{"-N", "3", "--ntasks-per-node=2"}, "-bootstrap", "slurm", "-n", "6", bin("nodeprog"), "exit", "7", "4")
	r := j.wait(90 * time.Second)
	if r.Code != 7 || !strings.Contains(r.Stderr, c.Hosts[2].Name) {
		t.Fatalf("exit %d, want 7 naming %s; stderr:\n%s", r.Code, c.Hosts[2].Name, r.Stderr)
	}
	j.assertNoLeftovers(10 * time.Second)
}

// TestSlurmSbatch runs gompiexec in a batch script (on the first node,
// inside its network namespace): output in the job's file, exit code from
// sbatch --wait.
func TestSlurmSbatch(t *testing.T) {
	c, s := slurmSetup(t)
	out := filepath.Join(slurmC.Dir, fmt.Sprintf("sbatch-%d.out", time.Now().UnixNano()))
	j := &job{Job: &testkit.Job{Marker: testkit.NewMarker("gompi-slurm-test")}}
	script := "#!/bin/sh\n" + shellJoin(gompiexecArgs(j, "-l", "-n", "3", "-ppn", "1", bin("nodeprog"), "where")) + "\necho gompiexec exit $?\n"
	path := filepath.Join(binDir, "batch.sh")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := s.Client("sbatch", "--wait", "-N", "3", "-J", j.Marker, "-o", out, path)
	cmd.Dir = binDir
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sbatch: %v\n%s\n%s", err, b, readFile(out))
	}
	got := readFile(out)
	for rk, h := range c.Hosts {
		if !strings.Contains(got, fmt.Sprintf("[%d] rank=%d size=3 local=0/1 host=%s", rk, rk, h.Identity)) {
			t.Errorf("rank %d not on %s:\n%s", rk, h.Name, got)
		}
	}
	if !strings.Contains(got, "gompiexec exit 0") {
		t.Errorf("batch output:\n%s", got)
	}
	j.c, j.t = c, t
	j.assertNoLeftovers(10 * time.Second)
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// running waits until every host runs perHost nodeprog ranks whose
// ancestry goes through slurmstepd (they belong to the step).
func runningInStep(t *testing.T, c *cluster.Cluster, j *job, perHost int) {
	t.Helper()
	j.waitReady(perHost * len(c.Hosts))
	for _, h := range c.Hosts {
		ps, _ := h.ProcsNamed("nodeprog")
		if len(ps) != perHost {
			t.Fatalf("%s runs ranks %v, want %d", h.Name, ps, perHost)
		}
		all, _ := h.Procs()
		parent := map[int]cluster.Proc{}
		for _, p := range all {
			parent[p.PID] = p
		}
		chain := []string{}
		for p, ok := parent[ps[0].PPID]; ok; p, ok = parent[p.PPID] {
			chain = append(chain, p.Comm)
		}
		if len(chain) < 2 || chain[0] != "gompi-proxy" || chain[1] != "slurmstepd" {
			t.Fatalf("rank on %s: ancestry %v, want gompi-proxy under slurmstepd", h.Name, chain)
		}
	}
}

// TestSlurmScancel: scancel of the allocation takes every proxy and rank down.
func TestSlurmScancel(t *testing.T) {
	c, s := slurmSetup(t)
	j := startSalloc(t, s, []string{"-N", "3", "--ntasks-per-node=2"}, bin("nodeprog"), "sleep", "300s")
	runningInStep(t, c, j, 2)
	if out, err := s.Client("scancel", "-n", j.Marker).CombinedOutput(); err != nil {
		t.Fatalf("scancel: %v %s", err, out)
	}
	r := j.wait(30 * time.Second)
	t.Logf("after scancel: exit %d, stderr:\n%s", r.Code, r.Stderr)
	if r.Code == 0 {
		t.Errorf("salloc/gompiexec exit 0 after scancel")
	}
	if strings.Contains(r.Stderr, "context canceled") {
		t.Errorf("a proxy reported scancel as %q", "context canceled")
	}
	j.assertNoLeftovers(15 * time.Second)
}

// TestSlurmLauncherKilled: gompiexec SIGKILLed inside an allocation that
// stays alive leaves nothing on any node.
func TestSlurmLauncherKilled(t *testing.T) {
	c, s := slurmSetup(t)
	marker := testkit.NewMarker("gompi-slurm-test")
	j0 := &job{Job: &testkit.Job{Marker: marker}}
	cmd := shellJoin(gompiexecArgs(j0, bin("nodeprog"), "sleep", "300s")) + "; echo gompiexec gone; sleep 300"
	j := sallocJob(t, s, marker, []string{"-N", "3", "--ntasks-per-node=2"}, "sh", "-c", cmd)
	runningInStep(t, c, j, 2)
	pid := 0
	for _, p := range testkit.MarkedProcs(j.Marker) {
		if pr, err := testkit.ReadProc(p); err == nil && pr.Comm == "gompiexec" {
			pid = p
		}
	}
	if pid == 0 {
		t.Fatal("gompiexec not found")
	}
	at := time.Now()
	syscall.Kill(pid, syscall.SIGKILL)
	if err := c.WaitNoLeftovers(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("every node clean %s after SIGKILL, allocation still held", time.Since(at).Round(time.Millisecond))
	select {
	case <-j.Done():
		t.Fatalf("salloc ended: the test meant to keep the allocation: %s", j.Stderr.String())
	default:
	}
}

// TestSlurmProxyLost: a proxy SIGKILLed mid-job ends the job naming its
// node, and nothing is left.
func TestSlurmProxyLost(t *testing.T) {
	c, s := slurmSetup(t)
	j := startSalloc(t, s, []string{"-N", "3", "--ntasks-per-node=2"}, bin("nodeprog"), "sleep", "300s")
	runningInStep(t, c, j, 2)
	victim := c.Hosts[1]
	ps, _ := victim.ProcsNamed("gompi-proxy")
	if len(ps) != 1 {
		t.Fatalf("proxies on %s: %v", victim.Name, ps)
	}
	cluster.Kill(ps[0].PID, syscall.SIGKILL)
	r := j.wait(30 * time.Second)
	if r.Code == 0 || !strings.Contains(r.Stderr, victim.Name) {
		t.Fatalf("exit %d, want non-zero naming %s; stderr:\n%s", r.Code, victim.Name, r.Stderr)
	}
	j.assertNoLeftovers(15 * time.Second)
}

// TestGoRanksUnderSrun runs Go ranks with srun alone, no gompiexec: the
// PMI client speaks to Slurm's mpi/pmi2 plugin over PMI_FD (it answers
// PMI-1 wire commands there as well as PMI-2's), through put/fence/get,
// the runtime's collectives across nodes and examples/pi. Debian's Slurm
// 22.05 has no separate pmi1 plugin (--mpi=list shows none, pmi2, pmix):
// PMI-1 clients use pmi2's socket.
func TestGoRanksUnderSrun(t *testing.T) {
	c, s := slurmSetup(t)
	if err := testkit.Build(binDir, testkit.Pkg("examples/pi")); err != nil {
		t.Fatal(err)
	}
	list, _ := s.Client("srun", "--mpi=list").CombinedOutput()
	t.Logf("srun --mpi=list: %s", bytes.TrimSpace(list))
	mpis := []string{"pmi2"}
	if strings.Contains(string(list), "pmi1") {
		mpis = append(mpis, "pmi1")
	}
	srun := func(args ...string) string {
		t.Helper()
		cmd := s.Client("srun", append([]string{"--kill-on-bad-exit=1", "-t", "2"}, args...)...)
		cmd.Dir = binDir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("srun %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	for _, m := range mpis {
		// 4 ranks on 2 nodes, 2 each, in blocks.
		// (MPI_LOCALRANKID is gompi-proxy's and Hydra's, not Slurm's: local=/.)
		out := srun("--mpi="+m, "-N", "2", "--ntasks-per-node=2", "-n", "4", bin("nodeprog"), "where")
		for rk := 0; rk < 4; rk++ {
			right := (rk + 1) % 4
			want := fmt.Sprintf("rank=%d size=4 local=/ host=%s right=%d@%s", rk, c.Hosts[rk/2].Identity, right, c.Hosts[right/2].Identity)
			if !strings.Contains(out, want) {
				t.Errorf("--mpi=%s: missing %q in\n%s", m, want, out)
			}
		}
		out = srun("--mpi="+m, "-N", "3", "--ntasks-per-node=2", "-n", "6", bin("nodeprog"), "coll")
		if strings.Count(out, "coll ok") < 1 {
			t.Errorf("--mpi=%s collectives:\n%s", m, out)
		}
		out = srun("--mpi="+m, "-n", "4", bin("pi"))
		if !strings.Contains(out, "pi is approximately 3.14") || !strings.Contains(out, "4 ranks") {
			t.Errorf("--mpi=%s pi:\n%s", m, out)
		}
	}
	if err := c.WaitNoLeftovers(10 * time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestSlurmIntruder: connections to gompiexec's connect-back port that
// cannot prove the job's secret (garbage; a would-be proxy of n1 with a
// wrong secret) are dropped, and the job goes on to exit 0.
func TestSlurmIntruder(t *testing.T) {
	c, s := slurmSetup(t)
	j := startSalloc(t, s, []string{"-N", "3", "--ntasks-per-node=1"}, "-v", bin("nodeprog"), "sleep", "3s")
	j.waitReady(3)
	m := regexp.MustCompile(`listen=\S*:(\d+)`).FindStringSubmatch(j.Stderr.String())
	if m == nil {
		t.Fatalf("no listen address under -v:\n%s", j.Stderr.String())
	}
	addr := net.JoinHostPort(c.RootAddr, m[1])
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	conn.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
	conn.Close()
	conn, err = net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	err = launcher.ProveConnectBack(conn, bytes.Repeat([]byte{1}, 32), c.Hosts[0].Name, 5*time.Second)
	conn.Close()
	if !errors.Is(err, launcher.ErrConnectAuth) {
		t.Fatalf("wrong secret: %v, want %v", err, launcher.ErrConnectAuth)
	}
	r := j.wait(60 * time.Second)
	if r.Code != 0 {
		t.Fatalf("exit %d after intruders\nstderr:\n%s", r.Code, r.Stderr)
	}
	if !strings.Contains(r.Stderr, "dropped a connection") {
		t.Errorf("-v does not log the dropped connections:\n%s", r.Stderr)
	}
	j.assertNoLeftovers(10 * time.Second)
}

// TestSlurmNodeLost: n3's link is cut mid-job (no packet passes, nobody is
// told): the proxies' heartbeat ends the job naming n3, and once the link
// is back every node, n3 included, is clean.
func TestSlurmNodeLost(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for heartbeat timeouts")
	}
	c, s := slurmSetup(t)
	j := startSalloc(t, s, []string{"-N", "3", "--ntasks-per-node=2"}, bin("nodeprog"), "sleep", "300s")
	runningInStep(t, c, j, 2)
	victim := c.Hosts[2]
	if err := victim.CutLink(); err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	r := j.wait(60 * time.Second)
	took := time.Since(at)
	victim.RestoreLink()
	t.Logf("job ended %s after the cut, exit %d", took.Round(time.Millisecond), r.Code)
	if r.Code == 0 || !strings.Contains(r.Stderr, victim.Name) {
		t.Fatalf("exit %d, want non-zero naming %s; stderr:\n%s", r.Code, victim.Name, r.Stderr)
	}
	j.assertNoLeftovers(30 * time.Second)
}

// TestSlurmStdinAndSignals: stdin reaches rank 0 and SIGINT reaches every
// rank through connect-back sessions, as over SSH.
func TestSlurmStdinAndSignals(t *testing.T) {
	c, s := slurmSetup(t)
	data := strings.Repeat("0123456789abcdef", 4096) // 64 KiB
	marker := testkit.NewMarker("gompi-slurm-test")
	j := &job{Job: testkit.NewJob(marker, data, "salloc", append([]string{"--quiet", "-J", marker, "-N", "2", "--ntasks-per-node=1"},
		gompiexecArgs(&job{Job: &testkit.Job{Marker: marker}}, bin("nodeprog"), "cat")...)...), t: t, c: c}
	j.Cmd.Env = append(j.Cmd.Env, s.Env()...)
	j.Cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := j.StartWith(launcher.StartLocked); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testkit.KillMarked(marker); j.Kill() })
	r := j.wait(60 * time.Second)
	want := fmt.Sprintf("rank 0 on %s read %d bytes", c.Hosts[0].Identity, len(data))
	if r.Code != 0 || !strings.Contains(r.Stdout, want) || !strings.Contains(r.Stdout, "read 0 bytes") {
		t.Fatalf("exit %d, want %q and rank 1 reading nothing; stderr:\n%s\nstdout tail: %.300s", r.Code, want, r.Stderr, r.Stdout[max(0, len(r.Stdout)-300):])
	}
	j.assertNoLeftovers(10 * time.Second)

	j = startSalloc(t, s, []string{"-N", "3", "--ntasks-per-node=1"}, bin("nodeprog"), "trap")
	j.waitReady(3)
	pid := 0
	for _, p := range testkit.MarkedProcs(j.Marker) {
		if pr, err := testkit.ReadProc(p); err == nil && pr.Comm == "gompiexec" {
			pid = p
		}
	}
	if pid == 0 {
		t.Fatal("gompiexec not found")
	}
	syscall.Kill(pid, syscall.SIGINT)
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(j.Stdout.String(), "got interrupt") < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("SIGINT reached %d of 3 ranks: %s", strings.Count(j.Stdout.String(), "got interrupt"), j.Stdout.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	syscall.Kill(pid, syscall.SIGINT) // a second Ctrl-C ends the job
	r = j.wait(30 * time.Second)
	if r.Code != 130 {
		t.Errorf("exit %d after a second SIGINT, want 130; stderr:\n%s", r.Code, r.Stderr)
	}
	j.assertNoLeftovers(10 * time.Second)
}

// TestSlurmFinishedNodeReleased: a node whose ranks have all ended is let
// go while another still runs, as Hydra's proxies go when their processes
// have: its proxy exits and its part of the step ends early (the step's
// end, which gompiexec waits for, no longer waits on every proxy at the
// end of the job), and the job still ends well.
func TestSlurmFinishedNodeReleased(t *testing.T) {
	c, s := slurmSetup(t)
	j := startSalloc(t, s, []string{"-N", "3", "--ntasks-per-node=1"}, "/bin/sh", "-c", `[ "$PMI_RANK" != 2 ] || exec sleep 8`)
	last := c.Hosts[2]
	// Under load Slurm can take seconds to start the job: the clock below
	// starts once rank 2 sleeps.
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if sl, _ := last.ProcsNamed("sleep"); len(sl) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rank 2's sleep did not start on %s within 60s", last.Name)
		}
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var early []string
		for _, h := range c.Hosts[:2] {
			if ps, _ := h.ProcsNamed("gompi-proxy"); len(ps) > 0 {
				early = append(early, h.Name)
			}
		}
		sl, _ := last.ProcsNamed("sleep")
		px, _ := last.ProcsNamed("gompi-proxy")
		if len(early) == 0 && len(sl) == 1 && len(px) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("while rank 2 sleeps on %s (sleep %d, proxy %d): proxies still on the finished nodes %v",
				last.Name, len(sl), len(px), early)
		}
	}
	r := j.wait(60 * time.Second)
	if r.Code != 0 {
		t.Fatalf("exit %d\nstderr:\n%s", r.Code, r.Stderr)
	}
	j.assertNoLeftovers(10 * time.Second)
}

// TestSlurmProxyExitLosesNoOutput: a proxy exits once its `done` has left
// its node (its TCP connection's send queue is empty), without waiting for
// gompiexec to close the session; gompiexec's writes that come later (rank
// 0's stdin, yamux window updates while it reads the last output) meet the
// exited proxy's reset, and everything the proxy sent must still be read
// (launcher.ReadToEnd). Several jobs in one allocation, each rank printing
// more than yamux's window right before it exits, rank 0 reading a little
// of a flowing stdin.
func TestSlurmProxyExitLosesNoOutput(t *testing.T) {
	_, s := slurmSetup(t)
	jobs := 15
	if testing.Short() {
		jobs = 5
	}
	marker := testkit.NewMarker("gompi-slurm-test")
	g := strings.Join(gompiexecArgs(&job{Job: &testkit.Job{Marker: marker}}), " ")
	script := fmt.Sprintf(`tmp=$(mktemp -d)
for i in $(seq 1 %d); do
	yes | %s -n 3 /bin/sh -c 'head -c 1000 >/dev/null; yes abcdefghij | head -c 600000' >$tmp/out 2>$tmp/err
	rc=$?
	n=$(wc -c <$tmp/out)
	if [ $rc != 0 ] || [ $n != 1800000 ]; then echo "job $i: exit $rc, $n bytes of 1800000: $(cat $tmp/err)"; rm -r $tmp; exit 1; fi
done
rm -r $tmp
echo all jobs whole`, jobs, g)
	j := sallocJob(t, s, marker, []string{"-N", "3", "--ntasks-per-node=1"}, "/bin/sh", "-c", script)
	r := j.wait(120 * time.Second)
	if r.Code != 0 || !strings.Contains(r.Stdout, "all jobs whole") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
	}
	j.assertNoLeftovers(10 * time.Second)
}
