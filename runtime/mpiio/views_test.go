package mpiio_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	mpi "github.com/gompi/gompi/runtime"
	"github.com/gompi/gompi/runtime/mpiio"
)

// A layout gives rank r of p a view of one shared array of int32 (rows
// 40, columns 6p) such that the ranks' views partition the file. Each
// filetype covers the whole file in one tile.
type layout struct {
	name string
	make func(r, p int) (disp int64, ft mpi.Datatype, err error)
}

const rows = 40

func elems(p int) int { return rows * 6 * p }

func segments(p int, shift int) (lens [][]int, displs [][]int) {
	lens, displs = make([][]int, p), make([][]int, p)
	n := elems(p)
	for i, at := 0, 0; at < n; i++ {
		l := min(1+i%4, n-at)
		r := (i + shift) % p
		lens[r] = append(lens[r], l)
		displs[r] = append(displs[r], at)
		at += l
	}
	return
}

var layouts = []layout{
	{"contiguous", func(r, p int) (int64, mpi.Datatype, error) {
		t, err := mpi.Contiguous(elems(p)/p, mpi.Int32)
		return int64(r * elems(p) / p * 4), t, err
	}},
	{"vector", func(r, p int) (int64, mpi.Datatype, error) {
		t, err := mpi.Vector(elems(p)/(3*p), 3, 3*p, mpi.Int32)
		return int64(r * 12), t, err
	}},
	{"hvector", func(r, p int) (int64, mpi.Datatype, error) {
		t, err := mpi.Hvector(elems(p)/(2*p), 2, int64(2*p*4), mpi.Int32)
		return int64(r * 8), t, err
	}},
	{"indexed", func(r, p int) (int64, mpi.Datatype, error) {
		l, d := segments(p, 0)
		t, err := mpi.Indexed(l[r], d[r], mpi.Int32)
		return 0, t, err
	}},
	{"hindexed", func(r, p int) (int64, mpi.Datatype, error) {
		l, d := segments(p, 1)
		bd := make([]int64, len(d[r]))
		for i, x := range d[r] {
			bd[i] = int64(x * 4)
		}
		t, err := mpi.Hindexed(l[r], bd, mpi.Int32)
		return 0, t, err
	}},
	{"subarray-c", func(r, p int) (int64, mpi.Datatype, error) {
		t, err := mpi.Subarray([]int{rows, 6 * p}, []int{rows, 6}, []int{0, 6 * r}, mpi.OrderC, mpi.Int32)
		return 0, t, err
	}},
	{"subarray-fortran", func(r, p int) (int64, mpi.Datatype, error) {
		t, err := mpi.Subarray([]int{6 * p, rows}, []int{6, rows}, []int{6 * r, 0}, mpi.OrderFortran, mpi.Int32)
		return 0, t, err
	}},
	{"struct-resized", func(r, p int) (int64, mpi.Datatype, error) {
		s, err := mpi.Struct([]int{2, 1}, []int64{0, 4}, []mpi.Datatype{mpi.Int16, mpi.Int32})
		if err != nil {
			return 0, s, err
		}
		s, err = mpi.Resized(s, 0, int64(8*p))
		if err != nil {
			return 0, s, err
		}
		t, err := mpi.Contiguous(elems(p)/(2*p), s)
		return int64(8 * r), t, err
	}},
}

func pattern(off int64) byte { return byte(off*131 + off>>8*7 + 1) }

// owned returns the file offsets of a view's stream, in stream order.
func owned(disp int64, ft mpi.Datatype) []int64 {
	var out []int64
	for _, b := range ft.Blocks() {
		for i := int64(0); i < b.Len; i++ {
			out = append(out, disp+b.Off+i)
		}
	}
	return out
}

type ioMode struct {
	name        string
	write, read func(f *mpiio.File, buf []byte, off int64) (int, error)
}

func async(op func(*mpiio.File, []byte, int64) *mpi.Request) func(*mpiio.File, []byte, int64) (int, error) {
	return func(f *mpiio.File, buf []byte, off int64) (int, error) {
		st, err := op(f, buf, off).Wait(context.Background())
		return st.Bytes, err
	}
}

var modes = []ioMode{
	{"collective", (*mpiio.File).WriteAtAll, (*mpiio.File).ReadAtAll},
	{"independent", (*mpiio.File).WriteAt, (*mpiio.File).ReadAt},
	{"async", async((*mpiio.File).IwriteAt), async((*mpiio.File).IreadAt)},
}

// Every view kind, collective, independent and asynchronous, over 1..8
// ranks: written with one layout in two calls (testing stream offsets),
// checked byte by byte in the file, read back with the next layout.
func TestViews(t *testing.T) {
	sizes := []int{1, 2, 3, 4, 5, 6, 7, 8}
	if testing.Short() {
		sizes = []int{1, 2, 3, 8}
	}
	dir := t.TempDir()
	for _, p := range sizes {
		t.Run(strconv.Itoa(p), func(t *testing.T) {
			runRanks(t, p, func(c *mpi.Comm) error {
				r := c.Rank()
				hints := mpiio.Hints{"cb_nodes": strconv.Itoa(1 + p/3), "cb_buffer_size": "4096", "striping_unit": "512"}
				for li, lw := range layouts {
					lr := layouts[(li+3)%len(layouts)]
					for _, m := range modes {
						name := fmt.Sprintf("%s-%s-%s", lw.name, lr.name, m.name)
						path := filepath.Join(dir, fmt.Sprintf("p%d-%s", p, name))
						fail := func(err error) error { return fmt.Errorf("%s: %w", name, err) }
						f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeCreate|mpiio.ModeRdwr, hints)
						if err != nil {
							return fail(err)
						}
						disp, ft, err := lw.make(r, p)
						if err != nil {
							return fail(err)
						}
						if err := f.SetView(disp, mpi.Int32, ft); err != nil {
							return fail(err)
						}
						offs := owned(disp, ft)
						data := make([]byte, len(offs))
						for i, o := range offs {
							data[i] = pattern(o)
						}
						half := len(data) / 8 * 4 // in whole int32s
						if _, err := m.write(f, data[:half], 0); err != nil {
							return fail(err)
						}
						if _, err := m.write(f, data[half:], int64(half/4)); err != nil {
							return fail(err)
						}
						if err := f.Sync(); err != nil {
							return fail(err)
						}
						if r == 0 {
							b, err := os.ReadFile(path)
							if err != nil {
								return fail(err)
							}
							if len(b) != elems(p)*4 {
								return fail(fmt.Errorf("file has %d bytes, want %d", len(b), elems(p)*4))
							}
							for i, x := range b {
								if x != pattern(int64(i)) {
									return fail(fmt.Errorf("file byte %d = %d, want %d", i, x, pattern(int64(i))))
								}
							}
						}
						disp, ft, err = lr.make((r+1)%p, p) // another layout, another rank's part
						if err != nil {
							return fail(err)
						}
						if err := f.SetView(disp, mpi.Int32, ft); err != nil {
							return fail(err)
						}
						offs = owned(disp, ft)
						got := make([]byte, len(offs))
						if n, err := m.read(f, got, 0); err != nil || n != len(got) {
							return fail(fmt.Errorf("read %d of %d bytes: %v", n, len(got), err))
						}
						for i, o := range offs {
							if got[i] != pattern(o) {
								return fail(fmt.Errorf("read byte %d (file offset %d) = %d, want %d", i, o, got[i], pattern(o)))
							}
						}
						if err := f.Close(); err != nil {
							return fail(err)
						}
					}
				}
				return nil
			})
		})
	}
}

// TestEmptyView: a rank whose part of a decomposition is empty (2 rows on
// 3 ranks: rank 2's subarray has 0 rows) sets a filetype of size 0, as
// ROMIO and PnetCDF allow, and joins the collectives with an empty
// buffer. SetView used to refuse it ("must hold data"), so the whole job
// could not write. A non-empty buffer on such a view is an ErrView.
func TestEmptyView(t *testing.T) {
	const nrows, cols, n = 2, 7, 3
	for _, cb := range []string{"enable", "disable", "automatic"} {
		t.Run(cb, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "f")
			runRanks(t, n, func(c *mpi.Comm) error {
				r := c.Rank()
				lo, hi := r*nrows/n, (r+1)*nrows/n
				ft, err := mpi.Subarray([]int{nrows, cols}, []int{hi - lo, cols}, []int{lo, 0}, mpi.OrderC, mpi.Int32)
				if err != nil {
					return err
				}
				f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeCreate|mpiio.ModeRdwr,
					mpiio.Hints{"romio_cb_write": cb, "romio_cb_read": cb})
				if err != nil {
					return err
				}
				if err := f.SetView(0, mpi.Int32, ft); err != nil {
					return err
				}
				mine := make([]int32, (hi-lo)*cols)
				for i := range mine {
					mine[i] = int32(lo*cols + i + 1)
				}
				if _, err := mpiio.WriteAtAll(f, mine, 0); err != nil {
					return err
				}
				got := make([]int32, len(mine))
				if _, err := mpiio.ReadAtAll(f, got, 0); err != nil {
					return err
				}
				if fmt.Sprint(got) != fmt.Sprint(mine) {
					return fmt.Errorf("read back %v, wrote %v", got, mine)
				}
				if hi == lo {
					if _, err := f.WriteAt([]byte{1, 2, 3, 4}, 0); !errors.Is(err, mpiio.ErrView) {
						return fmt.Errorf("4 bytes to an empty view: %v, want ErrView", err)
					}
				}
				return f.Close()
			})
			b, err := os.ReadFile(path)
			if err != nil || len(b) != nrows*cols*4 {
				t.Fatalf("file: %d bytes, %v; want %d", len(b), err, nrows*cols*4)
			}
			for i := 0; i < nrows*cols; i++ {
				if v := int32(binary.LittleEndian.Uint32(b[4*i:])); v != int32(i+1) {
					t.Fatalf("element %d = %d, want %d", i, v, i+1)
				}
			}
		})
	}
}
