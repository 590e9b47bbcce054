package cluster_test

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gompi/gompi/internal/launcher"
	"github.com/gompi/gompi/internal/testkit"
)

// TestSlurmLocalhost: Hydra's -localhost names the launch host in the
// address its proxies connect back to. Under gompiexec's slurm launcher
// every proxy is told that address alone and joins through it; an
// address at which nothing listens fails the job, naming it, and leaves
// nothing behind.
func TestSlurmLocalhost(t *testing.T) {
	c, s := slurmSetup(t)
	marker := testkit.NewMarker("gompi-slurm-test")
	j := &job{Job: &testkit.Job{Marker: marker}}
	argv := gompiexecArgs(j, "-localhost", c.RootAddr, "-n", "2", bin("nodeprog"), "sleep", "3s")
	j = sallocJob(t, s, marker, []string{"-N", "2", "--ntasks-per-node=1"}, argv...)
	j.waitReady(2)
	proxies := 0
	for _, pid := range testkit.MarkedProcs(marker) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil {
			continue
		}
		for _, kv := range bytes.Split(b, []byte{0}) {
			v, ok := strings.CutPrefix(string(kv), launcher.ConnectEnv+"=")
			if !ok {
				continue
			}
			proxies++ // the proxies, and the ranks and guards that inherit their environment
			if !strings.HasPrefix(v, c.RootAddr+":") || strings.Contains(v, ",") {
				t.Errorf("process %d was told %s=%s, want %s:PORT alone", pid, launcher.ConnectEnv, v, c.RootAddr)
			}
		}
	}
	if proxies < 2 {
		t.Errorf("found %s in %d processes, want the 2 proxies at least", launcher.ConnectEnv, proxies)
	}
	if r := j.wait(60 * time.Second); r.Code != 0 {
		t.Fatalf("exit %d\nstderr:\n%s", r.Code, r.Stderr)
	}
	j.assertNoLeftovers(10 * time.Second)

	// 127.0.0.2 is each node's own loopback, where nothing listens.
	marker = testkit.NewMarker("gompi-slurm-test")
	j = &job{Job: &testkit.Job{Marker: marker}}
	argv = gompiexecArgs(j, "-localhost", "127.0.0.2", "-n", "2", bin("nodeprog"), "sleep", "1s")
	j = sallocJob(t, s, marker, []string{"-N", "2", "--ntasks-per-node=1"}, argv...)
	r := j.wait(90 * time.Second)
	if r.Code == 0 || !strings.Contains(r.Stderr, "127.0.0.2:") {
		t.Fatalf("unreachable -localhost: exit %d, want a failure naming 127.0.0.2; stderr:\n%s", r.Code, r.Stderr)
	}
	t.Logf("unreachable -localhost: exit %d: %s", r.Code, r.Stderr)
	j.assertNoLeftovers(10 * time.Second)
}
