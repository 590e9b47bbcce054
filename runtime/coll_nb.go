package mpi

import (
	"context"
	"sync"
	"sync/atomic"
)

// Non-blocking collectives and collectives bounded by a context.
//
// A non-blocking collective runs the blocking algorithm on its own
// goroutine, on a clone of the communicator: same group and context id,
// its own scratch buffers, and its own tag space (every collective tag
// shifted by a multiple of tagStride). The multiple is the collective's
// sequence number among the non-blocking collectives started on the
// communicator: every rank starts them in the same order (as MPI
// requires), so every rank picks the same tags, and messages of
// concurrent collectives on one communicator (non-blocking ones, and a
// blocking one beside them) never match each other. The clone inherits the
// communicator's host layout when it is known; otherwise it learns it
// itself, in its own tag space.
//
// WithContext returns a view of a communicator whose collectives end,
// with an error wrapping the context's, when the context ends.

// tagStride separates the tag spaces: every internal collective tag is
// below it. 2^24 sequence numbers in flight keep tags below 2^31 (the wire
// carries a non-negative int32).
const (
	tagStride = 64
	seqSpace  = 1 << 24
)

// nbState numbers the non-blocking collectives started on a communicator
// and its views, counts those still running, which Free waits for
// (MPI_Comm_free lets pending operations complete normally), and records
// whether one failed (then the other members' copies may never complete,
// so Free does not wait).
type nbState struct {
	seq     atomic.Uint32
	running sync.WaitGroup
	failed  atomic.Bool
	freeing atomic.Bool // this member entered Free (nbFailed)
}

// seq is c's non-blocking collective state, shared with its views.
func (c *Comm) seq() *nbState {
	if c.iseq == nil {
		c.iseq = new(nbState)
	}
	return c.iseq
}

// derive makes a clone of c on tag offset off and context ctx, with the
// host layout (and its sub-communicators) derived too if c knows it.
func (c *Comm) derive(off int, ctx context.Context) *Comm {
	nc := &Comm{p: c.p, ctx: c.ctx, rank: c.rank, group: c.group, index: c.index,
		tagOff: off, cctx: ctx, iseq: c.seq(), freed: c.freed, fscope: c.fscope}
	if c.inter != nil {
		nc.inter = &interState{local: c.inter.local.derive(off, ctx)}
	}
	if ns := c.node; ns != nil {
		d := &nodeState{twoLevel: ns.twoLevel, ordered: ns.ordered, nodeOf: ns.nodeOf, leaders: ns.leaders}
		sub := func(s *Comm) *Comm {
			if s == nil {
				return nil
			}
			x := &Comm{p: s.p, ctx: s.ctx, rank: s.rank, group: s.group, index: s.index,
				tagOff: off, cctx: ctx, node: flatNodes(), freed: s.freed, fscope: s.fscope}
			return x
		}
		d.node, d.leader, d.lane = sub(ns.node), sub(ns.leader), sub(ns.lane)
		nc.node = d
	}
	return nc
}

// WithContext returns a view of c whose collectives (on the view, and the
// non-blocking ones started from it) stop waiting when ctx ends and return
// an error wrapping ctx.Err(). The view is the same communicator as c:
// same ranks, same message space, same ordering rules (use c and its
// views one collective at a time, in the same order on every rank). Like
// any collective error, a context error leaves the peers of the
// abandoned collective behind and its buffers possibly still in use by
// sends in flight: treat it as fatal for the communicator (Abort, or Free
// it and carry on without it). Point-to-point operations on the view are
// not bounded by ctx (use the Context variants and Request.Wait).
func (c *Comm) WithContext(ctx context.Context) *Comm {
	return c.derive(c.tagOff, ctx)
}

// scratchPool recycles the scratch buffers of non-blocking collectives.
var scratchPool sync.Pool

// recycleScratch returns a finished collective's scratch to scratchPool
// (a variable, so a test can watch what is returned).
var recycleScratch = func(sc *[2][]uint64) { scratchPool.Put(sc) }

// start runs f on a clone of c with the next non-blocking tag space, on
// its own goroutine, and returns the request f's completion completes.
func (c *Comm) start(f func(nc *Comm) error) *Request {
	st := c.seq()
	s := st.seq.Add(1)
	st.running.Add(1)
	off := tagStride * (1 + int(s%seqSpace))
	nc := c.derive(off, c.cctx)
	if sc, ok := scratchPool.Get().(*[2][]uint64); ok {
		nc.coll.scratch = *sc
	}
	return Go(func() (Status, error) {
		defer st.running.Done()
		err := f(nc)
		if err != nil {
			st.failed.Store(true)
			if st.freeing.Load() {
				nc.leftInFree(err)
			}
		}
		sc := nc.coll.scratch
		nc.coll = collState{}
		if err == nil {
			// A collective that failed (its context ended) may have left
			// a receive that had matched still landing in its scratch:
			// reused, it would corrupt another collective's data.
			recycleScratch(&sc)
		}
		return Status{}, err
	})
}

// Ibarrier starts a barrier; the request completes when every rank has
// entered it.
func (c *Comm) Ibarrier() *Request {
	return c.start(func(nc *Comm) error { return nc.Barrier() })
}

// Ibcast starts a Bcast. Like every non-blocking collective it runs
// without further calls into the library; buf must not be touched until
// the request completes, and errors (arguments included) are the
// request's.
func Ibcast[T Number](c *Comm, buf []T, root int) *Request {
	return c.start(func(nc *Comm) error { return Bcast(nc, buf, root) })
}

// Ireduce starts a Reduce.
func Ireduce[T Number](c *Comm, sendbuf, recvbuf []T, op Op, root int) *Request {
	return c.start(func(nc *Comm) error { return Reduce(nc, sendbuf, recvbuf, op, root) })
}

// Iallreduce starts an Allreduce.
func Iallreduce[T Number](c *Comm, sendbuf, recvbuf []T, op Op) *Request {
	return c.start(func(nc *Comm) error { return Allreduce(nc, sendbuf, recvbuf, op) })
}

// IreduceScatterBlock starts a ReduceScatterBlock.
func IreduceScatterBlock[T Number](c *Comm, sendbuf, recvbuf []T, op Op) *Request {
	return c.start(func(nc *Comm) error { return ReduceScatterBlock(nc, sendbuf, recvbuf, op) })
}

// IreduceScatter starts a ReduceScatter.
func IreduceScatter[T Number](c *Comm, sendbuf, recvbuf []T, counts []int, op Op) *Request {
	return c.start(func(nc *Comm) error { return ReduceScatter(nc, sendbuf, recvbuf, counts, op) })
}

// Iscan starts a Scan.
func Iscan[T Number](c *Comm, sendbuf, recvbuf []T, op Op) *Request {
	return c.start(func(nc *Comm) error { return Scan(nc, sendbuf, recvbuf, op) })
}

// Iexscan starts an Exscan.
func Iexscan[T Number](c *Comm, sendbuf, recvbuf []T, op Op) *Request {
	return c.start(func(nc *Comm) error { return Exscan(nc, sendbuf, recvbuf, op) })
}

// Igather starts a Gather.
func Igather[T Number](c *Comm, sendbuf, recvbuf []T, root int) *Request {
	return c.start(func(nc *Comm) error { return Gather(nc, sendbuf, recvbuf, root) })
}

// Igatherv starts a Gatherv.
func Igatherv[T Number](c *Comm, sendbuf, recvbuf []T, counts, displs []int, root int) *Request {
	return c.start(func(nc *Comm) error { return Gatherv(nc, sendbuf, recvbuf, counts, displs, root) })
}

// Iscatter starts a Scatter.
func Iscatter[T Number](c *Comm, sendbuf, recvbuf []T, root int) *Request {
	return c.start(func(nc *Comm) error { return Scatter(nc, sendbuf, recvbuf, root) })
}

// Iscatterv starts a Scatterv.
func Iscatterv[T Number](c *Comm, sendbuf []T, counts, displs []int, recvbuf []T, root int) *Request {
	return c.start(func(nc *Comm) error { return Scatterv(nc, sendbuf, counts, displs, recvbuf, root) })
}

// Iallgather starts an Allgather.
func Iallgather[T Number](c *Comm, sendbuf, recvbuf []T) *Request {
	return c.start(func(nc *Comm) error { return Allgather(nc, sendbuf, recvbuf) })
}

// Iallgatherv starts an Allgatherv.
func Iallgatherv[T Number](c *Comm, sendbuf, recvbuf []T, counts, displs []int) *Request {
	return c.start(func(nc *Comm) error { return Allgatherv(nc, sendbuf, recvbuf, counts, displs) })
}

// Ialltoall starts an Alltoall.
func Ialltoall[T Number](c *Comm, sendbuf, recvbuf []T) *Request {
	return c.start(func(nc *Comm) error { return Alltoall(nc, sendbuf, recvbuf) })
}

// Ialltoallv starts an Alltoallv.
func Ialltoallv[T Number](c *Comm, sendbuf []T, sendcounts, sdispls []int, recvbuf []T, recvcounts, rdispls []int) *Request {
	return c.start(func(nc *Comm) error {
		return Alltoallv(nc, sendbuf, sendcounts, sdispls, recvbuf, recvcounts, rdispls)
	})
}
