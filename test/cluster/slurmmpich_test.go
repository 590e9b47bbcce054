package cluster_test

import (
	"fmt"
	"net"
	"os"
	"slices"
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
	if want := fmt.Sprintf("ports %d-%d (MPIEXEC_PORT_RANGE)", port, port); r.Code == 0 || !strings.Contains(r.Stderr, want) {
		t.Fatalf("range busy: exit %d, want a failure naming %q; stderr:\n%s", r.Code, want, r.Stderr)
	}
}

// TestSlurmMPICH runs an MPICH program under the slurm launcher (salloc,
// no -hosts): each rank on its node of the allocation, MPI_COMM_TYPE_SHARED
// the ranks of that node, messages across all of them; then MPI_Abort on
// the last node ends the job with its code and leaves nothing behind.
func TestSlurmMPICH(t *testing.T) {
	c, s := slurmSetup(t)
	if mpiccErr != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(mpiccErr)
		}
		t.Skip(mpiccErr)
	}
	j := startSalloc(t, s, []string{"-N", "3", "--ntasks-per-node=2"}, bin("place"))
	r := j.wait(90 * time.Second)
	want := []string{"size 6 sum 15 ring 6"}
	for rk := 0; rk < 6; rk++ {
		want = append(want, fmt.Sprintf("rank %d at %s shared [%d,%d] universe -1 appnum 0", rk, c.Hosts[rk/2].Identity, rk/2*2, rk/2*2+1))
	}
	if got := strings.Split(strings.TrimSpace(r.Stdout), "\n"); r.Code != 0 || !slices.Equal(got, want) {
		t.Fatalf("exit %d, got\n%s\nwant\n%s\nstderr:\n%s", r.Code, r.Stdout, strings.Join(want, "\n"), r.Stderr)
	}
	j.assertNoLeftovers(10 * time.Second)
	// MPI_Abort on the third node while the others wait in MPI_Barrier.
	j = startSalloc(t, s, []string{"-N", "3", "--ntasks-per-node=2"}, bin("fail"), "abort", "4")
	r = j.wait(90 * time.Second)
	if want := "rank 4 on " + c.Hosts[2].Name + " called abort with exit code 7"; r.Code != 7 || !strings.Contains(r.Stderr, want) {
		t.Fatalf("abort: exit %d, want 7 and %q; stderr:\n%s", r.Code, want, r.Stderr)
	}
	j.assertNoLeftovers(10 * time.Second)
}
