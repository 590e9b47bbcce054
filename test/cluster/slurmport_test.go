package cluster_test

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gompi/gompi/internal/testkit"
)

// TestSlurmPortRange: where a firewall lets compute nodes reach the login
// node only on some ports, sites set MPIEXEC_PORT_RANGE (or MPICH's
// MPIR_CVAR_CH3_PORT_RANGE) and Hydra takes its connect-back port from
// there. The proxies of gompiexec's slurm launcher must connect back to a
// port of that range, and a range with no free port must fail naming it.
func TestSlurmPortRange(t *testing.T) {
	c, s := slurmSetup(t)
	// A port free now in the root namespace, given as a range of one.
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	for _, v := range []string{"MPIEXEC_PORT_RANGE", "MPIR_CVAR_CH3_PORT_RANGE"} {
		marker := testkit.NewMarker("gompi-slurm-test")
		j := &job{Job: &testkit.Job{Marker: marker}}
		argv := append([]string{"env", fmt.Sprintf("%s=%d:%d", v, port, port)},
			gompiexecArgs(j, "-n", "2", bin("nodeprog"), "sleep", "3s")...)
		j = sallocJob(t, s, marker, []string{"-N", "2", "--ntasks-per-node=1"}, argv...)
		j.waitReady(2)
		for _, h := range c.Hosts[:2] {
			out, err := h.Run("ss", "-Htn", "state", "established", "dport", "=", fmt.Sprintf(":%d", port))
			if err != nil || !strings.Contains(out, fmt.Sprintf("%s:%d", c.RootAddr, port)) {
				t.Errorf("%s=%d:%d: %s has no connection to %s:%d (%v):\n%s", v, port, port, h.Name, c.RootAddr, port, err, out)
			}
		}
		if r := j.wait(60 * time.Second); r.Code != 0 {
			t.Fatalf("%s: exit %d\nstderr:\n%s", v, r.Code, r.Stderr)
		}
		j.assertNoLeftovers(10 * time.Second)
	}
	// Every port of the range taken: the job fails before srun, naming
	// the range and where it came from.
	busy, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	marker := testkit.NewMarker("gompi-slurm-test")
	j := &job{Job: &testkit.Job{Marker: marker}}
	argv := append([]string{"env", fmt.Sprintf("MPIEXEC_PORT_RANGE=%d:%d", port, port)},
		gompiexecArgs(j, "-n", "2", bin("nodeprog"), "sleep", "1s")...)
	j = sallocJob(t, s, marker, []string{"-N", "2", "--ntasks-per-node=1"}, argv...)
	r := j.wait(60 * time.Second)
	if want := fmt.Sprintf("MPIEXEC_PORT_RANGE %d:%d", port, port); r.Code == 0 || !strings.Contains(r.Stderr, want) {
		t.Fatalf("range busy: exit %d, want a failure naming %q; stderr:\n%s", r.Code, want, r.Stderr)
	}
}
