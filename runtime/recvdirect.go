package mpi

import (
	"context"
	"time"
)

// A blocking Recv from a same-host peer can skip the matching engine: the
// calling goroutine takes the peer's ring (as a helper does) and, when the
// engine holds neither a posted receive nor an unexpected message, keeps
// its receive to itself and matches each frame it reads against it before
// the engine sees the frame. That is MPI's matching order still: no
// earlier receive exists that could claim the frame, no message already
// received can match this receive, and frames from this peer reach the
// engine only through the ring, which the caller holds. A receive posted
// by another goroutine meanwhile is later than this one, so it loses a
// frame both match, as it would in the queue. Frames that do not match go
// to the engine as usual.
//
// It saves a blocking receive the engine's lock twice (post and match),
// the request's atomics, and a pooled request: a third of the Go-side cost
// of an 8-byte hop (docs/transport.md, "Third round").

// recvDirect tries the direct path. ok false means it did not apply (or
// the ring ended before a frame matched): nothing was received, and the
// caller takes the ordinary path, which also reports errors.
func (c *Comm) recvDirect(ctx uint32, buf []byte, elem, src, tag int) (st Status, err error, ok bool) {
	p := c.p
	if src < 0 || src >= len(c.group) {
		return Status{}, nil, false
	}
	w := c.group[src]
	if w == p.rank {
		return Status{}, nil, false
	}
	pe := p.peers[w]
	l := pe.shmL.Load()
	if l == nil || pe.dead.Load() || c.errUsable() != nil || !l.acquire() {
		return Status{}, nil, false
	}
	if !p.eng.empty() {
		l.release()
		return Status{}, nil, false
	}
	l.xop = recvOp{ctx: ctx, src: src, tag: tag, srcWorld: w, comm: c, buf: buf, elem: elem}
	l.xwant, l.xdone, l.xreq = &l.xop, false, nil
	l.helpUntil(directWait{l})
	l.xwant = nil   // unclaimed if the ring ended: the ordinary path takes over
	l.xop.buf = nil // drop the caller's buffer
	if l.xdone {
		st, err, l.xerr = l.xst, l.xerr, nil
		l.xn++
		l.release()
		return st, err, true
	}
	r := l.xreq
	l.xreq = nil
	if r == nil {
		l.release()
		return Status{}, nil, false
	}
	// A rendezvous matched: its request finishes like any other.
	l.helpUntil((*reqWait)(r))
	l.xn++
	l.release()
	st, err = r.Wait(context.Background())
	return st, err, true
}

// recvWait is a blocking receive on context ctx: direct when it can be,
// else posted and waited for.
func (c *Comm) recvWait(ctx uint32, buf []byte, elem, src, tag int) (Status, error) {
	if st, err, ok := c.recvDirect(ctx, buf, elem, src, tag); ok {
		return st, err
	}
	return c.irecv(ctx, buf, elem, src, tag, false).Wait(context.Background())
}

// sendRecvWait sends sb to dst with tag stag while receiving rb from src
// with tag, on context ctx. The send starts first, so that the receive can
// be direct; that is only done when waiting for the receive cannot hide
// the send's failure: the send is over (eager), or goes to the peer the
// receive waits for (whose failure ends the receive too). Otherwise the
// receive is posted, and a failed send cancels it.
func (c *Comm) sendRecvWait(ctx uint32, sb []byte, dst, stag int, rb []byte, elem, src, tag int) (Status, error) {
	sr := c.isendWait(ctx, sb, dst, stag, true)
	if sr.isDone() && sr.err != nil {
		return Status{}, sr.err
	}
	if sr.isDone() || dst == src {
		st, err, ok := c.recvDirect(ctx, rb, elem, src, tag)
		if !ok {
			st, err = c.irecv(ctx, rb, elem, src, tag, false).Wait(context.Background())
		}
		if _, serr := sr.Wait(context.Background()); err == nil {
			err = serr
		}
		return st, err
	}
	rr := c.irecv(ctx, rb, elem, src, tag, false)
	if l := rr.shmLink(); l != nil {
		l.help(rr, sr) // receive on this goroutine until either is done
	}
	if !rr.isDone() {
		select {
		case <-rr.Done():
		case <-sr.Done():
		}
	}
	if !rr.isDone() && sr.isDone() {
		if sr.err != nil && rr.Cancel() {
			// The send failed: do not wait for a reply that may never come.
			return Status{}, sr.err
		}
	}
	st, rerr := rr.Wait(context.Background())
	_, serr := sr.Wait(context.Background())
	if rerr != nil {
		return st, rerr
	}
	return st, serr
}

// directWait is the context of recvDirect's wait: it ends once a frame
// claimed the receive, or with the link. Done is the link's: the ring
// asks for it only before it sleeps.
type directWait struct{ l *shmLink }

func (directWait) Deadline() (d time.Time, ok bool) { return }
func (w directWait) Done() <-chan struct{}          { return w.l.lctx.Done() }
func (w directWait) Err() error {
	if w.l.xwant == nil || (w.l.p.eng.fams.err(w.l.xop.ctx) != nil && w.l.xop.tag != tagFree) {
		// Claimed, or a collective whose family failed (failnotice.go):
		// the ordinary path then reports the failure.
		return context.Canceled
	}
	if f := w.l.xop.comm.freed; f != nil && f.Load() {
		// Another goroutine freed the communicator: Free's failContexts
		// cannot see this receive, which is not posted; the ordinary
		// path returns ErrFreed.
		return context.Canceled
	}
	return w.l.lctx.Err()
}
func (directWait) Value(any) any { return nil }

// claimEager returns the receive an eager frame's envelope goes to: the
// direct receive if it matches, else the first matching posted one.
func (l *shmLink) claimEager(ctx uint32, src, tag int) *recvOp {
	if x := l.xwant; x != nil && x.matches(ctx, src, tag) {
		l.xwant = nil
		return x
	}
	return l.p.eng.takePosted(ctx, src, tag)
}

// claimRTS returns the receive a rendezvous goes to, as claimEager; the
// direct receive gets a request of its own, since the payload arrives
// later (or is copied by both sides).
func (l *shmLink) claimRTS(m *message) *recvOp {
	if x := l.xwant; x != nil && x.matches(m.ctx, m.src, m.tag) {
		l.xwant = nil
		if s := l.xslot; s != nil { // IrecvInto: the slot's own
			op, req := s.cur, &s.req
			*op = *x
			op.req, req.op = req, op
			l.xreq = req
			return op
		}
		rr := &recvReq{op: *x}
		rr.op.req = &rr.req
		rr.req.op = &rr.op
		l.xreq = &rr.req
		return &rr.op
	}
	return l.p.eng.arrive(m)
}

// finish completes a receive the link matched: the direct receive's
// result is kept for recvDirect, any other completes its request.
func (l *shmLink) finish(op *recvOp, st Status, err error) {
	if op == &l.xop {
		l.xst, l.xerr, l.xdone = st, err, true
		return
	}
	op.req.complete(st, err)
}
