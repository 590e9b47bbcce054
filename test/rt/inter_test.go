package rt

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Intercommunicators between two unequal halves of the world, as real
// processes under gompiexec, on shared memory, TCP only and without CMA.
func TestGompiexecInter(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    int
		env  []string
	}{
		{"shm", 2, nil}, {"shm", 3, nil}, {"shm", 5, nil}, {"shm", 8, nil},
		{"tcp", 5, []string{"GOMPI_SHM=0"}},
		{"nocma", 5, []string{"GOMPI_CMA=0"}},
	} {
		t.Run(tc.name+"/"+strconv.Itoa(tc.n), func(t *testing.T) {
			out, err := runEnv(t, 2*time.Minute, tc.env, bin("gompiexec"), "-n", strconv.Itoa(tc.n), bin("rtprog"), "inter")
			if err != nil {
				t.Fatalf("%v:\n%s", err, out)
			}
			wantOK(t, out, tc.n)
		})
	}
}

// A remote member that leaves like a crash: the other group's ranks, most
// never connected to it, get its *PeerError on the intercommunicator.
func TestGompiexecInterPeerDies(t *testing.T) {
	const n = 5 // A: ranks 0, 1; B: 4 (its rank 0, the victim), 3, 2
	out, err := run(t, 2*time.Minute, bin("gompiexec"), "-n", strconv.Itoa(n), bin("rtprog"), "interdie")
	if err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	for r := 0; r < 2; r++ {
		if !strings.Contains(out, fmt.Sprintf("rank %d: saw mpi: peer rank %d", r, n-1)) {
			t.Fatalf("rank %d did not see the peer error:\n%s", r, out)
		}
	}
	wantOK(t, out, n-1)
}

// A rank that completes a collective and leaves at once, like a crash:
// every other rank must still complete it (what the victim sent before it
// left arrives), on shared memory, TCP and without CMA. Each job is short
// and the race windows small, so several jobs run per case.
func TestGompiexecOpThenDie(t *testing.T) {
	const n = 4
	victims := []int{0, n - 1}
	if testing.Short() {
		victims = victims[:1]
	}
	for _, tr := range []struct {
		name string
		env  []string
	}{{"shm", nil}, {"tcp", []string{"GOMPI_SHM=0"}}, {"nocma", []string{"GOMPI_CMA=0"}}} {
		for _, op := range []string{"free", "bcast", "allreduce"} {
			t.Run(tr.name+"/"+op, func(t *testing.T) {
				for _, v := range victims {
					out, err := runEnv(t, 2*time.Minute, tr.env, bin("gompiexec"), "-n", strconv.Itoa(n), bin("rtprog"), "opdie", op, strconv.Itoa(v))
					if err != nil {
						t.Fatalf("victim %d: %v:\n%s", v, err, out)
					}
					for r := 0; r < n; r++ {
						if r != v && !strings.Contains(out, fmt.Sprintf("rank %d: ok\n", r)) {
							t.Fatalf("victim %d: rank %d did not report ok:\n%s", v, r, out)
						}
					}
				}
			})
		}
	}
}
