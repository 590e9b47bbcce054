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
	if err := checkTag(tag, true); err != nil {
		r.complete(Status{}, err)
		return r
	}
	b := asBytes(buf)
	if c.irecvNowInto(s, c.ctx, b, sizeOf[T](), src, tag) {
		return r // the message was there already (irecvnow.go)
	}
	c.irecvOp(r, s.cur, c.ctx, b, sizeOf[T](), src, tag, false)
	return r
}

// reset makes the slot's request pending again with a clean operation. It
// fails when the slot's receive has not completed yet.
func (s *RecvSlot) reset() bool {
	r := &s.req
	if s.started {
		if !r.isDone() {
			return false
		}
		if r.asked() {
			// complete still holds mu while it closes done.
			r.mu.Lock()
			r.mu.Unlock() //lint:ignore SA2001 waiting for complete to leave is the point
		}
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
	// Only what is set is cleared: every pointer store costs a write
	// barrier while the garbage collector runs.
	r.setLocal(reqPending) // its owner saw it complete: no one else looks
	if r.done != nil {
		r.done = nil
	}
	r.status = Status{}
	if r.err != nil {
		r.err = nil
	}
	if r.data != nil {
		r.data = nil
	}
	if r.link != nil {
		r.link = nil
	}
	if r.op != nil {
		r.op = nil
	}
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
		s, err := r.Wait(ctx)
		if st != nil {
			st[i] = s
		}
		addFailure(&fail, i, err)
	}
	return failures(fail)
}
