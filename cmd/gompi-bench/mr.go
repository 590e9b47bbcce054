package main

import (
	"context"
	"time"

	mpi "github.com/gompi/gompi/runtime"
)

// mrMax is the largest message size of the message-rate sweep: the rate
// is about small messages, and osu_mbw_mr's larger sizes only repeat bw.
const mrMax = 64 << 10

// mr is osu_mbw_mr (test/bench/osu/osu.c's "mr" does the same with MPICH):
// the first half of the ranks send to the second half, rank i to
// i+size/2, all pairs at once; per iteration each sender posts a window of
// 64 Isends and waits for them, its receiver posts 64 Irecvs, waits, and
// answers with a 4-byte acknowledgement. It prints the aggregate rate of
// all pairs in millions of messages per second (each sender's own rate,
// summed), for sizes from 1 byte to min(MAXBYTES, 64 KiB).
func (b *bench) mr() error { return b.msgRate(false) }

// mrp is mr with persistent requests on both sides (osu.c's "mrp" with
// MPI_Send_init, MPI_Recv_init, MPI_Startall and MPI_Waitall): each size
// makes a window of 64 persistent sends (or receives) once, and every
// iteration starts the window with StartAll and waits for it.
func (b *bench) mrp() error { return b.msgRate(true) }

// msgRate is mr, or with persistent requests mrp.
func (b *bench) msgRate(persistent bool) error {
	name := "mr"
	if persistent {
		name = "mrp"
	}
	const W = 64
	c, r := b.c, b.c.Rank()
	pairs := c.Size() / 2
	ctx := context.Background()
	reqs := make([]*mpi.Request, W)
	// The receives' storage and the statuses are the caller's and reused
	// by every window, as osu.c's MPI_Request and MPI_Status arrays are.
	slots := make([]mpi.RecvSlot, W)
	st := make([]mpi.Status, W)
	ack := make([]byte, 4)
	rate, sum := make([]float64, 1), make([]float64, 1)
	for n := 1; n <= min(b.max, mrMax); n *= 2 {
		it := b.count(n, 2000, 50)
		warm := it / 10
		var t0 time.Time
		if err := c.Barrier(); err != nil {
			return err
		}
		a, bb := b.a[:n], b.b[:n]
		var ps []*mpi.Persistent
		if persistent && r < 2*pairs {
			ps = make([]*mpi.Persistent, W)
			for w := range ps {
				var err error
				if r < pairs {
					ps[w], err = mpi.SendInit(c, a, r+pairs, 2)
				} else {
					ps[w], err = mpi.RecvInit(c, bb, r-pairs, 2)
				}
				if err != nil {
					return err
				}
				reqs[w] = ps[w].Request()
			}
		}
		for i := 0; i < it+warm && r < 2*pairs; i++ {
			if i == warm {
				t0 = time.Now()
			}
			switch {
			case ps != nil:
				if err := mpi.StartAll(ps...); err != nil {
					return err
				}
			case r < pairs:
				for w := range reqs {
					reqs[w] = mpi.Isend(c, a, r+pairs, 2)
				}
			default:
				for w := range reqs {
					reqs[w] = mpi.IrecvInto(&slots[w], c, bb, r-pairs, 2)
				}
			}
			if r < pairs {
				if err := mpi.WaitAllInto(ctx, st, reqs...); err != nil {
					return err
				}
				if _, err := mpi.Recv(c, ack, r+pairs, 3); err != nil {
					return err
				}
			} else {
				if err := mpi.WaitAllInto(ctx, st, reqs...); err != nil {
					return err
				}
				if err := mpi.Send(c, ack, r-pairs, 3); err != nil {
					return err
				}
			}
		}
		rate[0] = 0
		if r < pairs {
			rate[0] = float64(W*it) / time.Since(t0).Seconds() / 1e6
		}
		if err := mpi.Reduce(c, rate, sum, mpi.Sum, 0); err != nil {
			return err
		}
		for _, p := range ps {
			p.Free()
		}
		b.emit(name, n, sum[0])
	}
	return nil
}
