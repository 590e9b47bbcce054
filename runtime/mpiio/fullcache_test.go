package mpiio_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	mpi "github.com/gompi/gompi/runtime"
	"github.com/gompi/gompi/runtime/mpiio"
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

// TestCacheFullFailsTheWrite: a cached write that does not fit in the
// cache directory fails with ENOSPC, on the copy path and on the snapshot
// path, and the cache goes on serving the writes that fit. The snapshot
// path acknowledged the write and its forked writer then failed with
// ENOSPC, losing it; space for the extent is now reserved (fallocate)
// before the write is journaled.
func TestCacheFullFailsTheWrite(t *testing.T) {
	for _, tc := range []struct {
		name  string
		hints func(cdir string) mpiio.Hints
	}{
		{"copy", func(cdir string) mpiio.Hints { return mpiio.Hints{"gompi_cache_dir": cdir} }},
		{"snapshot", snapHints},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cdir := filepath.Join(smallTmpfs(t, 2<<20), "cache")
			path := filepath.Join(t.TempDir(), "f")
			small := snapPattern(2, 0, 1<<20)
			runRanks(t, 1, func(c *mpi.Comm) error {
				f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeCreate|mpiio.ModeWronly, tc.hints(cdir))
				if err != nil {
					return err
				}
				_, werr := f.WriteAt(snapPattern(1, 0, 4<<20), 0)
				if !errors.Is(werr, syscall.ENOSPC) {
					f.Close()
					return fmt.Errorf("4 MiB write into a 2 MiB cache: %v, want ENOSPC", werr)
				}
				if _, err := f.WriteAt(small, 8<<20); err != nil {
					f.Close()
					return fmt.Errorf("a write that fits, after the full one: %v", err)
				}
				return f.Close()
			})
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) != 9<<20 || !bytes.Equal(b[8<<20:], small) || bytes.Count(b[:8<<20], []byte{0}) != 8<<20 {
				t.Fatalf("file: %d bytes, want 9 MiB: zeros (the failed write) then the 1 MiB written", len(b))
			}
		})
	}
}
