package mpi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
	"unsafe"
)

// Non-blocking collectives, ReduceScatter with counts, and collectives
// bounded by a context.

// nonblocking starts every non-blocking collective at once, with blocking
// collectives and point-to-point messages between and beside them, and
// checks every result. cnt sets the size (large: the ring and pairwise
// algorithms).
func nonblocking(c *Comm, cnt int) error {
	n, r := c.Size(), c.Rank()
	val := func(q, i int) float64 { return float64(q*1000 + i%1000) }
	mine := make([]float64, cnt)
	for i := range mine {
		mine[i] = val(r, i)
	}
	var reqs []*Request
	var checks []func() error
	add := func(name string, req *Request, check func() error) {
		reqs = append(reqs, req)
		checks = append(checks, func() error {
			if err := check(); err != nil {
				return fmt.Errorf("%s (count %d): %w", name, cnt, err)
			}
			return nil
		})
	}
	sumWant := func(q0, q1 int) []float64 {
		w := make([]float64, cnt)
		for q := q0; q < q1; q++ {
			for i := range w {
				w[i] += val(q, i)
			}
		}
		return w
	}
	eq := func(got, want []float64) func() error { return func() error { return diff("", got, want) } }

	add("ibarrier", c.Ibarrier(), func() error { return nil })
	ar := make([]float64, cnt)
	add("iallreduce", Iallreduce(c, mine, ar, Sum), eq(ar, sumWant(0, n)))
	// A point-to-point ring beside the collectives.
	right, left := (r+1)%n, (r-1+n)%n
	ping := []int64{int64(r)}
	pong := make([]int64, 1)
	add("isend", Isend(c, ping, right, 5), func() error { return nil })
	add("irecv", Irecv(c, pong, left, 5), func() error {
		if pong[0] != int64(left) {
			return fmt.Errorf("got %d", pong[0])
		}
		return nil
	})
	// A blocking collective while the others run.
	bl := make([]float64, cnt)
	if err := Allreduce(c, mine, bl, Max); err != nil {
		return fmt.Errorf("blocking allreduce beside non-blocking ones: %w", err)
	}
	if err := diff("blocking allreduce", bl, func() []float64 {
		w := make([]float64, cnt)
		for i := range w {
			w[i] = val(n-1, i)
		}
		return w
	}()); err != nil {
		return err
	}
	root := n / 2
	bc := make([]float64, cnt)
	if r == root {
		copy(bc, mine)
	}
	add("ibcast", Ibcast(c, bc, root), eq(bc, func() []float64 {
		w := make([]float64, cnt)
		for i := range w {
			w[i] = val(root, i)
		}
		return w
	}()))
	red := make([]float64, cnt)
	add("ireduce", Ireduce(c, mine, red, Sum, root), func() error {
		if r != root {
			return nil
		}
		return diff("", red, sumWant(0, n))
	})
	sc := make([]float64, cnt)
	add("iscan", Iscan(c, mine, sc, Sum), eq(sc, sumWant(0, r+1)))
	ex := make([]float64, cnt)
	add("iexscan", Iexscan(c, mine, ex, Sum), func() error {
		if r == 0 {
			return nil
		}
		return diff("", ex, sumWant(0, r))
	})
	all := make([]float64, n*cnt)
	for q := 0; q < n; q++ {
		for i := 0; i < cnt; i++ {
			all[q*cnt+i] = val(q, i)
		}
	}
	ag := make([]float64, n*cnt)
	add("iallgather", Iallgather(c, mine, ag), eq(ag, all))
	g := make([]float64, n*cnt)
	add("igather", Igather(c, mine, g, root), func() error {
		if r != root {
			return nil
		}
		return diff("", g, all)
	})
	var src []float64
	if r == root {
		src = all
	}
	s := make([]float64, cnt)
	add("iscatter", Iscatter(c, src, s, root), eq(s, mine))
	counts := make([]int, n)
	for q := range counts {
		counts[q] = cnt * (q%2 + 1) / 2
	}
	displs, _ := checkV(n, counts, nil, 1<<40, "")
	total := displs[n-1] + counts[n-1]
	agv := make([]float64, total)
	wantv := make([]float64, total)
	for q := 0; q < n; q++ {
		copy(wantv[displs[q]:], all[q*cnt:q*cnt+counts[q]])
	}
	add("iallgatherv", Iallgatherv(c, mine[:counts[r]], agv, counts, nil), eq(agv, wantv))
	gv := make([]float64, total)
	add("igatherv", Igatherv(c, mine[:counts[r]], gv, counts, nil, root), func() error {
		if r != root {
			return nil
		}
		return diff("", gv, wantv)
	})
	var srcv []float64
	if r == root {
		srcv = wantv
	}
	sv := make([]float64, counts[r])
	add("iscatterv", Iscatterv(c, srcv, counts, nil, sv, root), eq(sv, mine[:counts[r]]))
	// Alltoall: block q of rank r's buffer is val(r*n+q, i).
	a2 := make([]float64, n*cnt)
	a2want := make([]float64, n*cnt)
	for q := 0; q < n; q++ {
		for i := 0; i < cnt; i++ {
			a2[q*cnt+i] = val(r*n+q, i)
			a2want[q*cnt+i] = val(q*n+r, i)
		}
	}
	a2got := make([]float64, n*cnt)
	add("ialltoall", Ialltoall(c, a2, a2got), eq(a2got, a2want))
	a2vgot := make([]float64, n*cnt)
	add("ialltoallv", Ialltoallv(c, a2, slices.Repeat([]int{cnt}, n), nil, a2vgot, slices.Repeat([]int{cnt}, n), nil), eq(a2vgot, a2want))
	rs := make([]float64, counts[r])
	add("ireducescatter", IreduceScatter(c, all[:total], rs, counts, Sum), func() error {
		w := make([]float64, counts[r])
		for i := range w {
			w[i] = float64(n) * all[displs[r]+i]
		}
		return diff("", rs, w)
	})
	// Complete them in whatever order they finish.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	left2 := slices.Clone(reqs)
	for range reqs {
		i, _, err := WaitAny(ctx, left2...)
		if err != nil {
			return fmt.Errorf("request %d: %w", i, err)
		}
		if i < 0 {
			return fmt.Errorf("WaitAny: nothing left")
		}
		left2[i] = nil
	}
	for _, ch := range checks {
		if err := ch(); err != nil {
			return err
		}
	}
	return nil
}

func TestCollNonblocking(t *testing.T) {
	forSizes(t, func(t *testing.T, comms []*Comm) {
		each(t, comms, func(c *Comm) error {
			for _, cnt := range []int{0, 1, 7, 10000} {
				if err := nonblocking(c, cnt); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

func TestCollNonblockingLowered(t *testing.T) {
	lowered(t)
	forSizes(t, func(t *testing.T, comms []*Comm) {
		each(t, comms, func(c *Comm) error { return nonblocking(c, 37) })
	})
}

// TestCollNonblockingProgress: a non-blocking collective completes while
// its callers only wait on a channel (no call into the library), and many
// of them in flight at once, started in the same order everywhere, keep
// their messages apart.
func TestCollNonblockingProgress(t *testing.T) {
	comms, _ := world(t, 4, nil)
	each(t, comms, func(c *Comm) error {
		const k = 40
		bufs := make([][]int64, k)
		reqs := make([]*Request, k)
		for j := range reqs {
			bufs[j] = []int64{int64(c.Rank() * j), int64(j)}
			reqs[j] = Iallreduce(c, bufs[j], bufs[j], Sum)
		}
		for j := k - 1; j >= 0; j-- {
			select {
			case <-reqs[j].Done():
			case <-time.After(time.Minute):
				return fmt.Errorf("iallreduce %d did not complete", j)
			}
			if _, err := reqs[j].Wait(context.Background()); err != nil {
				return err
			}
			if want := []int64{int64(6 * j), int64(4 * j)}; !slices.Equal(bufs[j], want) {
				return fmt.Errorf("iallreduce %d: %v, want %v", j, bufs[j], want)
			}
		}
		return nil
	})
}

func TestCollReduceScatter(t *testing.T) {
	mat := NewOp[int64]("mat", matOp[int64], false).WithUnit(4)
	rotu := NewOp("rot", rotOp, true).WithUnit(4)
	forSizes(t, func(t *testing.T, comms []*Comm) {
		each(t, comms, func(c *Comm) error {
			n, r := c.Size(), c.Rank()
			for _, per := range []int{0, 2, 3000} {
				counts := make([]int, n)
				for q := range counts {
					counts[q] = 4 * (per * (q % 3) / 2) // some zero
				}
				displs, _ := checkV(n, counts, nil, 1<<40, "")
				total := displs[n-1] + counts[n-1]
				for name, op := range sortedOps(map[string]Op{"sum": Sum, "mat": mat}) {
					want := expect[int64](name, 0, n, total)
					got := make([]int64, counts[r]+1)
					got[counts[r]] = 99
					if err := ReduceScatter(c, fillv[int64](r, total), got, counts, op); err != nil {
						return fmt.Errorf("%s per %d: %w", name, per, err)
					}
					if err := diff(fmt.Sprintf("%s per %d", name, per), got, append(slices.Clone(want[displs[r]:displs[r]+counts[r]]), 99)); err != nil {
						return err
					}
				}
			}
			if err := ReduceScatter(c, make([]int64, 2*n), make([]int64, 2), slices.Repeat([]int{2}, n), rotu); !errors.Is(err, ErrArg) {
				return fmt.Errorf("counts not whole units: %v", err)
			}
			return nil
		})
	})
}

// TestCollContextDeadline: a collective on a view with a deadline ends with
// the context's error when a peer never joins, instead of hanging.
func TestCollContextDeadline(t *testing.T) {
	comms, _ := world(t, 3, nil)
	each(t, comms, func(c *Comm) error {
		if c.Rank() == 2 {
			return nil // never joins
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		v := c.WithContext(ctx)
		buf := make([]float64, 100000)
		errs := []error{
			Allreduce(v, buf, buf, Sum),
			v.Barrier(),
			Bcast(v, buf, 2),
		}
		if err := Gather(v, buf[:10], buf, 0); c.Rank() == 0 || err != nil {
			errs = append(errs, err) // rank 1's send is eager: done at once
		}
		_, err := Iallreduce(v, buf[:8], buf[:8], Sum).Wait(context.Background())
		errs = append(errs, err)
		for i, err := range errs {
			if !errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("collective %d: %v, want a deadline error", i, err)
			}
		}
		return nil
	})
}

// TestCollNonblockingNodeAware: non-blocking collectives on pretend hosts,
// first before the communicator learned its layout (each clone learns it
// in its own tag space), then after (clones inherit it).
func TestCollNonblockingNodeAware(t *testing.T) {
	for _, hosts := range []string{"AABBBC", "ABCABCAB"} {
		t.Run(hosts, func(t *testing.T) {
			comms := hostsWorld(t, hosts)
			each(t, comms, func(c *Comm) error {
				if err := nonblocking(c, 7); err != nil {
					return err
				}
				if err := c.Barrier(); err != nil {
					return err
				}
				if c.node == nil || !c.node.twoLevel {
					return fmt.Errorf("layout not two-level after a barrier")
				}
				return nonblocking(c, 3000)
			})
		})
	}
}

// TestCollContextCancel: cancelling a view's context ends the collectives
// waiting on a rank that never joins with context.Canceled, for typed and
// value collectives, flat and two-level (pretend hosts), on shared memory
// and TCP, at 2..8 ranks; the communicator's other ranks are unaffected.
func TestCollContextCancel(t *testing.T) {
	run := func(t *testing.T, comms []*Comm) {
		n := len(comms)
		each(t, comms, func(c *Comm) error {
			if c.Rank() == n-1 {
				return nil // never joins
			}
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(50*time.Millisecond, cancel)
			v := c.WithContext(ctx)
			buf := make([]int64, 20000)
			x := 0
			_, gerr := AllgatherValue(v, c.Rank())
			errs := []error{
				v.Barrier(),
				Allreduce(v, buf, buf, Sum),
				Bcast(v, buf, n-1),
				Alltoall(v, buf[:n], buf[n:2*n]),
				BcastValue(v, &x, n-1),
				gerr,
			}
			_, err := Iallgather(v, buf[:1], buf[:n]).Wait(context.Background())
			errs = append(errs, err)
			for i, err := range errs {
				if !errors.Is(err, context.Canceled) {
					return fmt.Errorf("collective %d: %v, want context.Canceled", i, err)
				}
			}
			return nil
		})
	}
	for _, tr := range transportMods {
		for _, n := range collSizes[1:] {
			t.Run(tr.name+"/"+strconv.Itoa(n), func(t *testing.T) {
				comms, _ := world(t, n, tr.mod)
				run(t, comms)
			})
		}
	}
	t.Run("hosts", func(t *testing.T) { run(t, hostsWorld(t, "AABBBC")) })
}

// TestCollNonblockingScratchAfterFailure: a non-blocking collective that
// failed does not return its scratch buffers for reuse (a receive that had
// matched before its context ended may still be writing into them, into
// whatever collective took them next); one that succeeded does.
func TestCollNonblockingScratchAfterFailure(t *testing.T) {
	var mu sync.Mutex
	watched := map[unsafe.Pointer]bool{} // scratch of the failing collectives
	var recycled, bad int
	old := recycleScratch
	recycleScratch = func(sc *[2][]uint64) {
		mu.Lock()
		recycled++
		for _, s := range sc {
			if len(s) > 0 && watched[unsafe.Pointer(&s[0])] {
				bad++
			}
		}
		mu.Unlock()
		old(sc)
	}
	t.Cleanup(func() { recycleScratch = old })
	comms, _ := world(t, 2, nil)
	each(t, comms, func(c *Comm) error {
		buf := make([]int64, 1<<16) // a ring allreduce: scratch in use
		if _, err := Iallreduce(c, buf, buf, Sum).Wait(context.Background()); err != nil {
			return err
		}
		ctx, cancel := context.WithCancel(context.Background())
		recvd := make([]int64, len(buf))
		// The collective holds its scratch from here until it ends: only
		// its own end could return it.
		r := c.WithContext(ctx).start(func(nc *Comm) error {
			s := scratch[int64](nc, 0, len(buf))
			mu.Lock()
			watched[unsafe.Pointer(&s[0])] = true
			mu.Unlock()
			cancel()
			return Allreduce(nc, buf, recvd, Sum)
		})
		if _, err := r.Wait(context.Background()); !errors.Is(err, context.Canceled) {
			return fmt.Errorf("cancelled Iallreduce: %v, want context.Canceled", err)
		}
		mu.Lock()
		defer mu.Unlock()
		if bad > 0 {
			return errors.New("a failed collective's scratch was returned for reuse")
		}
		if recycled == 0 {
			return errors.New("no successful collective's scratch was returned for reuse")
		}
		return nil
	})
}
