package cluster_test

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestSlurmHostsOutsideJob: -hosts naming a node the allocation does not
// hold, or a node by its address, fails at once naming the host and the
// job's nodes (it used to fail as "srun ended before the proxy on n1
// connected back", naming a host that was fine, after srun's "Requested
// node configuration is not available").
func TestSlurmHostsOutsideJob(t *testing.T) {
	c, s := slurmSetup(t)
	for _, tc := range []struct {
		name, hosts, bad string
	}{
		{"other node", "n1,n2", "n2"},
		{"address", c.Hosts[0].Addr, c.Hosts[0].Addr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := startSalloc(t, s, []string{"-N", "1", "-w", "n1"}, "-hosts", tc.hosts, "-n", "2", bin("hello"))
			r := j.wait(60 * time.Second)
			if r.Code == 0 {
				t.Fatalf("exit 0\nstdout:\n%s\nstderr:\n%s", r.Stdout, r.Stderr)
			}
			want := "host " + tc.bad + ": not a node of the Slurm job"
			if !strings.Contains(r.Stderr, want) || !strings.Contains(r.Stderr, "its nodes: n1)") {
				t.Errorf("stderr lacks %q naming the job's nodes (n1):\n%s", want, r.Stderr)
			}
			if strings.Contains(r.Stderr, "srun") {
				t.Errorf("srun was started for hosts outside the job:\n%s", r.Stderr)
			}
		})
	}
}

// TestGoRanksSrunWithoutPMI: `srun -n 2 prog` without --mpi=pmi2 (the
// site's MpiDefault=none) gave each task no PMI, and every Go rank ran
// alone as rank 0 of 1, srun exiting 0. Now each fails naming the fix;
// GOMPI_SINGLETON=1 still runs the tasks as singletons (task farming).
func TestGoRanksSrunWithoutPMI(t *testing.T) {
	c, s := slurmSetup(t)
	for _, tc := range []struct {
		name   string
		env    []string
		fail   bool
		expect string
	}{
		{"no PMI", nil, true, "--mpi=pmi2"},
		{"singletons asked for", []string{"GOMPI_SINGLETON=1"}, false, "hello from rank 0 of 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := s.Client("srun", "--mpi=none", "-t", "1", "-N", "2", "-n", "2", bin("hello"))
			cmd.Env = append(cmd.Env, tc.env...)
			cmd.Dir = binDir
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if tc.fail && !errors.As(err, &ee) {
				t.Errorf("srun: %v, want a failed step\n%s", err, out)
			}
			if !tc.fail && err != nil {
				t.Errorf("srun: %v\n%s", err, out)
			}
			if n := strings.Count(string(out), tc.expect); n != 2 {
				t.Errorf("%q %d times, want once per task:\n%s", tc.expect, n, out)
			}
		})
	}
	if err := c.WaitNoLeftovers(10 * time.Second); err != nil {
		t.Fatal(err)
	}
}
