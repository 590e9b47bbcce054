package mpiio_test

// Behaviour checked against ROMIO (MPICH's MPI-IO) by running the same
// scenarios with both under gompiexec: where ROMIO's result is right,
// these tests hold runtime/mpiio to it.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mpi "github.com/gompi/gompi/runtime"
	"github.com/gompi/gompi/runtime/mpiio"
)

// TestCollectiveReadEOFIsOwnResult: in a collective read, a rank whose
// range runs past the end of file gets its count and io.EOF; the ranks
// whose ranges were read whole succeed, as in ROMIO (where end of file is
// no error at all). Two-phase reads passed one rank's EOF into the call's
// agreement, so every other rank failed with ErrRemote, and an
// independent-mode read did not.
func TestCollectiveReadEOFIsOwnResult(t *testing.T) {
	for _, cb := range []string{"enable", "disable", "automatic"} {
		t.Run("romio_cb_read="+cb, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "f")
			if err := os.WriteFile(path, make([]byte, 100), 0o644); err != nil {
				t.Fatal(err)
			}
			// rank 0 reads [0, 10), rank 1 [95, 115), rank 2 [200, 210),
			// rank 3 nothing.
			offs := []int64{0, 95, 200, 0}
			lens := []int{10, 20, 10, 0}
			want := []int{10, 5, 0, 0}
			runRanks(t, 4, func(c *mpi.Comm) error {
				f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeRdonly, mpiio.Hints{"romio_cb_read": cb, "cb_nodes": "2"})
				if err != nil {
					return err
				}
				defer f.Close()
				r := c.Rank()
				n, err := f.ReadAtAll(make([]byte, lens[r]), offs[r])
				eof := want[r] < lens[r]
				if n != want[r] || eof != errors.Is(err, io.EOF) || !eof && err != nil || errors.Is(err, mpiio.ErrRemote) {
					return fmt.Errorf("ReadAtAll of %d bytes at %d: %d, %v; want %d and EOF %v", lens[r], offs[r], n, err, want[r], eof)
				}
				return nil
			})
		})
	}
}

// TestRemoteErrorsKeepClass: when one rank's failure fails a collective
// call, every rank's error answers errors.Is for the failure's class (as
// ROMIO returns one error class on every rank), besides ErrRemote on the
// ranks that did not fail themselves. A collective Open of a missing file
// was os.ErrNotExist on rank 0 only.
func TestRemoteErrorsKeepClass(t *testing.T) {
	dir := t.TempDir()
	exists := filepath.Join(dir, "exists")
	if err := os.WriteFile(exists, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	open := func(c *mpi.Comm, path string, mode mpiio.Mode) (*mpiio.File, error) {
		return mpiio.Open(context.Background(), c, path, mode, nil)
	}
	cases := []struct {
		name  string
		class error
		call  func(c *mpi.Comm) error
	}{
		{"open missing", os.ErrNotExist, func(c *mpi.Comm) error {
			_, err := open(c, filepath.Join(dir, "missing"), mpiio.ModeRdonly)
			return err
		}},
		{"open exclusive existing", os.ErrExist, func(c *mpi.Comm) error {
			_, err := open(c, exists, mpiio.ModeCreate|mpiio.ModeExcl|mpiio.ModeRdwr)
			return err
		}},
		{"bad view on rank 1", mpiio.ErrView, func(c *mpi.Comm) error {
			f, err := open(c, exists, mpiio.ModeRdonly)
			if err != nil {
				return err
			}
			defer f.Close()
			ft := mpi.Int32
			if c.Rank() == 1 {
				ft, _ = mpi.Contiguous(3, mpi.Byte) // not whole Int32 etypes
			}
			return f.SetView(0, mpi.Int32, ft)
		}},
		{"negative offset on rank 2", mpi.ErrArg, func(c *mpi.Comm) error {
			f, err := open(c, exists, mpiio.ModeRdonly)
			if err != nil {
				return err
			}
			defer f.Close()
			off := int64(0)
			if c.Rank() == 2 {
				off = -1
			}
			_, err = f.ReadAtAll(make([]byte, 1), off)
			return err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			runRanks(t, 3, func(c *mpi.Comm) error {
				err := tc.call(c)
				var e *mpiio.Error
				if !errors.Is(err, tc.class) || !errors.As(err, &e) {
					return fmt.Errorf("got %v; want an *mpiio.Error wrapping %v", err, tc.class)
				}
				return nil
			})
		})
	}
}

// TestModeAppend: MPI_MODE_APPEND starts both file pointers at the end
// of the file, as ROMIO does (there: get_position 10, get_position_shared
// 10, and three ranks' write_ordered of 3 bytes each make a 19-byte
// file); ModeUniqueOpen is accepted and changes nothing.
func TestModeAppend(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	runRanks(t, 3, func(c *mpi.Comm) error {
		f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeAppend|mpiio.ModeUniqueOpen|mpiio.ModeRdwr, nil)
		if err != nil {
			return err
		}
		if p, err := f.Position(); p != 10 || err != nil {
			return fmt.Errorf("Position() = %d, %v; want 10", p, err)
		}
		if p, err := f.PositionShared(); p != 10 || err != nil {
			return fmt.Errorf("PositionShared() = %d, %v; want 10", p, err)
		}
		if _, err := f.WriteOrdered([]byte{byte('a' + c.Rank()), 'x', 'y'}); err != nil {
			return err
		}
		if c.Rank() == 1 {
			if _, err := f.Write([]byte("!")); err != nil { // at the individual pointer: 10
				return err
			}
		}
		if err := f.Close(); err != nil {
			return err
		}
		if s := (mpiio.ModeAppend | mpiio.ModeUniqueOpen | mpiio.ModeRdwr).String(); s != "rdwr|unique_open|append" {
			return fmt.Errorf("String() = %q", s)
		}
		return nil
	})
	if b, _ := os.ReadFile(path); string(b) != "0123456789!xybxycxy" {
		t.Fatalf("file %q; want %q", b, "0123456789!xybxycxy")
	}
}

// TestNonblockingCollectivesOutstanding: MPI lets a rank start several
// nonblocking collective accesses and complete them later (in the same
// order on every rank), and mix blocking ones in, as ROMIO does: each
// completes as if done alone, in the order started. The requests ran at
// once on goroutines, so their agreements' messages crossed.
func TestNonblockingCollectivesOutstanding(t *testing.T) {
	const n, k, size = 3, 6, 3000
	for _, cb := range []string{"enable", "disable"} {
		t.Run("romio_cb_write="+cb, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "f")
			pat := func(r, i, j int) byte { return byte(r*71 + i*13 + j*7 + 1) }
			runRanks(t, n, func(c *mpi.Comm) error {
				ctx := context.Background()
				f, err := mpiio.Open(ctx, c, path, mpiio.ModeCreate|mpiio.ModeRdwr, mpiio.Hints{"romio_cb_write": cb, "romio_cb_read": cb})
				if err != nil {
					return err
				}
				defer f.Close()
				r := c.Rank()
				// Request i writes rank r's block at (i*n + r)*size; the
				// ranks' blocks of one request are adjacent, unaligned.
				var reqs []*mpi.Request
				for i := 0; i < k; i++ {
					b := make([]byte, size)
					for j := range b {
						b[j] = pat(r, i, j)
					}
					reqs = append(reqs, f.IwriteAtAll(b, int64((i*n+r)*size)))
					if i == k/2 { // a blocking one among them
						if _, err := f.WriteAtAll(b[:10], int64(k*n*size+r*10)); err != nil {
							return err
						}
					}
				}
				for i, q := range reqs {
					st, err := q.Wait(ctx)
					if err != nil || st.Bytes != size {
						return fmt.Errorf("IwriteAtAll %d: %+v, %v", i, st, err)
					}
				}
				got := make([][]byte, k)
				for i := range got {
					got[i] = make([]byte, size)
					reqs[i] = f.IreadAtAll(got[i], int64((i*n+(r+1)%n)*size))
				}
				for i, q := range reqs {
					if _, err := q.Wait(ctx); err != nil {
						return fmt.Errorf("IreadAtAll %d: %v", i, err)
					}
					for j, x := range got[i] {
						if want := pat((r+1)%n, i, j); x != want {
							return fmt.Errorf("request %d: byte %d of rank %d's block: %d, want %d", i, j, (r+1)%n, x, want)
						}
					}
				}
				return nil
			})
		})
	}
}

// TestClosePendingRequests: Close waits for the rank's outstanding
// independent requests (MPI makes closing with them outstanding erroneous;
// a Go program that forgets one must not corrupt memory or another file):
// they complete, and the file holds their bytes. Close closed the
// descriptor under them: requests failed with "file already closed", and
// the ones taking a byte-range lock used a descriptor number that another
// open file might have had by then (a data race on the descriptor).
func TestClosePendingRequests(t *testing.T) {
	const k, size = 40, 50000
	for _, cached := range []bool{false, true} {
		t.Run(fmt.Sprintf("cache=%v", cached), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "f")
			var h mpiio.Hints
			if cached {
				h = mpiio.Hints{"gompi_cache_dir": t.TempDir()}
			}
			runRanks(t, 2, func(c *mpi.Comm) error {
				ctx := context.Background()
				// Sieving writes lock their span: the lock paths run too.
				f, err := mpiio.Open(ctx, c, path, mpiio.ModeCreate|mpiio.ModeRdwr, h)
				if err != nil {
					return err
				}
				var rs []*mpi.Request
				for i := 0; i < k; i++ {
					b := make([]byte, size)
					for j := range b {
						b[j] = byte(i + 1)
					}
					rs = append(rs, f.IwriteAt(b, int64((i*c.Size()+c.Rank())*size)))
				}
				if err := f.Close(); err != nil {
					return err
				}
				for i, r := range rs {
					if _, err := r.Wait(ctx); err != nil {
						return fmt.Errorf("request %d: %v", i, err)
					}
				}
				if _, err := f.WriteAt([]byte{1}, 0); !errors.Is(err, mpiio.ErrClosed) {
					return fmt.Errorf("WriteAt after Close: %v, want ErrClosed", err)
				}
				return nil
			})
			b, err := os.ReadFile(path)
			if err != nil || len(b) != 2*k*size {
				t.Fatalf("file of %d bytes (%v), want %d", len(b), err, 2*k*size)
			}
			for o, x := range b {
				if want := byte(o/size/2 + 1); x != want {
					t.Fatalf("byte %d = %d, want %d", o, x, want)
				}
			}
		})
	}
}

// TestDelete: Delete of a missing file is an *Error naming the file that
// wraps os.ErrNotExist (ROMIO: MPI_ERR_NO_SUCH_FILE), and names no rank
// (it is not collective; the message said "rank -1"); Delete of an open
// file removes the name, and the open File still reads and writes, as
// ROMIO's unlink.
func TestDelete(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	err := mpiio.Delete(missing)
	var e *mpiio.Error
	if !errors.Is(err, os.ErrNotExist) || !errors.As(err, &e) || e.Path != missing ||
		!strings.Contains(err.Error(), missing) || strings.Contains(err.Error(), "rank") {
		t.Fatalf("Delete(missing) = %v; want an *Error naming %s (and no rank) wrapping os.ErrNotExist", err, missing)
	}
	path := filepath.Join(dir, "open")
	runRanks(t, 2, func(c *mpi.Comm) error {
		f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeCreate|mpiio.ModeRdwr, nil)
		if err != nil {
			return err
		}
		if c.Rank() == 0 {
			if err := mpiio.Delete(path); err != nil {
				return err
			}
		}
		if _, err := f.WriteAtAll([]byte{byte('a' + c.Rank())}, int64(c.Rank())); err != nil {
			return err
		}
		b := make([]byte, 2)
		if n, err := f.ReadAtAll(b, 0); n != 2 || err != nil || string(b) != "ab" {
			return fmt.Errorf("read of the deleted file: %d %q %v", n, b, err)
		}
		return f.Close()
	})
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("deleted file still there: %v", err)
	}
}

// TestOffsetOverflow: an access whose file offset does not fit in int64
// (a view with a huge extent, read at a large etype offset) is an
// mpi.ErrArg, on every path. The file offset wrapped: WriteAt of etype
// 2^30 through tiles of 2^40 bytes wrote at byte 64 of the file.
func TestOffsetOverflow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	runRanks(t, 2, func(c *mpi.Comm) error {
		f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeCreate|mpiio.ModeRdwr, nil)
		if err != nil {
			return err
		}
		defer f.Close()
		ft, err := mpi.Resized(mpi.Int64, 0, 1<<40)
		if err != nil {
			return err
		}
		if err := f.SetView(0, mpi.Int64, ft); err != nil {
			return err
		}
		b := make([]byte, 8)
		for _, call := range []struct {
			name string
			fn   func() error
		}{
			{"WriteAt", func() error { _, err := f.WriteAt(b, 1<<30); return err }},
			{"WriteAtAll", func() error { _, err := f.WriteAtAll(b, 1<<30); return err }},
			{"ReadAt", func() error { _, err := f.ReadAt(b, 1<<30); return err }},
			{"ByteOffset", func() error { _, err := f.ByteOffset(1 << 30); return err }},
		} {
			if err := call.fn(); !errors.Is(err, mpi.ErrArg) {
				return fmt.Errorf("%s at etype 2^30 of 2^40-byte tiles: %v, want mpi.ErrArg", call.name, err)
			}
		}
		if sz, err := f.Size(); sz != 0 || err != nil {
			return fmt.Errorf("file of %d bytes (%v) after failed writes", sz, err)
		}
		return nil
	})
}

// TestFiletypeLowerBound: a filetype's lower bound does not move its data
// (copy i of the type map is at disp + i*extent, as in ROMIO); what a view
// needs is that a tile's data fits in one extent, so tiles never overlap.
// Resized(Contiguous(4, Byte), lb 2, extent 8) was refused (data [0, 4)
// "outside its bounds [2, 10)"); ROMIO writes it at disp+0..3, disp+8..11,
// ... and get_byte_offset(5) is disp+9.
func TestFiletypeLowerBound(t *testing.T) {
	for _, coll := range []bool{true, false} {
		t.Run(fmt.Sprintf("collective=%v", coll), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "f")
			runRanks(t, 1, func(c *mpi.Comm) error {
				f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeCreate|mpiio.ModeRdwr, nil)
				if err != nil {
					return err
				}
				defer f.Close()
				ct, _ := mpi.Contiguous(4, mpi.Byte)
				ft, err := mpi.Resized(ct, 2, 8)
				if err != nil {
					return err
				}
				if err := f.SetView(1, mpi.Byte, ft); err != nil {
					return err
				}
				if coll {
					_, err = f.WriteAtAll([]byte("abcdefghijkl"), 0)
				} else {
					_, err = f.WriteAt([]byte("abcdefghijkl"), 0)
				}
				if err != nil {
					return err
				}
				if o, err := f.ByteOffset(5); o != 10 || err != nil {
					return fmt.Errorf("ByteOffset(5) = %d, %v; want 10", o, err)
				}
				if p, err := f.Seek(0, mpiio.SeekEnd); p != 12 || err != nil {
					return fmt.Errorf("Seek(0, SeekEnd) = %d, %v; want 12", p, err)
				}
				b := make([]byte, 12)
				if n, err := f.ReadAtAll(b, 0); n != 12 || err != nil || string(b) != "abcdefghijkl" {
					return fmt.Errorf("ReadAtAll: %d %q %v", n, b, err)
				}
				// Data wider than the extent would overlap the next tile.
				c8, _ := mpi.Contiguous(8, mpi.Byte)
				wide, _ := mpi.Resized(c8, 0, 4)
				if err := f.SetView(0, mpi.Byte, wide); !errors.Is(err, mpiio.ErrView) {
					return fmt.Errorf("SetView of 8 bytes of data in 4-byte tiles: %v, want ErrView", err)
				}
				return nil
			})
			want := "\x00abcd\x00\x00\x00\x00efgh\x00\x00\x00\x00ijkl"
			if b, _ := os.ReadFile(path); string(b) != want {
				t.Fatalf("file %q, want %q", b, want)
			}
		})
	}
}

// TestSmallBufferHints: buffer-size hints below a page are honoured, as
// ROMIO honours them (test suites set cb_buffer_size to a few hundred
// bytes to force many rounds): Open failed with a *HintError ("want an
// integer >= 4096").
func TestSmallBufferHints(t *testing.T) {
	const n, blk, reps = 3, 100, 20
	path := filepath.Join(t.TempDir(), "f")
	h := mpiio.Hints{"cb_buffer_size": "256", "ind_rd_buffer_size": "64", "ind_wr_buffer_size": "64",
		"romio_cb_write": "enable", "romio_cb_read": "enable"}
	runRanks(t, n, func(c *mpi.Comm) error {
		f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeCreate|mpiio.ModeRdwr, h)
		if err != nil {
			return err
		}
		defer f.Close()
		if got := f.Hints()["cb_buffer_size"]; got != "256" {
			return fmt.Errorf("Hints()[cb_buffer_size] = %q, want 256", got)
		}
		v, _ := mpi.Vector(reps, blk, n*blk, mpi.Byte)
		ft, _ := mpi.Resized(v, 0, n*blk*reps)
		if err := f.SetView(int64(c.Rank()*blk), mpi.Byte, ft); err != nil {
			return err
		}
		b := make([]byte, blk*reps)
		for i := range b {
			b[i] = byte(c.Rank()*61 + i*3 + 1)
		}
		if _, err := f.WriteAtAll(b, 0); err != nil {
			return err
		}
		got := make([]byte, len(b))
		if _, err := f.ReadAtAll(got, 0); err != nil || string(got) != string(b) {
			return fmt.Errorf("collective read back: %v, equal %v", err, string(got) == string(b))
		}
		if _, err := f.ReadAt(got, 0); err != nil || string(got) != string(b) { // sieved through 64 bytes
			return fmt.Errorf("independent read back: %v, equal %v", err, string(got) == string(b))
		}
		return nil
	})
}

// TestCollectiveHintsDiffer: the hints every rank's plan of a collective
// call is computed from (cb_nodes, cb_buffer_size, romio_cb_write,
// romio_cb_read, striping_unit) must be the same on every rank; Open fails
// on every rank with a *HintError naming the key otherwise, as ROMIO's
// (MPI_ERR_NOT_SAME). Ranks computed different plans from them: the next
// collective write hung until the context ended, or failed with "message
// truncated".
func TestCollectiveHintsDiffer(t *testing.T) {
	for _, kv := range [][3]string{
		{"cb_nodes", "1", "2"},
		{"cb_buffer_size", "4096", "8192"},
		{"romio_cb_write", "enable", "disable"},
		{"romio_cb_read", "automatic", "enable"},
		{"striping_unit", "512", "4096"},
	} {
		t.Run(kv[0], func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "f")
			runRanks(t, 3, func(c *mpi.Comm) error {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				v := kv[1]
				if c.Rank() == 1 {
					v = kv[2]
				}
				f, err := mpiio.Open(ctx, c, path, mpiio.ModeCreate|mpiio.ModeRdwr, mpiio.Hints{kv[0]: v})
				var he *mpiio.HintError
				if err == nil {
					f.Close()
					return fmt.Errorf("Open with %s=%s on rank 1 and %s elsewhere succeeded", kv[0], kv[2], kv[1])
				}
				if !errors.As(err, &he) || he.Key != kv[0] || !errors.Is(err, mpi.ErrArg) {
					return fmt.Errorf("Open: %v; want a *HintError for %s wrapping mpi.ErrArg", err, kv[0])
				}
				return nil
			})
		})
	}
	// Hints a rank uses alone may differ, and a default equals its value
	// given explicitly.
	path := filepath.Join(t.TempDir(), "f")
	runRanks(t, 2, func(c *mpi.Comm) error {
		h := mpiio.Hints{"ind_wr_buffer_size": fmt.Sprint(1000 * (c.Rank() + 1)), "romio_ds_read": []string{"enable", "disable"}[c.Rank()]}
		if c.Rank() == 1 {
			h["cb_buffer_size"] = "16777216"
		}
		f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeCreate|mpiio.ModeRdwr, h)
		if err != nil {
			return err
		}
		return f.Close()
	})
}

// TestBlockSizeDiffersByHost: the file system's block size (statfs), the
// default alignment of collective plans, may differ between hosts for one
// file (an NFS client reports its wsize, the exporting host its disk's
// block); the ranks agree on one at Open. Each planned with its own: the
// collective write hung until the context ended, or failed.
func TestBlockSizeDiffersByHost(t *testing.T) {
	defer mpiio.SetTestBlockSize(func(r int) int64 { return []int64{4096, 1 << 20, 65536}[r] })()
	path := filepath.Join(t.TempDir(), "f")
	const blk, reps = 3000, 100
	runRanks(t, 3, func(c *mpi.Comm) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		f, err := mpiio.Open(ctx, c, path, mpiio.ModeCreate|mpiio.ModeRdwr,
			mpiio.Hints{"romio_cb_write": "enable", "romio_cb_read": "enable", "cb_nodes": "3", "cb_buffer_size": "65536"})
		if err != nil {
			return err
		}
		defer f.Close()
		v, _ := mpi.Vector(reps, blk, 3*blk, mpi.Byte)
		ft, _ := mpi.Resized(v, 0, 3*blk*reps)
		if err := f.SetView(int64(c.Rank()*blk), mpi.Byte, ft); err != nil {
			return err
		}
		b := make([]byte, 2*blk*reps)
		for i := range b {
			b[i] = byte(c.Rank()*7 + i*5 + 1)
		}
		if _, err := f.WriteAtAll(b, 0); err != nil {
			return err
		}
		got := make([]byte, len(b))
		if _, err := f.ReadAtAll(got, 0); err != nil || string(got) != string(b) {
			return fmt.Errorf("read back: %v, equal %v", err, string(got) == string(b))
		}
		if su := f.Hints()["striping_unit"]; su != "1048576" {
			return fmt.Errorf("striping_unit %s, want the largest block size 1048576", su)
		}
		return nil
	})
}

// TestCacheFlushUnderSieveLock: a rank's cached writes and another rank's
// sieved independent writes of interleaved (disjoint) blocks: each rank
// reads back its own bytes, and the file ends with every rank's last
// write (MPI: nonconflicting accesses are sequentially consistent). A
// sieve reads its span, then writes it back under a byte-range lock; the
// cache's flusher wrote without it, so a sieve that read before a flush
// wrote the old bytes back after it.
func TestCacheFlushUnderSieveLock(t *testing.T) {
	const blk, nb, k = 512, 64, 100
	path := filepath.Join(t.TempDir(), "f")
	cdir := t.TempDir()
	runRanks(t, 2, func(c *mpi.Comm) error {
		r := c.Rank()
		h := mpiio.Hints{"romio_ds_write": "enable"}
		if r == 0 {
			h["gompi_cache_dir"] = cdir
		}
		f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeCreate|mpiio.ModeRdwr, h)
		if err != nil {
			return err
		}
		v, _ := mpi.Contiguous(blk, mpi.Byte)
		ft, _ := mpi.Resized(v, 0, 2*blk)
		if err := f.SetView(int64(r*blk), mpi.Byte, ft); err != nil {
			return err
		}
		b, got := make([]byte, blk*nb), make([]byte, blk*nb)
		for i := 0; i < k; i++ {
			for j := range b {
				b[j] = byte(r*100 + i + 1)
			}
			if _, err := f.WriteAt(b, 0); err != nil {
				return err
			}
			if r == 0 { // drains its cache, then reads
				if _, err := f.ReadAt(got, 0); err != nil {
					return err
				}
				if j := bytes.IndexFunc(got, func(x rune) bool { return x != rune(b[0]) }); j >= 0 {
					return fmt.Errorf("write %d: own byte %d reads %d, want %d", i, j, got[j], b[0])
				}
			}
		}
		return f.Close()
	})
	got, _ := os.ReadFile(path)
	for o, x := range got {
		if want := byte(o/blk%2*100 + k); x != want {
			t.Fatalf("file byte %d = %d, want %d", o, x, want)
		}
	}
}
