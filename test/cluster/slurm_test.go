package cluster_test

import (
	"fmt"
	"os"
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
