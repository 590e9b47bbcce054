package proxy

import (
	"runtime"
	"testing"

	"github.com/gompi/gompi/internal/launcher"
)

// Ranks fork at most as many at once as the proxy has CPUs, up to
// launcher.ForkThreads.
func TestForkParFollowsCPUs(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, tc := range []struct{ procs, want int }{
		{1, 1}, {2, 2}, {3, min(3, launcher.ForkThreads)}, {64, launcher.ForkThreads},
	} {
		runtime.GOMAXPROCS(tc.procs)
		if got := forkPar(); got != tc.want {
			t.Errorf("GOMAXPROCS %d: %d forks at once, want %d", tc.procs, got, tc.want)
		}
	}
}
