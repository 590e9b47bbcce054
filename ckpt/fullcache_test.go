package ckpt

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	mpi "github.com/gompi/gompi/runtime"
	"github.com/gompi/gompi/runtime/cow"
	"golang.org/x/sys/unix"
)

// smallTmpfs mounts a tmpfs of size bytes for the test (root only: CI
// runs as root, where failing to mount is a failure, not a skip).
func smallTmpfs(t *testing.T, size int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("a full file system needs a tmpfs mount, which needs root")
		}
		t.Skip("needs root to mount a small tmpfs")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		t.Fatalf("mount a %d-byte tmpfs on %s: %v", size, dir, err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// TestSnapshotIntoFullCache: a snapshotted checkpoint whose file does not
// fit in the cache fails in Checkpoint, on every rank, with ENOSPC. It
// returned as taken; the forked writer then failed for want of space and
// the epoch was never committed anywhere. Its storage is now reserved
// (fallocate) before the fork.
func TestSnapshotIntoFullCache(t *testing.T) {
	t.Setenv(cow.EnvDisable, "")
	cfg := Config{Prefix: t.TempDir(), Cache: filepath.Join(smallTmpfs(t, 4<<20), "cache")}
	errs := runRanks(t, 2, func(comm *mpi.Comm) error {
		var grid []float64
		c, err := newGrid(comm, cfg, &grid, 1<<19) // 4 MiB per rank
		if err != nil {
			return err
		}
		defer cow.Free(grid)
		cerr := c.Checkpoint()
		if c.Snapshots() != 0 {
			return fmt.Errorf("Checkpoint into a full cache: %v, and %d snapshot taken", cerr, c.Snapshots())
		}
		c.Close()
		return cerr
	})
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), syscall.ENOSPC.Error()) {
			t.Fatalf("rank %d: Checkpoint of 8 MiB into a 4 MiB cache: %v, want ENOSPC", r, err)
		}
	}
}
