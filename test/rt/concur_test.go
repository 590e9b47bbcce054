package rt

import (
	"strconv"
	"testing"
	"time"
)

// The runtime's concurrency and cancellation promises (rtprog concur) as
// real processes under gompiexec: on shared memory, TCP only and without
// CMA.
func TestGompiexecConcur(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    int
		env  []string
	}{
		{"shm", 1, nil}, {"shm", 2, nil}, {"shm", 3, nil}, {"shm", 8, nil},
		{"tcp", 4, []string{"GOMPI_SHM=0"}},
		{"nocma", 4, []string{"GOMPI_CMA=0"}},
	} {
		t.Run(tc.name+"/"+strconv.Itoa(tc.n), func(t *testing.T) {
			out, err := runEnv(t, 2*time.Minute, tc.env, bin("gompiexec"), "-n", strconv.Itoa(tc.n), bin("rtprog"), "concur")
			if err != nil {
				t.Fatalf("%v:\n%s", err, out)
			}
			wantOK(t, out, tc.n)
		})
	}
}
