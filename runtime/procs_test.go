package mpi

import (
	"runtime"
	"strconv"
	"testing"
)

// A rank sharing its host takes its share of the CPUs as GOMAXPROCS,
// unless the user set GOMAXPROCS or the manager gave no local count.
func TestShareCPUs(t *testing.T) {
	saved := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(saved) })
	ncpu := runtime.NumCPU()
	for _, tc := range []struct {
		name, local, gomaxprocs string
		want                    int
	}{
		{"no process manager", "", "", ncpu},
		{"alone on the host", "1", "", ncpu},
		{"two ranks", "2", "", max(1, ncpu/2)},
		{"more ranks than CPUs", strconv.Itoa(2*ncpu + 1), "", 1},
		{"user's GOMAXPROCS wins", "2", strconv.Itoa(ncpu), ncpu},
		{"garbage count", "many", "", ncpu},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runtime.GOMAXPROCS(ncpu)
			t.Setenv("MPI_LOCALNRANKS", tc.local)
			t.Setenv("GOMAXPROCS", tc.gomaxprocs)
			shareCPUs()
			if got := runtime.GOMAXPROCS(0); got != tc.want {
				t.Fatalf("GOMAXPROCS = %d, want %d (NumCPU %d)", got, tc.want, ncpu)
			}
		})
	}
}
