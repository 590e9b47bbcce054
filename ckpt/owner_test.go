package ckpt

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/gompi/gompi/ckpt/layout"
	"github.com/gompi/gompi/internal/testkit"
	mpi "github.com/gompi/gompi/runtime"
	"golang.org/x/sys/unix"
)

// TestPrefixOfARunningJob: a second job on a prefix a running job writes
// (here without caches, whose locks would refuse it first) fails in New
// on every rank, naming the owner; once the first job closed, it runs.
func TestPrefixOfARunningJob(t *testing.T) {
	t.Setenv(EnvOwnerStale, "1") // a live owner on this host is waited for 0.1 s
	cfg := Config{Prefix: t.TempDir()}
	errs := besideRunningJob(t, cfg, func(*mpi.Comm, *Ckpt) error { return nil })
	for r, err := range errs {
		if !errors.Is(err, layout.ErrPrefixInUse) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
			t.Fatalf("rank %d: %v, want ErrPrefixInUse naming pid %d", r, err, os.Getpid())
		}
	}
	checkpointSteps(t, 2, cfg, 10)
}

// TestRestoreFromReadOnlyPrefix: a job that cannot write the prefix (a
// read-only copy of the checkpoints) still restores from it: the owner
// record is only for jobs that write.
func TestRestoreFromReadOnlyPrefix(t *testing.T) {
	if os.Geteuid() == 0 {
		// root writes through the mode bits: a read-only bind mount instead.
		cfg := Config{Prefix: t.TempDir()}
		checkpointSteps(t, 2, cfg, 10)
		ro := testkit.SmallTmpfs(t, 1<<20) // a mount point to bind over
		if err := unix.Mount(cfg.Prefix, ro, "", unix.MS_BIND, ""); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("", ro, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Unmount(ro, unix.MNT_DETACH) })
		restoreExpect(t, 2, Config{Prefix: ro}, 1, 10, "from a read-only prefix: restored %v, want epoch 1")
		return
	}
	cfg := Config{Prefix: t.TempDir()}
	checkpointSteps(t, 2, cfg, 10)
	if err := os.Chmod(cfg.Prefix, 0o555); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(cfg.Prefix, 0o755)
	restoreExpect(t, 2, cfg, 1, 10, "from a read-only prefix: restored %v, want epoch 1")
}
