package cluster_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gompi/gompi/internal/testkit"
)

// sbatchRun runs body as a batch script (on n1) with sbatchArgs and returns
// the job's output file; it fails the test if sbatch --wait fails.
func sbatchRun(t *testing.T, j *job, sbatchArgs []string, body string) string {
	t.Helper()
	c, s := slurmSetup(t)
	j.t, j.c = t, c
	out := filepath.Join(c.Dir, fmt.Sprintf("sbatch-%d.out", time.Now().UnixNano()))
	path := filepath.Join(binDir, fmt.Sprintf("batch-%d.sh", time.Now().UnixNano()))
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(path)
	args := append([]string{"--wait", "-J", j.Marker, "-o", out}, sbatchArgs...)
	cmd := s.Client("sbatch", append(args, path)...)
	cmd.Dir = binDir
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sbatch %s: %v\n%s\n%s", strings.Join(sbatchArgs, " "), err, b, readFile(out))
	}
	return readFile(out)
}

// newBatchJob is a job whose marker gompiexecArgs passes to the ranks.
func newBatchJob() *job {
	return &job{Job: &testkit.Job{Marker: testkit.NewMarker("gompi-slurm-test")}}
}

// TestSlurmBatchScripts runs gompiexec in batch scripts as users write
// them, mostly without -n (-ppn is TestSlurmSbatch's): Hydra then starts the allocation's task count
// (SLURM_TASKS_PER_NODE, whatever its form), fills each node's slots in
// order and wraps around past them. The expected placements were checked
// against mpiexec.hydra in the same allocations. --export=NONE (sites
// recommend it) leaves the batch script's srun steps only SLURM_*
// variables unless told otherwise.
func TestSlurmBatchScripts(t *testing.T) {
	for _, tc := range []struct {
		name   string
		sbatch []string
		args   []string
		tpn    string
		on     []int // host index of each rank
	}{
		{"blocks", []string{"-N", "3", "-n", "5"}, nil, "3,1(x2)", []int{0, 0, 0, 1, 2}},
		{"cpus-per-task", []string{"-N", "3", "--ntasks-per-node=2", "-c", "4"}, nil, "2(x3)", []int{0, 0, 1, 1, 2, 2}},
		{"export-none", []string{"-N", "2", "--export=NONE"}, nil, "1(x2)", []int{0, 1}},
		{"more-than-slots", []string{"-N", "3", "-n", "3"}, []string{"-n", "7"}, "1(x3)", []int{0, 1, 2, 0, 1, 2, 0}},
		{"hosts-subset", []string{"-N", "3", "-n", "6"}, []string{"-hosts", "n2,n3"}, "4,1(x2)", []int{1, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if testing.Short() && tc.name != "blocks" && tc.name != "export-none" {
				t.Skip("-short: the allocation forms past the first (a batch job each)")
			}
			j := newBatchJob()
			g := gompiexecArgs(j, append(append([]string{"-l"}, tc.args...), bin("nodeprog"), "where")...)
			got := sbatchRun(t, j, tc.sbatch, `echo "tpn=$SLURM_TASKS_PER_NODE"
`+shellJoin(g)+`
echo "gompiexec exit $?"
`)
			if !strings.Contains(got, "tpn="+tc.tpn+"\n") {
				t.Fatalf("the allocation is not the one the case expects (tpn=%s):\n%s", tc.tpn, got)
			}
			n := len(tc.on)
			for rk, h := range tc.on {
				right := (rk + 1) % n
				want := fmt.Sprintf("[%d] rank=%d size=%d local=", rk, rk, n)
				host := fmt.Sprintf("host=%s right=%d@%s\n", slurmC.Hosts[h].Identity, right, slurmC.Hosts[tc.on[right]].Identity)
				line := ""
				for _, l := range strings.SplitAfter(got, "\n") {
					if strings.HasPrefix(l, want) {
						line = l
					}
				}
				if !strings.HasSuffix(line, host) {
					t.Errorf("rank %d: %q, want %q...%q", rk, line, want, host)
				}
			}
			if strings.Contains(got, fmt.Sprintf("[%d] rank=", n)) || !strings.Contains(got, "gompiexec exit 0\n") {
				t.Errorf("want %d ranks and exit 0:\n%s", n, got)
			}
			j.assertNoLeftovers(10 * time.Second)
		})
	}
}

// TestSlurmScancelSignals: `scancel -s USR1` reaches every rank and the
// job goes on, and a plain scancel (SIGTERM to every process of the step,
// as at the time limit, SIGKILL after KillWait) lets ranks that trap
// SIGTERM finish their handler, their output reaching gompiexec, as under
// mpiexec.hydra: the proxies, SIGTERMed with them, used to SIGKILL them
// at once.
func TestSlurmScancelSignals(t *testing.T) {
	c, s := slurmSetup(t)
	j := startSalloc(t, s, []string{"-N", "3", "--ntasks-per-node=1"}, bin("nodeprog"), "trapterm")
	j.waitReady(3)
	count := func(what string, n int) {
		t.Helper()
		for deadline := time.Now().Add(15 * time.Second); strings.Count(j.Stdout.String(), what) < n; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%q from %d of %d ranks:\n%s\nstderr:\n%s", what, strings.Count(j.Stdout.String(), what), n, j.Stdout.String(), j.Stderr.String())
			}
		}
	}
	if out, err := s.Client("scancel", "-s", "USR1", "-n", j.Marker).CombinedOutput(); err != nil {
		t.Fatalf("scancel -s USR1: %v %s", err, out)
	}
	count("got user defined signal 1", 3)
	if out, err := s.Client("scancel", "-n", j.Marker).CombinedOutput(); err != nil {
		t.Fatalf("scancel: %v %s", err, out)
	}
	r := j.wait(30 * time.Second)
	for _, h := range c.Hosts {
		if !strings.Contains(r.Stdout, "on "+h.Identity+" saved after terminated") {
			t.Errorf("the rank on %s did not finish its SIGTERM handler:\n%s\nstderr:\n%s", h.Name, r.Stdout, r.Stderr)
		}
	}
	if r.Code == 0 {
		t.Errorf("exit 0 after scancel")
	}
	j.assertNoLeftovers(15 * time.Second)
}

// TestGoRankFailsUnderSrun: under srun alone, a Go rank that exits 7
// after Init while the others wait in a barrier ends the step: the others
// fail their barrier naming a peer, srun exits 7. (MPICH's C ranks, the
// same program under the same srun, wait in MPI_Barrier until the step is
// cancelled: srun's --kill-on-bad-exit is off by default.)
func TestGoRankFailsUnderSrun(t *testing.T) {
	c, s := slurmSetup(t)
	cmd := s.Client("srun", "--mpi=pmi2", "-t", "2", "-N", "2", "-n", "4", bin("nodeprog"), "failbarrier", "2")
	cmd.Dir = binDir
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 7 {
		t.Fatalf("srun: %v, want exit 7\n%s", err, out)
	}
	for rk := 0; rk < 4; rk++ {
		if !strings.Contains(string(out), fmt.Sprintf("rank %d of 4 on ", rk)) {
			t.Errorf("rank %d did not start:\n%s", rk, out)
		}
	}
	if strings.Contains(string(out), "passed the barrier") || !strings.Contains(string(out), "barrier: mpi: peer rank") {
		t.Errorf("the others did not fail their barrier naming a peer:\n%s", out)
	}
	if err := c.WaitNoLeftovers(10 * time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestSlurmRankEnvironment: the options of the proxies' own step
// (--ntasks-per-node=1, SLURM_OVERLAP) do not reach the ranks, where an
// srun a rank runs would take them up: with -genvall ranks see the job's
// values, with -genvnone none, as under mpiexec.hydra (whose srun passes
// neither). The variables Hydra does not pass on under its slurm
// launcher (SLURM_TASKS_PER_NODE, SLURM_PROCID, ...) are the proxies'
// step's, as mpiexec.hydra -bootstrap slurm showed on this cluster:
// tasks=1(x2), procid = the node's index; SLURM_NTASKS is the job's.
func TestSlurmRankEnvironment(t *testing.T) {
	_, s := slurmSetup(t)
	show := []string{"/bin/sh", "-c", `echo "rank $PMI_RANK overlap=$SLURM_OVERLAP tpn=$SLURM_NTASKS_PER_NODE tasks=$SLURM_TASKS_PER_NODE ntasks=$SLURM_NTASKS node=$SLURM_NODEID procid=$SLURM_PROCID"`}
	for _, tc := range []struct {
		opts []string
		want string
	}{
		{nil, "overlap= tpn=2 tasks=1(x2) ntasks=4 node=%d procid=%d\n"},
		{[]string{"-genvnone"}, "overlap= tpn= tasks=1(x2) ntasks=2 node=%d procid=%d\n"},
	} {
		j := startSalloc(t, s, []string{"-N", "2", "--ntasks-per-node=2"}, append(tc.opts, show...)...)
		r := j.wait(60 * time.Second)
		for node := 0; node < 2; node++ {
			if want := fmt.Sprintf(tc.want, node, node); r.Code != 0 || strings.Count(r.Stdout, want) != 2 {
				t.Errorf("%v: exit %d, want 2 ranks with %q:\n%s\n%s", tc.opts, r.Code, want, r.Stdout, r.Stderr)
			}
		}
		j.assertNoLeftovers(10 * time.Second)
	}
}
