package mpi

import (
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
)

// Collective tests: every rank runs every case in turn and checks its
// result against values computed independently (plain loops in rank
// order), at 1..8 ranks, with buffers on both sides of every algorithm
// switch; the "lowered" variants shrink the switch points so that the
// large-message algorithms also run on tiny and odd-sized buffers.

var collSizes = []int{1, 2, 3, 4, 5, 6, 7, 8}

// rv is rank r's element i: small positive integers, so sums and products
// of up to 8 ranks are exact in every tested type.
func rv(r, i int) int { return (r*7+i*3)%5 + 1 }

func fillv[T Real](r, cnt int) []T {
	b := make([]T, cnt)
	for i := range b {
		b[i] = T(rv(r, i))
	}
	return b
}

// matOp multiplies 2x2 matrices packed 4 elements each: inout = in x inout.
// Associative, not commutative.
func matOp[T Number](in, inout []T) {
	for k := 0; k+3 < len(inout); k += 4 {
		a, b := in[k:k+4], inout[k:k+4]
		b[0], b[1], b[2], b[3] = a[0]*b[0]+a[1]*b[2], a[0]*b[1]+a[1]*b[3], a[2]*b[0]+a[3]*b[2], a[2]*b[1]+a[3]*b[3]
	}
}

// xorOp is a commutative user op.
func xorOp[T ~int32 | ~int64 | ~uint8](in, inout []T) {
	for i := range inout {
		inout[i] ^= in[i]
	}
}

// expect folds ranks lo..hi-1's buffers in rank order with the named op,
// computing in T like the collectives do.
func expect[T Real](op string, lo, hi, cnt int) []T {
	acc := fillv[T](lo, cnt)
	for r := lo + 1; r < hi; r++ {
		x := fillv[T](r, cnt)
		switch op {
		case "sum":
			for i := range acc {
				acc[i] += x[i]
			}
		case "prod":
			for i := range acc {
				acc[i] *= x[i]
			}
		case "min":
			for i := range acc {
				if x[i] < acc[i] {
					acc[i] = x[i]
				}
			}
		case "max":
			for i := range acc {
				if x[i] > acc[i] {
					acc[i] = x[i]
				}
			}
		case "mat": // acc = acc x x
			for k := 0; k+3 < cnt; k += 4 {
				a, b := acc[k:k+4], x[k:k+4]
				a[0], a[1], a[2], a[3] = a[0]*b[0]+a[1]*b[2], a[0]*b[1]+a[1]*b[3], a[2]*b[0]+a[3]*b[2], a[2]*b[1]+a[3]*b[3]
			}
		case "xor":
			for i := range acc {
				acc[i] = T(int64(acc[i]) ^ int64(x[i]))
			}
		}
	}
	return acc
}

func ops[T Real](xor func(in, inout []T)) map[string]Op {
	m := map[string]Op{"sum": Sum, "prod": Prod, "min": Min, "max": Max,
		"mat": NewOp[T]("mat", matOp[T], false)}
	if xor != nil {
		m["xor"] = NewOp[T]("xor", xor, true)
	}
	return m
}

func diff[T Number](what string, got, want []T) error {
	if len(got) != len(want) {
		return fmt.Errorf("%s: %d elements, want %d", what, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Errorf("%s: [%d] = %v, want %v", what, i, got[i], want[i])
		}
	}
	return nil
}

// reductions runs Reduce (three roots), Allreduce (also in place), Scan,
// Exscan and ReduceScatterBlock for every op and count.
func reductions[T Real](c *Comm, counts []int, xor func(in, inout []T)) error {
	n, r := c.Size(), c.Rank()
	for name, op := range sortedOps(ops[T](xor)) {
		for _, cnt := range counts {
			if name == "mat" {
				cnt = cnt / 4 * 4
			}
			var z T
			tc := fmt.Sprintf("%T %s count %d", z, name, cnt)
			send := fillv[T](r, cnt)
			all := expect[T](name, 0, n, cnt)
			for _, root := range slices.Compact([]int{0, n - 1, n / 2}) {
				recv := make([]T, cnt+1)
				recv[cnt] = 99
				if err := Reduce(c, send, recv, op, root); err != nil {
					return fmt.Errorf("%s: reduce root %d: %w", tc, root, err)
				}
				if r == root {
					if err := diff(tc+fmt.Sprintf(" reduce root %d", root), recv, append(slices.Clone(all), 99)); err != nil {
						return err
					}
				}
			}
			recv := make([]T, cnt)
			if err := Allreduce(c, send, recv, op); err != nil {
				return fmt.Errorf("%s: allreduce: %w", tc, err)
			}
			if err := diff(tc+" allreduce", recv, all); err != nil {
				return err
			}
			inplace := fillv[T](r, cnt)
			if err := Allreduce(c, inplace, inplace, op); err != nil {
				return fmt.Errorf("%s: allreduce in place: %w", tc, err)
			}
			if err := diff(tc+" allreduce in place", inplace, all); err != nil {
				return err
			}
			if !slices.Equal(send, fillv[T](r, cnt)) {
				return fmt.Errorf("%s: send buffer changed", tc)
			}
			if err := Scan(c, send, recv, op); err != nil {
				return fmt.Errorf("%s: scan: %w", tc, err)
			}
			if err := diff(tc+" scan", recv, expect[T](name, 0, r+1, cnt)); err != nil {
				return err
			}
			ex := fillv[T](77, cnt)
			if err := Exscan(c, send, ex, op); err != nil {
				return fmt.Errorf("%s: exscan: %w", tc, err)
			}
			want := fillv[T](77, cnt)
			if r > 0 {
				want = expect[T](name, 0, r, cnt)
			}
			if err := diff(tc+" exscan", ex, want); err != nil {
				return err
			}
			k := cnt / n / 4 * 4
			block := make([]T, k)
			if err := ReduceScatterBlock(c, send[:n*k], block, op); err != nil {
				return fmt.Errorf("%s: reduce-scatter: %w", tc, err)
			}
			if err := diff(tc+" reduce-scatter", block, expect[T](name, 0, n, n*k)[r*k:(r+1)*k]); err != nil {
				return err
			}
		}
	}
	return nil
}

// sortedOps iterates a map of ops in name order (deterministic on every
// rank: all ranks must call collectives in the same order).
func sortedOps(m map[string]Op) func(yield func(string, Op) bool) {
	return func(yield func(string, Op) bool) {
		names := make([]string, 0, len(m))
		for k := range m {
			names = append(names, k)
		}
		slices.Sort(names)
		for _, k := range names {
			if !yield(k, m[k]) {
				return
			}
		}
	}
}

// lowered shrinks every switch point for the duration of a test.
func lowered(t *testing.T) {
	saved := []int{bcastLarge, reduceLarge, allreduceLarge, allgatherLarge, alltoallLarge, ringSegment}
	bcastLarge, reduceLarge, allreduceLarge, allgatherLarge, alltoallLarge, ringSegment = 1, 1, 1, 1, 1, 24
	t.Cleanup(func() {
		bcastLarge, reduceLarge, allreduceLarge, allgatherLarge, alltoallLarge, ringSegment =
			saved[0], saved[1], saved[2], saved[3], saved[4], saved[5]
	})
}

func forSizes(t *testing.T, f func(t *testing.T, comms []*Comm)) {
	for _, n := range collSizes {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			comms, _ := world(t, n, nil)
			f(t, comms)
		})
	}
}

func TestCollReductions(t *testing.T) {
	forSizes(t, func(t *testing.T, comms []*Comm) {
		each(t, comms, func(c *Comm) error {
			// 9000 float64 = 72000 bytes: above the 64 KiB switch points.
			if err := reductions[float64](c, []int{0, 1, 4, 13, 1000, 9000}, nil); err != nil {
				return err
			}
			if err := reductions[int32](c, []int{1, 6, 20000}, xorOp[int32]); err != nil {
				return err
			}
			return reductions[uint8](c, []int{3, 100, 70000}, xorOp[uint8])
		})
	})
}

func TestCollReductionsLowered(t *testing.T) {
	lowered(t)
	forSizes(t, func(t *testing.T, comms []*Comm) {
		each(t, comms, func(c *Comm) error {
			if err := reductions[float64](c, []int{0, 1, 4, 13, 37, 100}, nil); err != nil {
				return err
			}
			return reductions[int64](c, []int{5, 64, 203}, xorOp[int64])
		})
	})
}

// movement runs Bcast, Scatter(v), Gather(v), Allgather(v), Alltoall(v).
func movement(c *Comm, counts []int) error {
	n, r := c.Size(), c.Rank()
	val := func(owner, i int) float64 { return float64(owner*1000003 + i) }
	for _, cnt := range counts {
		tc := fmt.Sprintf("count %d", cnt)
		for _, root := range slices.Compact([]int{0, n - 1, n / 2}) {
			// Bcast
			buf := make([]float64, cnt)
			if r == root {
				for i := range buf {
					buf[i] = val(root, i)
				}
			}
			if err := Bcast(c, buf, root); err != nil {
				return fmt.Errorf("%s: bcast root %d: %w", tc, root, err)
			}
			for i := range buf {
				if buf[i] != val(root, i) {
					return fmt.Errorf("%s: bcast root %d: [%d] = %v", tc, root, i, buf[i])
				}
			}
			// Scatter / Gather: block of cnt per rank.
			var all []float64
			if r == root {
				all = make([]float64, n*cnt)
				for i := range all {
					all[i] = val(i/max(cnt, 1), i)
				}
			}
			mine := make([]float64, cnt)
			if err := Scatter(c, all, mine, root); err != nil {
				return fmt.Errorf("%s: scatter root %d: %w", tc, root, err)
			}
			for i := range mine {
				if mine[i] != val(r, r*cnt+i) {
					return fmt.Errorf("%s: scatter root %d: [%d] = %v", tc, root, i, mine[i])
				}
			}
			var got []float64
			if r == root {
				got = make([]float64, n*cnt)
			}
			if err := Gather(c, mine, got, root); err != nil {
				return fmt.Errorf("%s: gather root %d: %w", tc, root, err)
			}
			if r == root && !slices.Equal(got, all) {
				return fmt.Errorf("%s: gather root %d: wrong result", tc, root)
			}
			// Scatterv / Gatherv: uneven counts (some zero), gaps between
			// blocks, rank order reversed in the buffer.
			vc, vd, size := uneven(n, cnt)
			var vall []int32
			if r == root {
				vall = make([]int32, size)
				for i := range vall {
					vall[i] = -1
				}
				for q := 0; q < n; q++ {
					for i := 0; i < vc[q]; i++ {
						vall[vd[q]+i] = int32(q*100000 + i)
					}
				}
			}
			vm := make([]int32, vc[r])
			if err := Scatterv(c, vall, vc, vd, vm, root); err != nil {
				return fmt.Errorf("%s: scatterv root %d: %w", tc, root, err)
			}
			for i := range vm {
				if vm[i] != int32(r*100000+i) {
					return fmt.Errorf("%s: scatterv root %d: [%d] = %v", tc, root, i, vm[i])
				}
			}
			var vg []int32
			if r == root {
				vg = make([]int32, size)
				for i := range vg {
					vg[i] = -1
				}
			}
			if err := Gatherv(c, vm, vg, vc, vd, root); err != nil {
				return fmt.Errorf("%s: gatherv root %d: %w", tc, root, err)
			}
			if r == root && !slices.Equal(vg, vall) {
				return fmt.Errorf("%s: gatherv root %d: wrong result", tc, root)
			}
		}
		// Allgather
		mine := make([]float64, cnt)
		for i := range mine {
			mine[i] = val(r, i)
		}
		all := make([]float64, n*cnt)
		if err := Allgather(c, mine, all); err != nil {
			return fmt.Errorf("%s: allgather: %w", tc, err)
		}
		for q := 0; q < n; q++ {
			for i := 0; i < cnt; i++ {
				if all[q*cnt+i] != val(q, i) {
					return fmt.Errorf("%s: allgather: block %d [%d] = %v", tc, q, i, all[q*cnt+i])
				}
			}
		}
		// Allgatherv, packed (nil displs) and with gaps.
		vc, vd, size := uneven(n, cnt)
		vm := make([]int16, vc[r])
		for i := range vm {
			vm[i] = int16(r*1000 + i%1000)
		}
		for _, displs := range [][]int{nil, vd} {
			vall := make([]int16, size)
			if err := Allgatherv(c, vm, vall, vc, displs); err != nil {
				return fmt.Errorf("%s: allgatherv: %w", tc, err)
			}
			off := 0
			for q := 0; q < n; q++ {
				if displs != nil {
					off = displs[q]
				}
				for i := 0; i < vc[q]; i++ {
					if vall[off+i] != int16(q*1000+i%1000) {
						return fmt.Errorf("%s: allgatherv displs %v: rank %d [%d] = %v", tc, displs, q, i, vall[off+i])
					}
				}
				off += vc[q]
			}
		}
		// Alltoall: block for q holds (r, q, i).
		a2a := func(from, to, i int) uint32 { return uint32(from<<24 | to<<16 | i&0xffff) }
		sb := make([]uint32, n*cnt)
		for q := 0; q < n; q++ {
			for i := 0; i < cnt; i++ {
				sb[q*cnt+i] = a2a(r, q, i)
			}
		}
		rb := make([]uint32, n*cnt)
		if err := Alltoall(c, sb, rb); err != nil {
			return fmt.Errorf("%s: alltoall: %w", tc, err)
		}
		for q := 0; q < n; q++ {
			for i := 0; i < cnt; i++ {
				if rb[q*cnt+i] != a2a(q, r, i) {
					return fmt.Errorf("%s: alltoall: from %d [%d] = %x", tc, q, i, rb[q*cnt+i])
				}
			}
		}
		// Alltoallv: rank a sends (a+b)%3*cnt/2 elements to rank b.
		amt := func(a, b int) int { return (a + b) % 3 * cnt / 2 }
		sc, rc := make([]int, n), make([]int, n)
		for q := 0; q < n; q++ {
			sc[q], rc[q] = amt(r, q), amt(q, r)
		}
		sv := make([]uint32, sum(sc))
		off := 0
		for q := 0; q < n; q++ {
			for i := 0; i < sc[q]; i++ {
				sv[off+i] = a2a(r, q, i)
			}
			off += sc[q]
		}
		// receive into reversed order with a gap of 1 between blocks
		rd := make([]int, n)
		off = 0
		for q := n - 1; q >= 0; q-- {
			rd[q] = off
			off += rc[q] + 1
		}
		rv := make([]uint32, off)
		if err := Alltoallv(c, sv, sc, nil, rv, rc, rd); err != nil {
			return fmt.Errorf("%s: alltoallv: %w", tc, err)
		}
		for q := 0; q < n; q++ {
			for i := 0; i < rc[q]; i++ {
				if rv[rd[q]+i] != a2a(q, r, i) {
					return fmt.Errorf("%s: alltoallv: from %d [%d] = %x", tc, q, i, rv[rd[q]+i])
				}
			}
		}
	}
	return nil
}

func sum(a []int) int {
	s := 0
	for _, x := range a {
		s += x
	}
	return s
}

// uneven gives rank q a count of (q%3)*cnt/2 (so some ranks get none) and
// lays the blocks out in reverse rank order with a gap of 2 elements.
func uneven(n, cnt int) (counts, displs []int, size int) {
	counts, displs = make([]int, n), make([]int, n)
	for q := n - 1; q >= 0; q-- {
		counts[q] = (q % 3) * cnt / 2
		displs[q] = size
		size += counts[q] + 2
	}
	return counts, displs, size
}

func TestCollMovement(t *testing.T) {
	forSizes(t, func(t *testing.T, comms []*Comm) {
		// 9000 float64 = 72000 bytes: large Bcast; 3000 per rank: large
		// Allgather at 3+ ranks and large Alltoall blocks (uint32: 12000 B
		// per block, 36000 at 9000/... per rank).
		each(t, comms, func(c *Comm) error { return movement(c, []int{0, 1, 5, 1000, 9000}) })
	})
}

func TestCollMovementLowered(t *testing.T) {
	lowered(t)
	forSizes(t, func(t *testing.T, comms []*Comm) {
		each(t, comms, func(c *Comm) error { return movement(c, []int{0, 1, 2, 7, 33}) })
	})
}

type record struct {
	Name  string
	Tags  map[string]int
	Items []float64
}

func TestCollValues(t *testing.T) {
	forSizes(t, func(t *testing.T, comms []*Comm) {
		each(t, comms, func(c *Comm) error {
			n, r := c.Size(), c.Rank()
			mk := func(q int) record {
				return record{Name: "r" + strconv.Itoa(q), Tags: map[string]int{"rank": q, "sq": q * q}, Items: []float64{float64(q), 0.5}}
			}
			for _, root := range slices.Compact([]int{0, n - 1}) {
				var v map[string][]int
				if r == root {
					v = map[string][]int{"a": {1, 2, 3}, "root": {root}}
				}
				if err := BcastValue(c, &v, root); err != nil {
					return err
				}
				if !reflect.DeepEqual(v, map[string][]int{"a": {1, 2, 3}, "root": {root}}) {
					return fmt.Errorf("bcast value: %v", v)
				}
				var vals []record
				if r == root {
					for q := 0; q < n; q++ {
						vals = append(vals, mk(q))
					}
				}
				got, err := ScatterValue(c, vals, root)
				if err != nil {
					return err
				}
				if !reflect.DeepEqual(got, mk(r)) {
					return fmt.Errorf("scatter value: %+v", got)
				}
				all, err := GatherValue(c, got, root)
				if err != nil {
					return err
				}
				if r == root && !reflect.DeepEqual(all, vals) {
					return fmt.Errorf("gather value: %+v", all)
				}
				if r != root && all != nil {
					return fmt.Errorf("gather value at non-root: %+v", all)
				}
				// non-commutative fold: concatenation in rank order
				s, err := ReduceValue(c, strconv.Itoa(r), func(a, b string) string { return a + "," + b }, root)
				if err != nil {
					return err
				}
				if r == root && s != joinRanks(n) {
					return fmt.Errorf("reduce value: %q", s)
				}
			}
			all, err := AllgatherValue(c, mk(r))
			if err != nil {
				return err
			}
			for q := 0; q < n; q++ {
				if !reflect.DeepEqual(all[q], mk(q)) {
					return fmt.Errorf("allgather value [%d]: %+v", q, all[q])
				}
			}
			s, err := AllreduceValue(c, strconv.Itoa(r), func(a, b string) string { return a + "," + b })
			if err != nil || s != joinRanks(n) {
				return fmt.Errorf("allreduce value: %q %v", s, err)
			}
			out := make([]string, n)
			for q := range out {
				out[q] = fmt.Sprintf("%d->%d", r, q)
			}
			in, err := AlltoallValue(c, out)
			if err != nil {
				return err
			}
			for q := range in {
				if in[q] != fmt.Sprintf("%d->%d", q, r) {
					return fmt.Errorf("alltoall value [%d]: %q", q, in[q])
				}
			}
			return nil
		})
	})
}

func joinRanks(n int) string {
	s := "0"
	for q := 1; q < n; q++ {
		s += "," + strconv.Itoa(q)
	}
	return s
}

func TestCollArgErrors(t *testing.T) {
	comms, _ := world(t, 3, nil)
	c := comms[0]
	buf := make([]float64, 4)
	short := make([]float64, 2)
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"bcast root", Bcast(c, buf, 3), ErrRank},
		{"bcast negative root", Bcast(c, buf, -1), ErrRank},
		{"reduce root", Reduce(c, buf, buf, Sum, 5), ErrRank},
		{"reduce short", Reduce(c, buf, short, Sum, 0), ErrArg},
		{"reduce zero op", Reduce(c, buf, buf, Op{}, 0), ErrArg},
		{"reduce op type", Reduce(c, buf, buf, NewOp[int32]("x", xorOp[int32], true), 0), ErrArg},
		{"allreduce short", Allreduce(c, buf, short, Max), ErrArg},
		{"scan short", Scan(c, buf, short, Sum), ErrArg},
		{"scatter short", Scatter(c, buf, buf, 0), ErrArg},
		{"gather short", Gather(c, buf, buf, 0), ErrArg},
		{"scatterv counts", Scatterv(c, buf, []int{1, 1}, nil, buf, 0), ErrArg},
		{"scatterv range", Scatterv(c, buf, []int{1, 1, 1}, []int{0, 1, 4}, buf, 0), ErrArg},
		{"gatherv negative", Gatherv(c, buf, buf, []int{1, -1, 1}, nil, 0), ErrArg},
		{"allgather short", Allgather(c, buf, buf), ErrArg},
		{"allgatherv own count", Allgatherv(c, buf, make([]float64, 12), []int{3, 4, 4}, nil), ErrArg},
		{"alltoall multiple", Alltoall(c, buf, make([]float64, 8)), ErrArg},
		{"alltoallv counts", Alltoallv(c, buf, []int{1, 1}, nil, buf, []int{1, 1, 1}, nil), ErrArg},
		{"reduce-scatter multiple", ReduceScatterBlock(c, buf, buf, Sum), ErrArg},
		{"bcast value root", BcastValue(c, new(int), 7), ErrRank},
		{"bcast value nil", BcastValue[int](c, nil, 0), ErrArg},
	}
	for _, tc := range cases {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, tc.err, tc.want)
		}
	}
}

// A rank that leaves makes its peers' collectives fail; each failing rank
// then leaves too, as a real process would exit, so the failure spreads
// and no rank hangs.
func TestCollPeerFailure(t *testing.T) {
	for _, coll := range []string{"allreduce", "bcast", "allgather", "alltoall", "reduce"} {
		t.Run(coll, func(t *testing.T) {
			comms, _ := world(t, 5, nil)
			errs := make([]error, len(comms))
			each(t, comms, func(c *Comm) error {
				// connect every pair first: the failure happens mid-job
				if err := Alltoall(c, make([]int, 5), make([]int, 5)); err != nil {
					return err
				}
				if c.Rank() == 3 {
					return c.Finalize()
				}
				buf := make([]float64, 20000)
				out := make([]float64, 5*20000)
				var err error
				for i := 0; i < 10 && err == nil; i++ {
					switch coll {
					case "allreduce":
						err = Allreduce(c, buf[:10], out[:10], Sum)
					case "bcast":
						err = Bcast(c, buf, 0)
					case "allgather":
						err = Allgather(c, buf, out)
					case "alltoall":
						err = Alltoall(c, out, make([]float64, len(out)))
					case "reduce":
						err = Reduce(c, buf, out, Sum, 4)
					}
				}
				errs[c.Rank()] = err
				c.Finalize()
				return nil
			})
			t.Logf("errors: %v", errs)
			for r, err := range errs {
				if r != 3 && err == nil {
					t.Errorf("rank %d: no error", r)
				}
				var pe *PeerError
				if r != 3 && err != nil && !errors.As(err, &pe) {
					t.Errorf("rank %d: %v is not a PeerError", r, err)
				}
			}
		})
	}
}

// The reductions' hot path reuses the Comm's scratch space: after a warm
// up, repeated calls allocate only the runtime's small per-message
// bookkeeping, not buffers (bytes per call independent of the size).
func TestCollAllocs(t *testing.T) {
	comms, _ := world(t, 2, nil)
	for _, cnt := range []int{1000, 1 << 20} {
		in, out := make([]float64, cnt), make([]float64, cnt)
		const calls = 5
		done := make(chan struct{})
		go func() {
			defer close(done)
			in, out := make([]float64, cnt), make([]float64, cnt)
			for i := 0; i < calls+1; i++ {
				Allreduce(comms[1], in, out, Sum)
			}
		}()
		Allreduce(comms[0], in, out, Sum) // warm up: connect, grow scratch
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		for i := 0; i < calls; i++ {
			Allreduce(comms[0], in, out, Sum)
		}
		<-done
		runtime.ReadMemStats(&m1)
		// Both ranks' allocations (one process).
		per := (m1.TotalAlloc - m0.TotalAlloc) / calls
		t.Logf("allreduce of %d doubles: %d bytes, %d allocations per call (2 ranks)", cnt, per, (m1.Mallocs-m0.Mallocs)/calls)
		if per > 64<<10 {
			t.Errorf("allreduce of %d doubles allocates %d bytes per call", cnt, per)
		}
	}
}

// A rank sending more than root's count for it: root gets ErrTruncate.
func TestCollGathervTruncate(t *testing.T) {
	comms, _ := world(t, 3, nil)
	errs := make([]error, 3)
	each(t, comms, func(c *Comm) error {
		send := make([]float64, 2)
		if c.Rank() == 2 {
			send = make([]float64, 5)
		}
		var recv []float64
		if c.Rank() == 0 {
			recv = make([]float64, 6)
		}
		errs[c.Rank()] = Gatherv(c, send, recv, []int{2, 2, 2}, nil, 0)
		return nil
	})
	if !errors.Is(errs[0], ErrTruncate) || errs[1] != nil || errs[2] != nil {
		t.Fatalf("errors %v", errs)
	}
}

func benchColl(b *testing.B, n int, f func(c *Comm) error) {
	t := &testing.T{}
	comms, _ := world(t, n, nil)
	benchComms(b, comms, f)
}

// benchComms times f on comms[0] while the other ranks run it alongside,
// then finalizes every rank.
func benchComms(b *testing.B, comms []*Comm, f func(c *Comm) error) {
	defer func() {
		for _, c := range comms {
			c.Finalize()
		}
	}()
	for _, c := range comms[1:] {
		go func(c *Comm) {
			for i := 0; i < b.N+1; i++ {
				if err := f(c); err != nil {
					panic(err)
				}
			}
		}(c)
	}
	if err := f(comms[0]); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := f(comms[0]); err != nil {
			b.Fatal(err)
		}
	}
}

// In-process (loopback TCP) timings, e.g.
// go test -run ^$ -bench Coll -benchtime 20x ./runtime/
func BenchmarkCollAllreduce(b *testing.B) {
	for _, n := range []int{2, 4} {
		for _, cnt := range []int{1, 1 << 10, 1 << 20} {
			b.Run(fmt.Sprintf("%dranks/%dB", n, 8*cnt), func(b *testing.B) {
				bufs := map[*Comm][2][]float64{}
				var mu sync.Mutex
				benchColl(b, n, func(c *Comm) error {
					mu.Lock()
					bb, ok := bufs[c]
					if !ok {
						bb = [2][]float64{make([]float64, cnt), make([]float64, cnt)}
						bufs[c] = bb
					}
					mu.Unlock()
					return Allreduce(c, bb[0], bb[1], Sum)
				})
				b.SetBytes(int64(8 * cnt))
			})
		}
	}
}

func BenchmarkCollBarrier(b *testing.B) {
	for _, n := range []int{2, 4} {
		b.Run(fmt.Sprintf("%dranks", n), func(b *testing.B) {
			benchColl(b, n, (*Comm).Barrier)
		})
	}
}
