package mpiio_test

import (
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

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	exists := filepath.Join(dir, "exists")
	os.WriteFile(exists, []byte("x"), 0o644)
	cases := []struct {
		name  string
		path  string
		mode  func(r int) mpiio.Mode
		hints mpiio.Hints
		check func(error) bool
	}{
		{"modes differ", filepath.Join(dir, "a"), func(r int) mpiio.Mode {
			if r == 1 {
				return mpiio.ModeCreate | mpiio.ModeWronly
			}
			return mpiio.ModeCreate | mpiio.ModeRdwr
		}, nil, func(err error) bool { return errors.Is(err, mpiio.ErrMode) || errors.Is(err, mpiio.ErrRemote) }},
		{"two access modes", filepath.Join(dir, "b"), func(int) mpiio.Mode { return mpiio.ModeRdonly | mpiio.ModeRdwr }, nil,
			func(err error) bool { return errors.Is(err, mpiio.ErrMode) }},
		{"exclusive exists", exists, func(int) mpiio.Mode { return mpiio.ModeCreate | mpiio.ModeExcl | mpiio.ModeRdwr }, nil,
			func(err error) bool { return errors.Is(err, os.ErrExist) || errors.Is(err, mpiio.ErrRemote) }},
		{"missing", filepath.Join(dir, "nope"), func(int) mpiio.Mode { return mpiio.ModeRdonly }, nil,
			func(err error) bool { return errors.Is(err, os.ErrNotExist) || errors.Is(err, mpiio.ErrRemote) }},
		{"bad hint", filepath.Join(dir, "c"), func(int) mpiio.Mode { return mpiio.ModeCreate | mpiio.ModeRdwr },
			mpiio.Hints{"cb_buffer_size": "lots", "unknown_hint": "ignored"}, func(err error) bool {
				var he *mpiio.HintError
				return errors.As(err, &he) && he.Key == "cb_buffer_size" && strings.Contains(err.Error(), "cb_buffer_size")
			}},
		{"buffer past 1 GiB", filepath.Join(dir, "g"), func(int) mpiio.Mode { return mpiio.ModeCreate | mpiio.ModeRdwr },
			mpiio.Hints{"cb_buffer_size": "1099511627776"}, func(err error) bool {
				var he *mpiio.HintError
				return errors.As(err, &he) && he.Key == "cb_buffer_size" && strings.Contains(err.Error(), "1073741824")
			}},
		{"bad tri hint", filepath.Join(dir, "d"), func(int) mpiio.Mode { return mpiio.ModeCreate | mpiio.ModeRdwr },
			mpiio.Hints{"romio_cb_write": "sometimes"}, func(err error) bool {
				var he *mpiio.HintError
				return errors.As(err, &he) && he.Key == "romio_cb_write"
			}},
		{"bad snapshot hint", filepath.Join(dir, "e"), func(int) mpiio.Mode { return mpiio.ModeCreate | mpiio.ModeRdwr },
			mpiio.Hints{"gompi_cache_snapshot": "maybe"}, func(err error) bool {
				var he *mpiio.HintError
				return errors.As(err, &he) && he.Key == "gompi_cache_snapshot"
			}},
		{"bad snapshot minimum", filepath.Join(dir, "f"), func(int) mpiio.Mode { return mpiio.ModeCreate | mpiio.ModeRdwr },
			mpiio.Hints{"gompi_cache_snapshot_min": "0"}, func(err error) bool {
				var he *mpiio.HintError
				return errors.As(err, &he) && he.Key == "gompi_cache_snapshot_min"
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			runRanks(t, 3, func(c *mpi.Comm) error {
				f, err := mpiio.Open(context.Background(), c, tc.path, tc.mode(c.Rank()), tc.hints)
				if err == nil {
					f.Close()
					return fmt.Errorf("opened")
				}
				if !tc.check(err) {
					return fmt.Errorf("unexpected error %v", err)
				}
				return nil
			})
		})
	}
}

func TestShortReadAndClosed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	runRanks(t, 2, func(c *mpi.Comm) error {
		f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeCreate|mpiio.ModeRdwr, nil)
		if err != nil {
			return err
		}
		if _, err := f.WriteAtAll(make([]byte, 100), int64(100*c.Rank())); err != nil {
			return err
		}
		buf := make([]byte, 150)
		for _, read := range []func([]byte, int64) (int, error){f.ReadAt, f.ReadAtAll} {
			n, err := read(buf, 100)
			var e *mpiio.Error
			if n != 100 || !errors.Is(err, io.EOF) || !errors.As(err, &e) || e.Rank != c.Rank() || e.Off != 200 {
				return fmt.Errorf("short read: n=%d err=%v", n, err)
			}
		}
		if err := f.SetSize(50); err != nil {
			return err
		}
		if sz, _ := f.Size(); sz != 50 {
			return fmt.Errorf("size after SetSize %d", sz)
		}
		// Rank 0 extends the file in Preallocate before agreeing with the
		// others: without this barrier it may do so while another rank is
		// still checking the size SetSize left.
		if err := c.Barrier(); err != nil {
			return err
		}
		if err := f.Preallocate(4096); err != nil {
			return err
		}
		if sz, _ := f.Size(); sz != 4096 {
			return fmt.Errorf("size after Preallocate %d", sz)
		}
		if err := f.Close(); err != nil {
			return err
		}
		if _, err := f.ReadAt(buf, 0); !errors.Is(err, mpiio.ErrClosed) {
			return fmt.Errorf("read after close: %v", err)
		}
		return nil
	})
}

// Overlapping independent writes in atomic mode: every byte range ends up
// all one writer's, never a mix.
func TestAtomicOverlap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	const n = 1 << 16
	runRanks(t, 4, func(c *mpi.Comm) error {
		f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeCreate|mpiio.ModeRdwr, mpiio.Hints{"romio_ds_write": "disable"})
		if err != nil {
			return err
		}
		if err := f.SetAtomicity(true); err != nil {
			return err
		}
		// A strided view written through sieving, overlapping every rank's.
		ft, _ := mpi.Vector(n/64, 16, 32, mpi.Byte)
		if err := f.SetView(0, mpi.Byte, ft); err != nil {
			return err
		}
		buf := make([]byte, ft.Size())
		for i := range buf {
			buf[i] = byte(c.Rank() + 1)
		}
		for k := 0; k < 5; k++ {
			if _, err := f.WriteAt(buf, 0); err != nil {
				return err
			}
		}
		if err := f.Sync(); err != nil {
			return err
		}
		got := make([]byte, len(buf))
		if _, err := f.ReadAt(got, 0); err != nil {
			return err
		}
		for i := range got {
			if got[i] != got[0] {
				return fmt.Errorf("byte %d from writer %d, byte 0 from %d: not atomic", i, got[i], got[0])
			}
		}
		return f.Close()
	})
}

// A bad view on one rank fails SetView on every rank (collective error):
// that rank gets ErrView, the others ErrRemote naming it; the old views
// stay, and the next SetView works.
func TestSetViewError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	runRanks(t, 3, func(c *mpi.Comm) error {
		f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeCreate|mpiio.ModeRdwr, nil)
		if err != nil {
			return err
		}
		defer f.Close()
		disp := int64(0)
		if c.Rank() == 1 {
			disp = -5
		}
		err = f.SetView(disp, mpi.Byte, mpi.Byte)
		var me *mpiio.Error
		switch {
		case c.Rank() == 1 && !errors.Is(err, mpiio.ErrView):
			return fmt.Errorf("rank 1's bad view: %v, want ErrView", err)
		case c.Rank() != 1 && (!errors.Is(err, mpiio.ErrRemote) || !errors.As(err, &me) || me.Rank != 1 || !strings.Contains(err.Error(), "negative displacement")):
			return fmt.Errorf("rank %d: %v, want ErrRemote naming rank 1 and its cause", c.Rank(), err)
		}
		if err := f.SetView(int64(c.Rank()), mpi.Byte, mpi.Byte); err != nil {
			return err
		}
		_, err = f.WriteAtAll([]byte{byte('a' + c.Rank())}, 0)
		return err
	})
	if b, _ := os.ReadFile(path); string(b) != "abc" {
		t.Fatalf("file %q after the views, want abc", b)
	}
}

// TestPartialEtype: an access of a part of an etype is an error (ErrArg)
// on independent operations, and on every rank of a collective one; the
// file is not touched.
func TestPartialEtype(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	runRanks(t, 3, func(c *mpi.Comm) error {
		f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeCreate|mpiio.ModeRdwr, nil)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := f.SetView(0, mpi.TypeOf[float64](), mpi.TypeOf[float64]()); err != nil {
			return err
		}
		if _, err := f.WriteAt(make([]byte, 12), int64(c.Rank())); !errors.Is(err, mpi.ErrArg) {
			return fmt.Errorf("WriteAt of 12 bytes in 8-byte etypes: %v, want ErrArg", err)
		}
		if _, err := f.ReadAt(make([]byte, 4), 0); !errors.Is(err, mpi.ErrArg) {
			return fmt.Errorf("ReadAt of 4 bytes in 8-byte etypes: %v, want ErrArg", err)
		}
		n := 8
		if c.Rank() == 2 {
			n = 9
		}
		_, err = f.WriteAtAll(make([]byte, n), int64(c.Rank()))
		var me *mpiio.Error
		switch {
		case c.Rank() == 2 && !errors.Is(err, mpi.ErrArg):
			return fmt.Errorf("rank 2's 9-byte WriteAtAll: %v, want ErrArg", err)
		case c.Rank() != 2 && (!errors.Is(err, mpiio.ErrRemote) || !errors.As(err, &me) || me.Rank != 2):
			return fmt.Errorf("rank %d: %v, want ErrRemote naming rank 2", c.Rank(), err)
		}
		if sz, err := f.Size(); err != nil || sz != 0 {
			return fmt.Errorf("file size %d (%v) after refused writes, want 0", sz, err)
		}
		_, err = f.WriteAtAll(make([]byte, 8), int64(c.Rank()))
		return err
	})
}

// TestContextBoundsCollectives: Open's ctx bounds every collective of the
// file, not only two-phase's messages. One rank skips a collective (an
// erroneous program, or a rank stuck elsewhere) and cancels the context;
// the others must return an error wrapping context.Canceled instead of
// waiting in the call's agreement for ever (they did, whatever the ctx).
func TestContextBoundsCollectives(t *testing.T) {
	cases := []struct {
		name string
		call func(f *mpiio.File) error
	}{
		{"write all", func(f *mpiio.File) error { _, err := f.WriteAtAll(make([]byte, 100), 0); return err }},
		{"read all", func(f *mpiio.File) error { _, err := f.ReadAtAll(make([]byte, 100), 0); return err }},
		{"sync", func(f *mpiio.File) error { return f.Sync() }},
		{"set view", func(f *mpiio.File) error { return f.SetView(0, mpi.Byte, mpi.Byte) }},
		{"set size", func(f *mpiio.File) error { return f.SetSize(10) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "f")
			if err := os.WriteFile(path, make([]byte, 100), 0o644); err != nil {
				t.Fatal(err)
			}
			const n = 3
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			returned := make(chan error, n)
			runRanks(t, n, func(c *mpi.Comm) error {
				f, err := mpiio.Open(ctx, c, path, mpiio.ModeRdwr, mpiio.Hints{"romio_cb_write": "enable", "romio_cb_read": "enable"})
				if err != nil {
					return err
				}
				if err := c.Barrier(); err != nil { // every rank has opened
					return err
				}
				if c.Rank() == 1 {
					// Skip the call; end the others' wait, then let
					// them report (a guard, not a timing: they return
					// at once with the fix, never without).
					cancel()
					for i := 0; i < n-1; i++ {
						select {
						case err := <-returned:
							if !errors.Is(err, context.Canceled) {
								return fmt.Errorf("a rank returned %v, want an error wrapping context.Canceled", err)
							}
						case <-time.After(time.Minute):
							return fmt.Errorf("%s: the other ranks still wait a minute after the context was cancelled", tc.name)
						}
					}
					return c.Barrier()
				}
				returned <- tc.call(f)
				// Stay until rank 1 has seen every result: a rank that
				// finalized would be the others' error instead.
				return c.Barrier()
			})
		})
	}
}
