package mpi

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// cell is the value of grid point (i, j) of the rank owning global
// column block r: every point differs, so a misplaced one shows.
func cell(r, i, j int) float64 { return float64(r*1000000 + i*1000 + j) }

// halo runs one column halo exchange of a 2-D stencil on a periodic ring:
// each rank owns rows x cols points stored row-major with one halo column
// on each side (row width cols+2), sends its first and last interior
// columns with a Vector type, and checks that its halo columns now hold
// its neighbours' edge columns and nothing else changed.
func halo(c *Comm, rows, cols int, nonblocking bool) error {
	n, r := c.Size(), c.Rank()
	w := cols + 2
	g := make([]float64, rows*w)
	for i := 0; i < rows; i++ {
		for j := 1; j <= cols; j++ {
			g[i*w+j] = cell(r, i, j)
		}
	}
	col, err := Vector(rows, 1, w, Float64)
	if err != nil {
		return err
	}
	left, right := (r-1+n)%n, (r+1)%n
	if nonblocking {
		reqs := []*Request{
			IrecvType(c, g[cols+1:], 1, col, right, 1), // right halo <- right's first column
			IrecvType(c, g, 1, col, left, 2),           // left halo <- left's last column
			IsendType(c, g[1:], 1, col, left, 1),
			IsendType(c, g[cols:], 1, col, right, 2),
		}
		if _, err := WaitAll(context.Background(), reqs...); err != nil {
			return err
		}
	} else {
		st, err := SendrecvType(c, g[1:], 1, col, left, 1, g[cols+1:], 1, col, right, 1)
		if err != nil {
			return err
		}
		if st.Count != rows || st.Source != right {
			return fmt.Errorf("status %+v, want %d float64s from %d", st, rows, right)
		}
		if _, err := SendrecvType(c, g[cols:], 1, col, right, 2, g, 1, col, left, 2); err != nil {
			return err
		}
	}
	for i := 0; i < rows; i++ {
		for j := 0; j < w; j++ {
			want := cell(r, i, j)
			switch j {
			case 0:
				want = cell(left, i, cols)
			case cols + 1:
				want = cell(right, i, 1)
			}
			if g[i*w+j] != want {
				return fmt.Errorf("%dx%d: point (%d, %d) = %v, want %v", rows, cols, i, j, g[i*w+j], want)
			}
		}
	}
	return nil
}

// TestColumnHalo: column halos of a 2-D stencil over 1..8 ranks, shared
// memory and TCP, eager and rendezvous sizes, blocking and not.
func TestColumnHalo(t *testing.T) {
	forSizesTransports(t, func(t *testing.T, comms []*Comm) {
		each(t, comms, func(c *Comm) error {
			for _, sz := range [][2]int{{1, 1}, {5, 3}, {64, 7}, {20000, 4}} { // 20000 rows: 160 KB, rendezvous
				for _, nb := range []bool{false, true} {
					if err := halo(c, sz[0], sz[1], nb); err != nil {
						return fmt.Errorf("nonblocking %v: %w", nb, err)
					}
				}
			}
			return nil
		})
	})
}

// TestSubarrayHalo sends the interior block of one rank's padded 2-D array
// into the interior of another's with Subarray types of different shapes
// on each side (same data, different layout), and a packed struct.
func TestSubarrayHalo(t *testing.T) {
	comms, _ := world(t, 2, nil)
	each(t, comms, func(c *Comm) error {
		if c.Rank() == 0 {
			a := make([]int32, 6*7)
			for i := range a {
				a[i] = int32(i)
			}
			blk, err := Subarray([]int{6, 7}, []int{3, 4}, []int{1, 2}, OrderC, Int32)
			if err != nil {
				return err
			}
			return SendType(c, a, 1, blk, 1, 0)
		}
		b := make([]int32, 5*5)
		blk, err := Subarray([]int{5, 5}, []int{3, 4}, []int{2, 1}, OrderC, Int32)
		if err != nil {
			return err
		}
		st, err := RecvType(c, b, 1, blk, 0, 0)
		if err != nil || st.Count != 12 {
			return fmt.Errorf("RecvType: %+v %v", st, err)
		}
		for i := 0; i < 5; i++ {
			for j := 0; j < 5; j++ {
				want := int32(0)
				if i >= 2 && j >= 1 && j < 5 {
					want = int32((i-2+1)*7 + (j - 1 + 2))
				}
				if b[i*5+j] != want {
					return fmt.Errorf("b[%d][%d] = %d, want %d", i, j, b[i*5+j], want)
				}
			}
		}
		return nil
	})
}

// TestTypeArgErrors: types that reach outside the buffer, invalid types
// and short receive types are errors on the caller, never a panic, and a
// refused send leaves nothing behind for the receiver.
func TestTypeArgErrors(t *testing.T) {
	comms, _ := world(t, 2, nil)
	each(t, comms, func(c *Comm) error {
		col, _ := Vector(4, 1, 3, Float64) // spans 10 float64s
		buf := make([]float64, 9)
		if err := SendType(c, buf, 1, col, 1-c.Rank(), 0); !errors.Is(err, ErrArg) {
			return fmt.Errorf("SendType past the buffer: %v", err)
		}
		if _, err := RecvType(c, buf, 1, Datatype{}, 1-c.Rank(), 0); !errors.Is(err, ErrArg) {
			return fmt.Errorf("RecvType zero type: %v", err)
		}
		if _, err := IrecvType(c, buf, -1, Float64, 1-c.Rank(), 0).Wait(context.Background()); !errors.Is(err, ErrArg) {
			return fmt.Errorf("IrecvType count -1: %v", err)
		}
		// A message longer than the receive type: truncated, data kept.
		if c.Rank() == 0 {
			return Send(c, []float64{1, 2, 3, 4, 5}, 1, 3)
		}
		got := make([]float64, 9)
		st, err := RecvType(c, got, 2, Float64, 0, 3)
		if !errors.Is(err, ErrTruncate) || got[0] != 1 || got[1] != 2 || got[2] != 0 {
			return fmt.Errorf("truncated RecvType: %v %+v %v", got, st, err)
		}
		return nil
	})
}

// TestPackUnpack round-trips Indexed and Resized types.
func TestPackUnpack(t *testing.T) {
	ix, err := Indexed([]int{2, 1, 3}, []int{5, 0, 9}, Int16)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := Resized(ix, 0, 14*2)
	if err != nil {
		t.Fatal(err)
	}
	src := make([]int16, 3*14)
	for i := range src {
		src[i] = int16(i + 1)
	}
	p, err := Pack(src, 3, rs)
	if err != nil {
		t.Fatal(err)
	}
	want := []int16{6, 7, 1, 10, 11, 12}
	for k := 0; k < 3; k++ {
		for i, v := range want {
			if got := int16(p[2*(6*k+i)]) | int16(p[2*(6*k+i)+1])<<8; got != v+int16(14*k) {
				t.Fatalf("packed copy %d item %d = %d, want %d", k, i, got, v+int16(14*k))
			}
		}
	}
	dst := make([]int16, 3*14)
	if n, err := Unpack(p, dst, 3, rs); err != nil || n != len(p) {
		t.Fatal(n, err)
	}
	for i := range dst {
		inType := map[int]bool{0: true, 5: true, 6: true, 9: true, 10: true, 11: true}[i%14]
		if (dst[i] == src[i]) != inType || !inType && dst[i] != 0 {
			t.Fatalf("dst[%d] = %d (src %d)", i, dst[i], src[i])
		}
	}
}
