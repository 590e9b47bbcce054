package mpiio_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/gompi/gompi/internal/testkit"
	mpi "github.com/gompi/gompi/runtime"
	"github.com/gompi/gompi/runtime/mpiio"
)

// TestCacheFull: a file written through a cache directory smaller than
// the data (2 MiB of tmpfs here) gets every byte, on the copy path and on
// the snapshot path. A write that does not fit first drains the cache
// (the flushed extents' space is reused) and, if it is larger than the
// cache, goes straight to the file. Writes failed with ENOSPC once the
// data file reached the cache's size, whatever had been flushed; and on
// the snapshot path the write was acknowledged and then lost, when its
// forked writer ran out of space (space is now reserved before the write
// is journaled).
func TestCacheFull(t *testing.T) {
	for _, tc := range []struct {
		name  string
		hints func(cdir string) mpiio.Hints
		snaps bool
	}{
		{"copy", func(cdir string) mpiio.Hints { return mpiio.Hints{"gompi_cache_dir": cdir} }, false},
		{"snapshot", snapHints, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cdir := filepath.Join(testkit.SmallTmpfs(t, 2<<20), "cache")
			path := filepath.Join(t.TempDir(), "f")
			const mb = 1 << 20
			// Offset and size of each write, in MiB: three that fit one
			// at a time, one larger than the cache, one after it.
			writes := [][2]int{{0, 1}, {1, 1}, {2, 1}, {3, 4}, {7, 1}}
			want := make([]byte, 8*mb)
			runRanks(t, 1, func(c *mpi.Comm) error {
				f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeCreate|mpiio.ModeWronly, tc.hints(cdir))
				if err != nil {
					return err
				}
				for i, w := range writes {
					b := snapPattern(i+1, 0, w[1]*mb)
					copy(want[w[0]*mb:], b)
					if _, err := f.WriteAt(b, int64(w[0]*mb)); err != nil {
						f.Close()
						return fmt.Errorf("write of %d MiB at %d MiB into a 2 MiB cache: %v", w[1], w[0], err)
					}
				}
				if n := mpiio.CacheSnapshots(f); tc.snaps && n == 0 {
					f.Close()
					return fmt.Errorf("no write took the snapshot path")
				}
				if n := mpiio.CacheThrough(f); n != 1 {
					f.Close()
					return fmt.Errorf("%d writes went to the file, want 1 (the 4 MiB one)", n)
				}
				return f.Close()
			})
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b, want) {
				t.Fatalf("file: %d bytes, not the 8 MiB written (first difference at %d)", len(b), firstDiff(b, want))
			}
		})
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestCacheFullCollective: collective writes of two ranks sharing a 2 MiB
// cache directory, 3 MiB each per call, interleaved in 64 KiB blocks
// (two-phase with local caching), all reach the file.
func TestCacheFullCollective(t *testing.T) {
	cdir := filepath.Join(testkit.SmallTmpfs(t, 2<<20), "cache")
	path := filepath.Join(t.TempDir(), "f")
	const blk, per = 64 << 10, 3 << 20
	want := make([]byte, 2*2*per)
	runRanks(t, 2, func(c *mpi.Comm) error {
		f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeCreate|mpiio.ModeWronly, snapHints(cdir))
		if err != nil {
			return err
		}
		ft, err := mpi.Vector(per/blk, blk, 2*blk, mpi.Byte)
		if err == nil {
			ft, err = mpi.Resized(ft, 0, 2*per)
		}
		if err != nil {
			return err
		}
		if err := f.SetView(int64(c.Rank()*blk), mpi.Byte, ft); err != nil {
			return err
		}
		for call := 0; call < 2; call++ {
			b := snapPattern(call+1, c.Rank(), per)
			for k := 0; k < per/blk; k++ {
				copy(want[call*2*per+(2*k+c.Rank())*blk:], b[k*blk:(k+1)*blk])
			}
			if _, err := f.WriteAtAll(b, int64(call*per)); err != nil {
				f.Close()
				return fmt.Errorf("call %d: %v", call, err)
			}
		}
		return f.Close()
	})
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, want) {
		t.Fatalf("file: %d bytes, not the %d written (first difference at %d)", len(b), len(want), firstDiff(b, want))
	}
}
