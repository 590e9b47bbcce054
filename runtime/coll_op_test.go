package mpi

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

// Reduction operations: units (items of several elements), complex types,
// logical and bitwise ops, MaxLoc/MinLoc.

// rotOp multiplies 2x2 matrices of the commuting form [[a, -b], [b, a]]
// (4 elements each): a commutative op whose items must never be split.
func rotOp(in, inout []int64) {
	if len(inout)%4 != 0 {
		panic(fmt.Sprintf("rotOp: %d elements: a matrix was split", len(inout)))
	}
	matOp(in, inout)
}

// cmulOp multiplies complex numbers stored as [re, im] float64 pairs.
func cmulOp(in, inout []float64) {
	for k := 0; k+1 < len(inout); k += 2 {
		a, b := complex(in[k], in[k+1]), complex(inout[k], inout[k+1])
		p := a * b
		inout[k], inout[k+1] = real(p), imag(p)
	}
}

func rot(r, i int) [4]int64 {
	a, b := int64((r+i)%3), int64((r*5+i)%3-1)
	return [4]int64{a, -b, b, a}
}

func gauss(r, i int) complex128 { return complex(float64((r+i)%3), float64((r*3+i)%3-1)) }

// units runs large and small reductions with multi-element items (matrices
// with unit 4, complex pairs with unit 2) and with complex128 itself.
func units(c *Comm, items []int) error {
	n, r := c.Size(), c.Rank()
	mat := NewOp("rot", rotOp, true).WithUnit(4)
	cpair := NewOp("cmul", cmulOp, true).WithUnit(2)
	for _, k := range items {
		tc := fmt.Sprintf("%d items", k)
		// 2x2 matrices.
		send, want := make([]int64, 4*k), make([]int64, 4*k)
		for i := 0; i < k; i++ {
			m := rot(r, i)
			copy(send[4*i:], m[:])
			w := rot(0, i)
			copy(want[4*i:], w[:])
			for q := 1; q < n; q++ {
				x := rot(q, i)
				matOp(want[4*i:4*i+4], x[:])
				copy(want[4*i:], x[:])
			}
		}
		got := make([]int64, 4*k)
		if err := Allreduce(c, send, got, mat); err != nil {
			return fmt.Errorf("%s: matrix allreduce: %w", tc, err)
		}
		if err := diff(tc+" matrix allreduce", got, want); err != nil {
			return err
		}
		clear(got)
		if err := Reduce(c, send, got, mat, n-1); err != nil {
			return fmt.Errorf("%s: matrix reduce: %w", tc, err)
		}
		if r == n-1 {
			if err := diff(tc+" matrix reduce", got, want); err != nil {
				return err
			}
		}
		if kb := k / n; kb > 0 {
			blk := make([]int64, 4*kb)
			if err := ReduceScatterBlock(c, send[:4*kb*n], blk, mat); err != nil {
				return fmt.Errorf("%s: matrix reduce-scatter: %w", tc, err)
			}
			if err := diff(tc+" matrix reduce-scatter", blk, want[4*kb*r:4*kb*(r+1)]); err != nil {
				return err
			}
		}
		// Complex numbers: as [re, im] pairs with a user op, and as
		// complex128 with Prod and Sum.
		cs, cw, sw := make([]complex128, k), make([]complex128, k), make([]complex128, k)
		for i := range cs {
			cs[i] = gauss(r, i)
			cw[i], sw[i] = 1, 0
			for q := 0; q < n; q++ {
				cw[i] *= gauss(q, i)
				sw[i] += gauss(q, i)
			}
		}
		pairs := make([]float64, 2*k)
		for i, v := range cs {
			pairs[2*i], pairs[2*i+1] = real(v), imag(v)
		}
		if err := Allreduce(c, pairs, pairs, cpair); err != nil {
			return fmt.Errorf("%s: complex pair allreduce: %w", tc, err)
		}
		for i, v := range cw {
			if complex(pairs[2*i], pairs[2*i+1]) != v {
				return fmt.Errorf("%s: complex pair allreduce: [%d] = %v, want %v", tc, i, complex(pairs[2*i], pairs[2*i+1]), v)
			}
		}
		cg := make([]complex128, k)
		if err := Allreduce(c, cs, cg, Prod); err != nil {
			return fmt.Errorf("%s: complex128 prod: %w", tc, err)
		}
		if err := diff(tc+" complex128 prod", cg, cw); err != nil {
			return err
		}
		c64 := make([]complex64, k)
		for i, v := range cs {
			c64[i] = complex64(v)
		}
		if err := Allreduce(c, c64, c64, Sum); err != nil {
			return fmt.Errorf("%s: complex64 sum: %w", tc, err)
		}
		for i, v := range sw {
			if c64[i] != complex64(v) {
				return fmt.Errorf("%s: complex64 sum: [%d] = %v, want %v", tc, i, c64[i], v)
			}
		}
	}
	return nil
}

// TestCollOpUnits: large commutative reductions of 2x2 matrices and complex
// pairs were cut at element boundaries by the ring algorithms (blocks of
// ceil(count/n) elements, 4 MiB segments), so the op saw half items.
func TestCollOpUnits(t *testing.T) {
	forSizes(t, func(t *testing.T, comms []*Comm) {
		each(t, comms, func(c *Comm) error {
			// 20011 matrices: 640 KB, ring algorithms, blocks not whole.
			return units(c, []int{0, 1, 3, 20011})
		})
	})
}

func TestCollOpUnitsLowered(t *testing.T) {
	lowered(t)
	forSizes(t, func(t *testing.T, comms []*Comm) {
		each(t, comms, func(c *Comm) error { return units(c, []int{1, 5, 13, 37}) })
	})
}

// foldInt folds the ranks' buffers like the named logical/bitwise op.
func foldInt[T integer](name string, bufs [][]T) []T {
	acc := slices.Clone(bufs[0])
	b := func(x T) bool { return x != 0 }
	for _, x := range bufs[1:] {
		for i := range acc {
			switch name {
			case "Land":
				acc[i] = boolTo[T](b(acc[i]) && b(x[i]))
			case "Lor":
				acc[i] = boolTo[T](b(acc[i]) || b(x[i]))
			case "Lxor":
				acc[i] = boolTo[T](b(acc[i]) != b(x[i]))
			case "Band":
				acc[i] &= x[i]
			case "Bor":
				acc[i] |= x[i]
			case "Bxor":
				acc[i] ^= x[i]
			}
		}
	}
	return acc
}

func boolTo[T integer](v bool) T {
	if v {
		return 1
	}
	return 0
}

func logical[T integer](c *Comm, counts []int) error {
	n, r := c.Size(), c.Rank()
	val := func(q, i int) T { return T((q*37 + i*11) % 7 * (q + 1) % 5) } // zeros included
	for _, op := range []Op{Land, Lor, Lxor, Band, Bor, Bxor} {
		for _, cnt := range counts {
			bufs := make([][]T, n)
			for q := range bufs {
				bufs[q] = make([]T, cnt)
				for i := range bufs[q] {
					bufs[q][i] = val(q, i)
				}
			}
			var z T
			tc := fmt.Sprintf("%T %v count %d", z, op, cnt)
			got := make([]T, cnt)
			if err := Allreduce(c, bufs[r], got, op); err != nil {
				return fmt.Errorf("%s: %w", tc, err)
			}
			if err := diff(tc, got, foldInt(op.String(), bufs)); err != nil {
				return err
			}
			if err := Scan(c, bufs[r], got, op); err != nil {
				return fmt.Errorf("%s: scan: %w", tc, err)
			}
			if err := diff(tc+" scan", got, foldInt(op.String(), bufs[:r+1])); err != nil {
				return err
			}
		}
	}
	return nil
}

func TestCollLogicalBitwise(t *testing.T) {
	forSizes(t, func(t *testing.T, comms []*Comm) {
		each(t, comms, func(c *Comm) error {
			if err := logical[int32](c, []int{1, 7, 20000}); err != nil {
				return err
			}
			if err := logical[uint8](c, []int{3, 70000}); err != nil {
				return err
			}
			return logical[int](c, []int{5})
		})
	})
}

func locs[T Real](c *Comm, counts []int) error {
	n, r := c.Size(), c.Rank()
	val := func(q, i int) T { return T((q*3 + i*7) % 5) } // ties among ranks
	for _, op := range []Op{MaxLoc, MinLoc} {
		for _, cnt := range counts {
			var z T
			tc := fmt.Sprintf("%T %v count %d", z, op, cnt)
			send := make([]ValIndex[T], cnt)
			want := make([]ValIndex[T], cnt)
			for i := range send {
				send[i] = ValIndex[T]{val(r, i), r}
				want[i] = ValIndex[T]{val(0, i), 0}
				for q := 1; q < n; q++ {
					v := val(q, i)
					if (op == MaxLoc && v > want[i].Val) || (op == MinLoc && v < want[i].Val) {
						want[i] = ValIndex[T]{v, q}
					}
				}
			}
			got := make([]ValIndex[T], cnt)
			if err := AllreduceLoc(c, send, got, op); err != nil {
				return fmt.Errorf("%s: %w", tc, err)
			}
			if !slices.Equal(got, want) {
				return fmt.Errorf("%s: allreduce: got %v, want %v", tc, got[:min(cnt, 4)], want[:min(cnt, 4)])
			}
			clear(got)
			if err := ReduceLoc(c, send, got, op, n/2); err != nil {
				return fmt.Errorf("%s: reduce: %w", tc, err)
			}
			if r == n/2 && !slices.Equal(got, want) {
				return fmt.Errorf("%s: reduce: got %v, want %v", tc, got[:min(cnt, 4)], want[:min(cnt, 4)])
			}
		}
	}
	return nil
}

func TestCollMaxLocMinLoc(t *testing.T) {
	forSizes(t, func(t *testing.T, comms []*Comm) {
		each(t, comms, func(c *Comm) error {
			if err := locs[float64](c, []int{1, 9, 10000}); err != nil {
				return err
			}
			return locs[int32](c, []int{2, 5000})
		})
	})
}

func TestCollOpErrors(t *testing.T) {
	comms, _ := world(t, 2, nil)
	each(t, comms, func(c *Comm) error {
		mat := NewOp("rot", rotOp, true).WithUnit(4)
		for _, tc := range []struct {
			name string
			err  error
		}{
			{"partial unit", Allreduce(c, make([]int64, 6), make([]int64, 6), mat)},
			{"partial unit scan", Scan(c, make([]int64, 5), make([]int64, 5), mat)},
			{"partial unit reduce-scatter", ReduceScatterBlock(c, make([]int64, 4), make([]int64, 2), mat)},
			{"max complex", Allreduce(c, make([]complex128, 2), make([]complex128, 2), Max)},
			{"min complex", Reduce(c, make([]complex64, 2), make([]complex64, 2), Min, 0)},
			{"band float", Allreduce(c, make([]float64, 2), make([]float64, 2), Band)},
			{"lor complex", Allreduce(c, make([]complex64, 2), make([]complex64, 2), Lor)},
			{"maxloc plain", Allreduce(c, make([]int32, 2), make([]int32, 2), MaxLoc)},
			{"loc with sum", AllreduceLoc(c, make([]ValIndex[int32], 2), make([]ValIndex[int32], 2), Sum)},
			{"negative unit", Allreduce(c, make([]int64, 4), make([]int64, 4), mat.WithUnit(-1))},
		} {
			if !errors.Is(tc.err, ErrArg) {
				return fmt.Errorf("%s: %v, want ErrArg", tc.name, tc.err)
			}
		}
		return nil
	})
}
