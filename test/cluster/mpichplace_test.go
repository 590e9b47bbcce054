package cluster_test

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gompi/gompi/internal/testkit"
)

// TestMPICHPlacementAcrossHosts runs an MPICH program on uneven hosts, with
// -ppn, wrapping past the slots, MPMD and -usize SYSTEM, and checks what
// MPICH makes of the placement: each rank on its host, MPI_COMM_TYPE_SHARED
// exactly the ranks of that host (shared memory only within it), appnum
// and universe size, and an allreduce and a ring across every rank. The
// same command under mpiexec.hydra (over the same SSH agent) must print the
// same.
func TestMPICHPlacementAcrossHosts(t *testing.T) {
	c := setup(t)
	if mpiccErr != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(mpiccErr)
		}
		t.Skip(mpiccErr)
	}
	hydra, hydraErr := exec.LookPath("mpiexec.hydra")
	if hydraErr != nil && os.Getenv("CI") != "" {
		t.Fatal(hydraErr)
	}
	n := func(i int) string { return c.Hosts[i].Name }
	for _, tc := range []struct {
		args     []string
		on       []int // host of each rank
		apps     []int // appnum of each rank; nil: all 0
		universe int
	}{
		{[]string{"-hosts", n(0) + ":2," + n(1) + ":1," + n(2) + ":3", "-n", "6"}, []int{0, 0, 1, 2, 2, 2}, nil, -1},
		// Past the slots placement wraps around.
		{[]string{"-hosts", n(0) + "," + n(1) + ":3", "-n", "6"}, []int{0, 1, 1, 1, 0, 1}, nil, -1},
		{[]string{"-hosts", n(0) + ":2," + n(1) + ":3," + n(2), "-ppn", "2", "-n", "7"}, []int{0, 0, 1, 1, 2, 2, 0}, nil, -1},
		// MPMD segments continue where the previous one stopped.
		{[]string{"-hosts", n(0) + ":1," + n(1) + ":1", "-n", "1", bin("place"), ":", "-n", "3"}, []int{0, 1, 0, 1}, []int{0, 1, 1, 1}, -1},
		{[]string{"-hosts", c.HostList(2), "-n", "1", bin("place"), ":", "-n", "3", bin("place"), ":", "-n", "2"},
			[]int{0, 0, 1, 1, 2, 2}, []int{0, 1, 1, 1, 2, 2}, -1},
		// SYSTEM: the slots of the hosts given ranks (1 + 4), as Hydra.
		{[]string{"-usize", "SYSTEM", "-hosts", n(0) + ":1," + n(1) + ":4," + n(2) + ":2", "-n", "2"}, []int{0, 1}, nil, 5},
	} {
		size := len(tc.on)
		want := []string{fmt.Sprintf("size %d sum %d ring %d", size, size*(size-1)/2, size)}
		for r, h := range tc.on {
			var shared []string
			for q, hq := range tc.on {
				if hq == h {
					shared = append(shared, fmt.Sprint(q))
				}
			}
			app := 0
			if tc.apps != nil {
				app = tc.apps[r]
			}
			want = append(want, fmt.Sprintf("rank %d at %s shared [%s] universe %d appnum %d",
				r, c.Hosts[h].Identity, strings.Join(shared, ","), tc.universe, app))
		}
		args := append(slices.Clone(tc.args), bin("place"))
		r := runJob(t, c, c.Client, "", args...)
		if got := strings.Split(strings.TrimSpace(r.Stdout), "\n"); r.Code != 0 || !slices.Equal(got, want) {
			t.Errorf("%v: exit %d, got\n%s\nwant\n%s\nstderr:\n%s", tc.args, r.Code, r.Stdout, strings.Join(want, "\n"), r.Stderr)
		}
		if hydraErr != nil {
			continue
		}
		// Hydra's proxies connect back to it: name the interface into the
		// cluster, as the SSH launch benchmark does.
		hargs := append([]string{"-launcher", "ssh", "-launcher-exec", c.Client.Agent, "-iface", c.RootLink(), "-wdir", binDir}, args...)
		j := testkit.NewJob("", "", hydra, hargs...)
		j.Cmd.Dir = binDir // as startJob: later segments run where mpiexec does
		if err := j.Start(); err != nil {
			t.Fatal(err)
		}
		hr := j.MustWait(t, 60*time.Second)
		if got := strings.Split(strings.TrimSpace(hr.Stdout), "\n"); hr.Code != 0 || !slices.Equal(got, want) {
			t.Errorf("mpiexec.hydra %v: exit %d, got\n%s\nwant\n%s\nstderr:\n%s", tc.args, hr.Code, hr.Stdout, strings.Join(want, "\n"), hr.Stderr)
		}
		if err := waitClean(c, 5*time.Second); err != nil {
			t.Fatalf("after mpiexec.hydra %v: %v", tc.args, err)
		}
	}
}
