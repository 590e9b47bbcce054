package mpi

import (
	"context"
	"errors"
	"fmt"
)

// Caller-owned receive requests. Irecv returns a new *Request each time:
// the runtime cannot know when the caller drops it, so it cannot reuse it,
// and at millions of receives a second allocating one kept the garbage
// collector running (with its write barriers on) most of the time. A
// RecvSlot is the storage of one receive that the caller owns and reuses,
// as a C program reuses its MPI_Request array: a loop of windows
// (osu_mbw_mr) then allocates nothing per message.

// RecvSlot holds one receive started by IrecvInto: its request and its
// matching state. The zero value is ready for use; a slot is reused by
// calling IrecvInto on it again once its request completed. It must not be
// copied after first use.
type RecvSlot struct {
	req     Request
	op      recvOp  // the operation, unless a rendezvous may still touch it
	cur     *recvOp // the operation in use: &op, or a fresh one
	started bool
	// The envelope of the last receive posted from the slot, which passed
	// initRecvOp's checks (tag, source in range and not ProcNull, source
	// watched); vworld is the source's world rank. A window of slots
	// re-posts the same envelope over and over: IrecvInto then skips
	// those checks (the comm being freed or the process shut down is
	// still checked each time, and a failed source by the engine).
	vc                        *Comm
	vsrc, vtag, velem, vworld int
}

// errSlotBusy: IrecvInto on a slot whose receive is still pending.
func errSlotBusy() error {
	return fmt.Errorf("%w: IrecvInto on a slot whose receive is still pending", ErrArg)
}

// IrecvInto is Irecv using the caller's slot: it starts a receive into buf
// and returns the slot's request, which stays valid, with its result, until
// the slot is used again. Calling IrecvInto on a slot whose request has not
// completed starts nothing and returns a separate request that failed with
// an error wrapping ErrArg. Otherwise it behaves exactly as Irecv (errors
// are reported by the request).
func IrecvInto[T Number](s *RecvSlot, c *Comm, buf []T, src, tag int) *Request {
	if !s.reset() {
		return doneRequest(errSlotBusy())
	}
	r := &s.req
	b, elem := asBytes(buf), sizeOf[T]()
	if s.vc == c && s.vsrc == src && s.vtag == tag && s.velem == elem {
		// Posted from this slot before: checked already.
		if c.irecvNowInto(s, c.ctx, b, elem, src, tag) {
			return r
		}
		c.repostOp(r, s.cur, b, elem, src, tag, s.vworld)
		return r
	}
	if err := checkTag(tag, true); err != nil {
		r.complete(Status{}, err)
		return r
	}
	if c.irecvNowInto(s, c.ctx, b, elem, src, tag) {
		return r // the message was there already (irecvnow.go)
	}
	op := s.cur
	if err := c.initRecvOp(op, c.ctx, b, elem, src, tag); err != nil {
		failInit(r, err)
		return r
	}
	s.vc, s.vsrc, s.vtag, s.velem, s.vworld = c, src, tag, elem, op.srcWorld
	c.postOp(r, op)
	return r
}

// repostOp is initRecvOp and postOp for an envelope that passed
// initRecvOp's checks before (RecvSlot): only whether c is still usable is
// checked again. world is src's world rank (-1 for AnySource).
func (c *Comm) repostOp(r *Request, op *recvOp, buf []byte, elem, src, tag, world int) {
	if err := c.errUsable(); err != nil {
		r.complete(Status{}, err)
		return
	}
	op.ctx, op.src, op.tag, op.srcWorld, op.elem = c.ctx, src, tag, world, elem
	if op.comm != c {
		op.comm = c
	}
	op.buf = buf
	c.postOp(r, op)
}

// reset makes the slot's request pending again with a clean operation. It
// fails when the slot's receive has not completed yet.
func (s *RecvSlot) reset() bool {
	r := &s.req
	if s.started && !r.isDone() {
		return false
	}
	s.started = true
	op := s.cur
	switch {
	case op == nil:
		op = &s.op
	case op.shared || op.split != nil:
		// A rendezvous: its paths may touch the operation after it
		// completed (see recvOp.shared). Leave it to them.
		op = new(recvOp)
	}
	if op.alloc {
		op.alloc = false
	}
	s.cur = op
	r.rearm()
	return true
}

// WaitAllInto is WaitAll writing the statuses into st, which is nil (the
// statuses are not wanted, as with MPI_STATUSES_IGNORE) or as long as reqs
// (an error wrapping ErrArg otherwise): a loop of windows reuses one slice
// instead of allocating one per window, as MPI_Waitall takes its array.
func WaitAllInto(ctx context.Context, st []Status, reqs ...*Request) error {
	if st != nil && len(st) != len(reqs) {
		return fmt.Errorf("%w: %d statuses for %d requests", ErrArg, len(st), len(reqs))
	}
	return waitAll(ctx, st, reqs)
}

// waitAll is WaitAll and WaitAllInto.
func waitAll(ctx context.Context, st []Status, reqs []*Request) error {
	// The last request first: waiting on a same-host peer receives on
	// this goroutine until that request is done, completing the earlier
	// ones on the way (messages match in order), in one turn on the ring
	// instead of one per request.
	for i := len(reqs) - 1; i >= 0; i-- {
		if r := reqs[i]; r != nil && !r.isDone() {
			if _, err := r.Wait(ctx); ctx.Err() != nil && err != nil && errors.Is(err, ctx.Err()) {
				return err
			}
		}
	}
	var fail *RequestError
	for i, r := range reqs {
		if r == nil {
			continue
		}
		var s Status
		var err error
		if r.isDone() { // nearly always by now: Wait is not inlined
			s, err = r.status, r.err
		} else {
			s, err = r.Wait(ctx)
		}
		if st != nil {
			st[i] = s
		}
		addFailure(&fail, i, err)
	}
	return failures(fail)
}
