package cluster_test

import (
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
