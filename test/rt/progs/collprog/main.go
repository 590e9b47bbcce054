// Command collprog is a rank program for the collectives' end-to-end
// tests. "check" runs every collective at small and large sizes (across
// every algorithm switch) and checks the results against values computed
// locally; "bench" times Barrier and Allreduce. Each rank prints
// "rank R: ok" when it passes, or "rank R: FAIL ..." and exits 1.
package main

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strconv"
	"time"

	mpi "github.com/gompi/gompi/runtime"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	mode := "check"
	if len(os.Args) > 1 {
		mode = os.Args[1]
	}
	c, err := mpi.Init(ctx)
	if err != nil {
		fmt.Println("FAIL init:", err)
		os.Exit(1)
	}
	switch mode {
	case "check":
		err = check(c)
	case "bench":
		err = bench(c)
	default:
		err = fmt.Errorf("unknown mode %q", mode)
	}
	if err != nil {
		fmt.Printf("rank %d: FAIL %s: %v\n", c.Rank(), mode, err)
		c.Abort(1)
		os.Exit(1)
	}
	if err := c.Finalize(); err != nil {
		fmt.Printf("rank %d: FAIL finalize: %v\n", c.Rank(), err)
		os.Exit(1)
	}
	fmt.Printf("rank %d: ok\n", c.Rank())
}

// v is rank r's element i: small integers, so sums and products over 8
// ranks are exact.
func v(r, i int) float64 { return float64((r*7+i*3)%5 + 1) }

func fill(r, n int) []float64 {
	b := make([]float64, n)
	for i := range b {
		b[i] = v(r, i)
	}
	return b
}

// fold folds ranks [lo, hi) in rank order with f.
func fold(lo, hi, n int, f func(a, b float64) float64) []float64 {
	acc := fill(lo, n)
	for r := lo + 1; r < hi; r++ {
		for i := range acc {
			acc[i] = f(acc[i], v(r, i))
		}
	}
	return acc
}

func eq(what string, got, want []float64) error {
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

func check(c *mpi.Comm) error {
	n, r := c.Size(), c.Rank()
	if err := c.Barrier(); err != nil {
		return fmt.Errorf("barrier: %w", err)
	}
	// A non-commutative user op: keep the lower rank's value unless it is
	// zero (associative; the result is order-sensitive).
	first := mpi.NewOp("first", func(in, inout []float64) {
		for i := range inout {
			if in[i] != 0 {
				inout[i] = in[i]
			}
		}
	}, false)
	ops := []struct {
		name string
		op   mpi.Op
		f    func(a, b float64) float64
	}{
		{"sum", mpi.Sum, func(a, b float64) float64 { return a + b }},
		{"prod", mpi.Prod, func(a, b float64) float64 { return a * b }},
		{"min", mpi.Min, func(a, b float64) float64 { return min(a, b) }},
		{"max", mpi.Max, func(a, b float64) float64 { return max(a, b) }},
		{"first", first, func(a, b float64) float64 {
			if a != 0 {
				return a
			}
			return b
		}},
	}
	for _, cnt := range []int{1, 1000, 70000} {
		for _, o := range ops {
			tc := fmt.Sprintf("%s count %d", o.name, cnt)
			send := fill(r, cnt)
			all := fold(0, n, cnt, o.f)
			for _, root := range slices.Compact([]int{0, n - 1}) {
				out := make([]float64, cnt)
				if err := mpi.Reduce(c, send, out, o.op, root); err != nil {
					return fmt.Errorf("%s: reduce: %w", tc, err)
				}
				if r == root {
					if err := eq(tc+" reduce", out, all); err != nil {
						return err
					}
				}
			}
			out := make([]float64, cnt)
			if err := mpi.Allreduce(c, send, out, o.op); err != nil {
				return fmt.Errorf("%s: allreduce: %w", tc, err)
			}
			if err := eq(tc+" allreduce", out, all); err != nil {
				return err
			}
			if err := mpi.Scan(c, send, out, o.op); err != nil {
				return fmt.Errorf("%s: scan: %w", tc, err)
			}
			if err := eq(tc+" scan", out, fold(0, r+1, cnt, o.f)); err != nil {
				return err
			}
			if err := mpi.Exscan(c, send, out, o.op); err != nil {
				return fmt.Errorf("%s: exscan: %w", tc, err)
			}
			if r > 0 {
				if err := eq(tc+" exscan", out, fold(0, r, cnt, o.f)); err != nil {
					return err
				}
			}
			k := cnt / n
			blk := make([]float64, k)
			if err := mpi.ReduceScatterBlock(c, send[:n*k], blk, o.op); err != nil {
				return fmt.Errorf("%s: reduce-scatter: %w", tc, err)
			}
			if err := eq(tc+" reduce-scatter", blk, all[r*k:(r+1)*k]); err != nil {
				return err
			}
		}
		tc := fmt.Sprintf("count %d", cnt)
		for _, root := range slices.Compact([]int{0, n - 1}) {
			buf := make([]float64, cnt)
			if r == root {
				buf = fill(root, cnt)
			}
			if err := mpi.Bcast(c, buf, root); err != nil {
				return fmt.Errorf("%s: bcast: %w", tc, err)
			}
			if err := eq(tc+" bcast", buf, fill(root, cnt)); err != nil {
				return err
			}
			var big []float64
			if r == root {
				for q := 0; q < n; q++ {
					big = append(big, fill(q, cnt)...)
				}
			}
			mine := make([]float64, cnt)
			if err := mpi.Scatter(c, big, mine, root); err != nil {
				return fmt.Errorf("%s: scatter: %w", tc, err)
			}
			if err := eq(tc+" scatter", mine, fill(r, cnt)); err != nil {
				return err
			}
			var back []float64
			if r == root {
				back = make([]float64, n*cnt)
			}
			if err := mpi.Gather(c, mine, back, root); err != nil {
				return fmt.Errorf("%s: gather: %w", tc, err)
			}
			if r == root {
				if err := eq(tc+" gather", back, big); err != nil {
					return err
				}
			}
			// v variants: rank q has (q%3)*cnt/2 elements, packed.
			counts := make([]int, n)
			var packed []float64
			for q := range counts {
				counts[q] = q % 3 * cnt / 2
				packed = append(packed, fill(q, counts[q])...)
			}
			mv := make([]float64, counts[r])
			if err := mpi.Scatterv(c, packed, counts, nil, mv, root); err != nil {
				return fmt.Errorf("%s: scatterv: %w", tc, err)
			}
			if err := eq(tc+" scatterv", mv, fill(r, counts[r])); err != nil {
				return err
			}
			gv := make([]float64, len(packed))
			if err := mpi.Gatherv(c, mv, gv, counts, nil, root); err != nil {
				return fmt.Errorf("%s: gatherv: %w", tc, err)
			}
			if r == root {
				if err := eq(tc+" gatherv", gv, packed); err != nil {
					return err
				}
			}
			agv := make([]float64, len(packed))
			if err := mpi.Allgatherv(c, mv, agv, counts, nil); err != nil {
				return fmt.Errorf("%s: allgatherv: %w", tc, err)
			}
			if err := eq(tc+" allgatherv", agv, packed); err != nil {
				return err
			}
		}
		var want []float64
		for q := 0; q < n; q++ {
			want = append(want, fill(q, cnt)...)
		}
		ag := make([]float64, n*cnt)
		if err := mpi.Allgather(c, fill(r, cnt), ag); err != nil {
			return fmt.Errorf("%s: allgather: %w", tc, err)
		}
		if err := eq(tc+" allgather", ag, want); err != nil {
			return err
		}
		// Alltoall: the block for q is fill(r*n+q).
		k := max(cnt/n, 1)
		sb, wantA := make([]float64, 0, n*k), make([]float64, 0, n*k)
		for q := 0; q < n; q++ {
			sb = append(sb, fill(r*n+q, k)...)
			wantA = append(wantA, fill(q*n+r, k)...)
		}
		rb := make([]float64, n*k)
		if err := mpi.Alltoall(c, sb, rb); err != nil {
			return fmt.Errorf("%s: alltoall: %w", tc, err)
		}
		if err := eq(tc+" alltoall", rb, wantA); err != nil {
			return err
		}
		// Alltoallv: rank a sends (a+b)%3*k/2 elements fill(a*n+b) to b.
		amt := func(a, b int) int { return (a + b) % 3 * k / 2 }
		sc, rc := make([]int, n), make([]int, n)
		var sv, wantV []float64
		for q := 0; q < n; q++ {
			sc[q], rc[q] = amt(r, q), amt(q, r)
			sv = append(sv, fill(r*n+q, sc[q])...)
			wantV = append(wantV, fill(q*n+r, rc[q])...)
		}
		rv := make([]float64, len(wantV))
		if err := mpi.Alltoallv(c, sv, sc, nil, rv, rc, nil); err != nil {
			return fmt.Errorf("%s: alltoallv: %w", tc, err)
		}
		if err := eq(tc+" alltoallv", rv, wantV); err != nil {
			return err
		}
	}
	// Values.
	type item struct {
		Rank int
		Name string
		Tags map[string]int
	}
	mk := func(q int) item { return item{q, "rank" + strconv.Itoa(q), map[string]int{"sq": q * q}} }
	var cfg map[string]string
	if r == 0 {
		cfg = map[string]string{"mode": "check", "n": strconv.Itoa(n)}
	}
	if err := mpi.BcastValue(c, &cfg, 0); err != nil || cfg["n"] != strconv.Itoa(n) {
		return fmt.Errorf("bcast value: %v %v", cfg, err)
	}
	var items []item
	if r == n-1 {
		for q := 0; q < n; q++ {
			items = append(items, mk(q))
		}
	}
	it, err := mpi.ScatterValue(c, items, n-1)
	if err != nil || !reflect.DeepEqual(it, mk(r)) {
		return fmt.Errorf("scatter value: %+v %v", it, err)
	}
	got, err := mpi.GatherValue(c, it, n-1)
	if err != nil || (r == n-1 && !reflect.DeepEqual(got, items)) {
		return fmt.Errorf("gather value: %+v %v", got, err)
	}
	ag, err := mpi.AllgatherValue(c, mk(r))
	if err != nil {
		return fmt.Errorf("allgather value: %w", err)
	}
	for q := range ag {
		if !reflect.DeepEqual(ag[q], mk(q)) {
			return fmt.Errorf("allgather value [%d]: %+v", q, ag[q])
		}
	}
	s, err := mpi.AllreduceValue(c, strconv.Itoa(r), func(a, b string) string { return a + "," + b })
	want := "0"
	for q := 1; q < n; q++ {
		want += "," + strconv.Itoa(q)
	}
	if err != nil || s != want {
		return fmt.Errorf("allreduce value: %q %v", s, err)
	}
	msgs := make([]string, n)
	for q := range msgs {
		msgs[q] = fmt.Sprintf("%d->%d", r, q)
	}
	in, err := mpi.AlltoallValue(c, msgs)
	if err != nil {
		return fmt.Errorf("alltoall value: %w", err)
	}
	for q := range in {
		if in[q] != fmt.Sprintf("%d->%d", q, r) {
			return fmt.Errorf("alltoall value [%d]: %q", q, in[q])
		}
	}
	return c.Barrier()
}

// bench prints the median time of Barrier and of Allreduce (sum of
// doubles) at a few sizes, as seen by rank 0.
func bench(c *mpi.Comm) error {
	median := func(reps int, f func() error) (time.Duration, error) {
		ds := make([]time.Duration, reps)
		for i := range ds {
			t0 := time.Now()
			if err := f(); err != nil {
				return 0, err
			}
			ds[i] = time.Since(t0)
		}
		slices.Sort(ds)
		return ds[reps/2], nil
	}
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }
	if err := c.Barrier(); err != nil {
		return err
	}
	d, err := median(1000, c.Barrier)
	if err != nil {
		return err
	}
	if c.Rank() == 0 {
		fmt.Printf("bench: barrier %d ranks: %.2f us\n", c.Size(), us(d))
	}
	for _, n := range []int{1, 1024, 1 << 17, 1 << 20} {
		in, out := make([]float64, n), make([]float64, n)
		for i := range in {
			in[i] = float64(i)
		}
		mpi.Allreduce(c, in, out, mpi.Sum)
		reps := 200
		if n >= 1<<17 {
			reps = 30
		}
		d, err := median(reps, func() error { return mpi.Allreduce(c, in, out, mpi.Sum) })
		if err != nil {
			return err
		}
		if out[n-1] != float64(n-1)*float64(c.Size()) {
			return fmt.Errorf("allreduce of %d: got %v", n, out[n-1])
		}
		if c.Rank() == 0 {
			fmt.Printf("bench: allreduce %d doubles (%d B), %d ranks: %.2f us\n", n, 8*n, c.Size(), us(d))
		}
	}
	return nil
}
