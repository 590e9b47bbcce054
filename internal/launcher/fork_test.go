package launcher_test

import (
	"os/exec"
	"sync"
	"syscall"
	"testing"

	"github.com/gompi/gompi/internal/launcher"
)

// Fork threads are started on demand: forks one after another use one
// thread (gompiexec under the slurm launcher forks srun alone), concurrent
// ones up to ForkThreads.
func TestForkThreadsOnDemand(t *testing.T) {
	start := func() {
		cmd := exec.Command("/bin/true")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := launcher.StartLocked(cmd); err != nil {
			t.Error(err)
			return
		}
		cmd.Wait()
	}
	before := launcher.ForkThreadsStarted()
	for i := 0; i < 6; i++ {
		start()
	}
	want := max(before, 1)
	if got := launcher.ForkThreadsStarted(); got != want {
		t.Fatalf("after 6 forks one at a time: %d fork threads, want %d", got, want)
	}
	var wg sync.WaitGroup
	for i := 0; i < 3*launcher.ForkThreads; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); start() }()
	}
	wg.Wait()
	if got := launcher.ForkThreadsStarted(); got < want || got > launcher.ForkThreads {
		t.Fatalf("after concurrent forks: %d fork threads, want %d to %d", got, want, launcher.ForkThreads)
	}
}
