package mpiio_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	mpi "github.com/gompi/gompi/runtime"
	"github.com/gompi/gompi/runtime/mpiio"
)

// ptrView is a view for the pointer tests, with its own model of where
// stream byte i lands in the file (from the filetype's Blocks, not the
// package's mapping).
type ptrView struct {
	name  string
	etype mpi.Datatype
	make  func(r, p int) (disp int64, ft mpi.Datatype, err error)
}

var ptrViews = []ptrView{
	{"bytes", mpi.Byte, func(r, p int) (int64, mpi.Datatype, error) {
		// Each rank its own 4096-byte region.
		t, err := mpi.Contiguous(1, mpi.Byte)
		return int64(r) * 4096, t, err
	}},
	{"int32-contiguous", mpi.Int32, func(r, p int) (int64, mpi.Datatype, error) {
		t, err := mpi.Contiguous(3, mpi.Int32)
		return 12 + int64(r)*4096, t, err
	}},
	{"int16-strided-holes", mpi.Int16, func(r, p int) (int64, mpi.Datatype, error) {
		// Per tile of 8p bytes: 2 etypes at 6r (then a 2-byte hole),
		// 1 etype at 6p+2r; the ranks' pieces interleave.
		t, err := mpi.Hindexed([]int{2, 1}, []int64{int64(6 * r), int64(6*p + 2*r)}, mpi.Int16)
		if err != nil {
			return 0, t, err
		}
		t, err = mpi.Resized(t, 0, int64(8*p))
		return 16, t, err
	}},
	{"int64-vector", mpi.Int64, func(r, p int) (int64, mpi.Datatype, error) {
		t, err := mpi.Vector(2, 1, p, mpi.Int64)
		if err != nil {
			return 0, t, err
		}
		t, err = mpi.Resized(t, 0, int64(16*p))
		return int64(8*r) + 3, t, err
	}},
}

// model maps stream bytes to file offsets for (disp, ft).
type model struct {
	disp, extent, size int64
	blocks             []mpi.Block
}

func newModel(disp int64, ft mpi.Datatype) model {
	return model{disp: disp, extent: ft.Extent(), size: ft.Size(), blocks: ft.Blocks()}
}

func (m model) off(i int64) int64 {
	t, q := i/m.size, i%m.size
	for _, b := range m.blocks {
		if q < b.Len {
			return m.disp + t*m.extent + b.Off + q
		}
		q -= b.Len
	}
	panic("unreachable")
}

// below counts stream bytes at file offsets below size (brute force).
func (m model) below(size int64) int64 {
	n := int64(0)
	for i := int64(0); ; i++ {
		o := m.off(i)
		if o >= size {
			// Later stream bytes may still lie below size only if the
			// mapping were not increasing; views are.
			return n
		}
		n++
	}
}

func ptrPattern(rank, n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rank*37) + seed + byte(i*7)
	}
	return b
}

// TestIndividualPointer: Write, Read, Seek, Position and ByteOffset through
// views with multi-byte etypes and strided filetypes, short reads at end of
// file, SetView's reset and explicit-offset calls that leave the pointer
// alone; the file's bytes are checked against an independent model.
func TestIndividualPointer(t *testing.T) {
	for _, pv := range ptrViews {
		for _, p := range []int{1, 2, 3, 4, 8} {
			t.Run(fmt.Sprintf("%s/np=%d", pv.name, p), func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "f")
				es := int(pv.etype.Size())
				runRanks(t, p, func(c *mpi.Comm) error {
					return pointerRank(c, path, pv, es)
				})
				// Every rank's stream: 8 etypes of pattern a, 5 of b at 8
				// (a's first 3 kept), c at 20 by WriteAt, d by WriteAll at 25.
				file, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				for r := 0; r < p; r++ {
					disp, ft, _ := pv.make(r, p)
					m := newModel(disp, ft)
					want := append(ptrPattern(r, 3*es, 'a'), ptrPattern(r, 5*es, 'b')...)
					for i, x := range want {
						if o := m.off(int64(i)); file[o] != x {
							t.Fatalf("rank %d stream byte %d (file %d) = %d, want %d", r, i, o, file[o], x)
						}
					}
					for i, x := range ptrPattern(r, 2*es, 'c') {
						if o := m.off(int64(20*es + i)); file[o] != x {
							t.Fatalf("rank %d WriteAt byte %d (file %d) = %d, want %d", r, i, o, file[o], x)
						}
					}
					for i, x := range ptrPattern(r, 3*es, 'd') {
						if o := m.off(int64(25*es + i)); file[o] != x {
							t.Fatalf("rank %d WriteAll byte %d (file %d) = %d, want %d", r, i, o, file[o], x)
						}
					}
				}
			})
		}
	}
}

func pointerRank(c *mpi.Comm, path string, pv ptrView, es int) error {
	r, p := c.Rank(), c.Size()
	f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeCreate|mpiio.ModeRdwr, mpiio.Hints{"cb_buffer_size": "4096", "striping_unit": "4096"})
	if err != nil {
		return err
	}
	defer f.Close()
	disp, ft, err := pv.make(r, p)
	if err != nil {
		return err
	}
	if err := f.SetView(disp, pv.etype, ft); err != nil {
		return err
	}
	m := newModel(disp, ft)
	pos := func(want int64) error {
		got, err := f.Position()
		if err != nil || got != want {
			return fmt.Errorf("position %d, %v; want %d", got, err, want)
		}
		return nil
	}
	if _, err := f.Write(ptrPattern(r, 8*es, 'a')); err != nil {
		return err
	}
	if err := pos(8); err != nil {
		return err
	}
	if got, err := f.Seek(3, mpiio.SeekSet); err != nil || got != 3 {
		return fmt.Errorf("seek set: %d, %v", got, err)
	}
	if n, err := f.Write(ptrPattern(r, 5*es, 'b')); err != nil || n != 5*es {
		return fmt.Errorf("write: %d, %v", n, err)
	}
	if err := pos(8); err != nil {
		return err
	}
	// An explicit-offset write leaves the pointer alone.
	if _, err := f.WriteAt(ptrPattern(r, 2*es, 'c'), 20); err != nil {
		return err
	}
	if err := pos(8); err != nil {
		return err
	}
	if got, err := f.Seek(-6, mpiio.SeekCur); err != nil || got != 2 {
		return fmt.Errorf("seek cur: %d, %v", got, err)
	}
	got := make([]byte, 4*es)
	if n, err := f.Read(got); err != nil || n != 4*es {
		return fmt.Errorf("read: %d, %v", n, err)
	}
	want := append(ptrPattern(r, 3*es, 'a'), ptrPattern(r, 5*es, 'b')...)[2*es : 6*es]
	if !bytes.Equal(got, want) {
		return fmt.Errorf("read at 2: %v, want %v", got, want)
	}
	if err := pos(6); err != nil {
		return err
	}
	// A negative result is an error and leaves the pointer.
	if _, err := f.Seek(-7, mpiio.SeekCur); !errors.Is(err, mpi.ErrArg) {
		return fmt.Errorf("seek to -1: %v, want ErrArg", err)
	}
	var e *mpiio.Error
	if _, err := f.Seek(-1, mpiio.SeekSet); !errors.As(err, &e) || e.Path != path || e.Op != "seek" {
		return fmt.Errorf("seek to -1: %v, want an *Error naming the file", err)
	}
	if err := pos(6); err != nil {
		return err
	}
	for _, k := range []int64{0, 1, 2, 5, 7, 33} {
		bo, err := f.ByteOffset(k)
		if err != nil || bo != m.off(k*int64(es)) {
			return fmt.Errorf("ByteOffset(%d) = %d, %v; want %d", k, bo, err, m.off(k*int64(es)))
		}
	}
	// Collective at the pointer: every rank at 25.
	if _, err := f.Seek(25, mpiio.SeekSet); err != nil {
		return err
	}
	if _, err := f.WriteAll(ptrPattern(r, 3*es, 'd')); err != nil {
		return err
	}
	if err := pos(28); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	// The end of file through the view, from the model.
	size, err := f.Size()
	if err != nil {
		return err
	}
	below := m.below(size)
	end := (below + int64(es) - 1) / int64(es)
	if got, err := f.Seek(0, mpiio.SeekEnd); err != nil || got != end {
		return fmt.Errorf("seek end (size %d): %d, %v; want %d", size, got, err, end)
	}
	// A short read at end of file: from 2 etypes before the end, ask 5.
	start := end - 2
	if _, err := f.Seek(-2, mpiio.SeekEnd); err != nil {
		return err
	}
	buf := make([]byte, 5*es)
	n, err := f.Read(buf)
	wantN := int(below - start*int64(es))
	if n != wantN || !errors.Is(err, io.EOF) {
		return fmt.Errorf("short read at %d: %d, %v; want %d and EOF", start, n, err, wantN)
	}
	if err := pos(start + int64(wantN/es)); err != nil {
		return fmt.Errorf("after the short read: %w", err)
	}
	// A read at the end reads nothing and stays.
	if _, err := f.Seek(0, mpiio.SeekEnd); err != nil {
		return err
	}
	if n, err := f.Read(buf); n != 0 || !errors.Is(err, io.EOF) {
		return fmt.Errorf("read at end: %d, %v", n, err)
	}
	if err := pos(end); err != nil {
		return err
	}
	// ReadAll at the pointer reads what Write wrote.
	if _, err := f.Seek(0, mpiio.SeekSet); err != nil {
		return err
	}
	all := make([]byte, 8*es)
	if _, err := f.ReadAll(all); err != nil {
		return err
	}
	if w := append(ptrPattern(r, 3*es, 'a'), ptrPattern(r, 5*es, 'b')...); !bytes.Equal(all, w) {
		return fmt.Errorf("ReadAll: %v, want %v", all, w)
	}
	// Nonblocking: the pointer moves at the call.
	req := f.Iread(make([]byte, 2*es))
	if err := pos(10); err != nil {
		return err
	}
	if st, err := req.Wait(context.Background()); err != nil || st.Bytes != 2*es {
		return fmt.Errorf("iread: %+v, %v", st, err)
	}
	// SetView resets the pointer (and the shared one).
	if _, err := f.Seek(4, mpiio.SeekCur); err != nil {
		return err
	}
	if err := f.SetView(disp, pv.etype, ft); err != nil {
		return err
	}
	if err := pos(0); err != nil {
		return fmt.Errorf("after SetView: %w", err)
	}
	return f.Close()
}

// TestPointerErrors: bad whence, partial etypes, a closed file.
func TestPointerErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	runRanks(t, 2, func(c *mpi.Comm) error {
		f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeCreate|mpiio.ModeRdwr, nil)
		if err != nil {
			return err
		}
		if _, err := f.WriteAt([]byte("0123456789"), 0); err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
		if err := f.SetView(0, mpi.Int32, mpi.Int32); err != nil {
			return err
		}
		// 10 bytes are 2.5 int32s: the end counts the partial one, so a
		// write at SeekEnd keeps it; a read of it gets 2 bytes and EOF,
		// and the pointer stays before it.
		if end, err := f.Seek(0, mpiio.SeekEnd); err != nil || end != 3 {
			return fmt.Errorf("seek end of 10 bytes: %d, %v; want 3", end, err)
		}
		if _, err := f.Seek(2, mpiio.SeekSet); err != nil {
			return err
		}
		if n, err := f.Read(make([]byte, 8)); n != 2 || !errors.Is(err, io.EOF) {
			return fmt.Errorf("read of the partial etype: %d, %v", n, err)
		}
		if p, _ := f.Position(); p != 2 {
			return fmt.Errorf("after a partial etype: position %d, want 2", p)
		}
		if _, err := f.Seek(0, mpiio.SeekSet); err != nil {
			return err
		}
		if _, err := f.Seek(0, 7); !errors.Is(err, mpi.ErrArg) {
			return fmt.Errorf("whence 7: %v", err)
		}
		if _, err := f.Write(make([]byte, 6)); !errors.Is(err, mpi.ErrArg) {
			return fmt.Errorf("partial etype: %v", err)
		}
		if p, _ := f.Position(); p != 0 {
			return fmt.Errorf("failed write moved the pointer to %d", p)
		}
		if _, err := f.ByteOffset(-1); !errors.Is(err, mpi.ErrArg) {
			return fmt.Errorf("ByteOffset(-1): %v", err)
		}
		if err := f.Close(); err != nil {
			return err
		}
		if _, err := f.Read(make([]byte, 4)); !errors.Is(err, mpiio.ErrClosed) {
			return fmt.Errorf("read after close: %v", err)
		}
		if _, err := f.Seek(0, mpiio.SeekSet); !errors.Is(err, mpiio.ErrClosed) {
			return fmt.Errorf("seek after close: %v", err)
		}
		return nil
	})
}
