package main

import (
	"context"
	"time"

	mpi "github.com/gompi/gompi/runtime"
)

// overlap measures how well a non-blocking Allreduce hides behind local
// compute (test/bench/osu/osu.c's "overlap" does the same with MPICH): at
// the largest size (8 MiB by default) it times the Allreduce alone, the
// compute alone (passes of x = x*a + b over an 8 MiB array, as many as
// take about as long as the Allreduce on rank 0, the same count on every
// rank), and Iallreduce + compute + Wait, each the max over ranks. It
// prints overlap_comm, overlap_compute and overlap_both (µs) and overlap,
// the ratio both / max(comm, compute): 1.0 is perfect overlap, 2.0 none.
func (b *bench) overlap() error {
	c := b.c
	n := max(b.max/8*8, 8)
	cnt := n / 8
	in, out, work := make([]float64, cnt), make([]float64, cnt), make([]float64, cnt)
	for i := range in {
		in[i], work[i] = 1, 1
	}
	compute := func(passes int) {
		for p := 0; p < passes; p++ {
			for i := range work {
				work[i] = work[i]*0.999 + 0.001
			}
		}
	}
	it := b.count(n, 100, 20)
	worst := make([]float64, 1)
	timeIt := func(f func() error) (float64, error) {
		if err := c.Barrier(); err != nil {
			return 0, err
		}
		var t0 time.Time
		warm := it/10 + 1
		for i := 0; i < it+warm; i++ {
			if i == warm {
				t0 = time.Now()
			}
			if err := f(); err != nil {
				return 0, err
			}
		}
		dt := []float64{float64(time.Since(t0).Nanoseconds()) / 1e3 / float64(it)}
		if err := mpi.Allreduce(c, dt, worst, mpi.Max); err != nil {
			return 0, err
		}
		return worst[0], nil
	}
	tcomm, err := timeIt(func() error { return mpi.Allreduce(c, in, out, mpi.Sum) })
	if err != nil {
		return err
	}
	t0 := time.Now()
	compute(4)
	pass := float64(time.Since(t0).Nanoseconds()) / 1e3 / 4
	passes := []int64{max(int64(tcomm/pass+0.5), 1)}
	if err := mpi.Bcast(c, passes, 0); err != nil {
		return err
	}
	tcomp, err := timeIt(func() error { compute(int(passes[0])); return nil })
	if err != nil {
		return err
	}
	tboth, err := timeIt(func() error {
		r := mpi.Iallreduce(c, in, out, mpi.Sum)
		compute(int(passes[0]))
		_, err := r.Wait(context.Background())
		return err
	})
	if err != nil {
		return err
	}
	b.emit("overlap_comm", n, tcomm)
	b.emit("overlap_compute", n, tcomp)
	b.emit("overlap_both", n, tboth)
	b.emit("overlap", n, tboth/max(tcomm, tcomp))
	return nil
}
