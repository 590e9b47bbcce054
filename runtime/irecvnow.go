package mpi

import "sync/atomic"

// An Irecv from a same-host peer whose message is already in the ring
// takes it at once, the way recvDirect does for a blocking receive: when
// the engine holds neither a posted receive nor an unexpected message, the
// calling goroutine takes the ring (only if it is free: no waiting for the
// reader to step aside) and matches the frames already there against its
// receive before the engine sees them (see recvDirect for why that keeps
// MPI's matching order). The request it returns is complete and comes from
// a slab the link keeps: no posting, no matching lock, no allocation of
// its own and nothing left for Wait to do. In a window of Irecvs answering
// a window of Isends (osu_mbw_mr) most receives go this way, since the
// sender runs ahead.
//
// When no frame is there yet, or the ring is busy, nothing happened and
// the receive is posted as usual.

// irecvNowMax bounds the frames one Irecv takes from the ring while looking
// for its own (those that do not match go to the engine as unexpected).
const irecvNowMax = 64

// reqSlabSize is how many completed requests a link allocates at once.
// A request kept by the application keeps its slab alive: 64 requests of
// ~120 bytes.
const reqSlabSize = 64

// irecvNow tries the immediate path; nil means it did not apply and the
// caller posts the receive.
func (c *Comm) irecvNow(ctx uint32, buf []byte, elem, src, tag int) *Request {
	return c.irecvNowSlot(nil, ctx, buf, elem, src, tag)
}

// irecvNowInto is irecvNow into the caller's slot, whose request it
// completes (or, for a rendezvous, starts); false means it did not apply.
func (c *Comm) irecvNowInto(s *RecvSlot, ctx uint32, buf []byte, elem, src, tag int) bool {
	return c.irecvNowSlot(s, ctx, buf, elem, src, tag) != nil
}

// irecvNowSlot is irecvNow with the request in s, or from the link's slab
// when s is nil.
func (c *Comm) irecvNowSlot(s *RecvSlot, ctx uint32, buf []byte, elem, src, tag int) *Request {
	p := c.p
	// The engine first: with a window posted it is not empty, and then
	// nothing else needs looking at.
	if !p.eng.empty() || src < 0 || src >= len(c.group) {
		return nil
	}
	w := c.group[src]
	if w == p.rank {
		return nil
	}
	pe := p.peers[w]
	l := pe.shmL.Load()
	if l == nil || !l.tok.CompareAndSwap(tokFree, tokHelper) {
		return nil
	}
	// c.errUsable, not just the process's state: a receive on a freed
	// communicator whose id a later one reuses must not take that one's
	// message (the ordinary path then returns ErrFreed).
	if pe.dead.Load() || c.errUsable() != nil || !p.eng.empty() || l.bye || l.rxErr != nil || !l.ch.PendingExclusive() {
		l.release()
		return nil
	}
	l.xop = recvOp{ctx: ctx, src: src, tag: tag, srcWorld: w, comm: c, buf: buf, elem: elem}
	l.xwant, l.xdone, l.xreq, l.xslot = &l.xop, false, nil, s
	for i := 0; i < irecvNowMax && l.xwant != nil && !l.bye && l.rxErr == nil && l.ch.PendingExclusive(); i++ {
		if _, err := l.recvOne(directWait{l}, 0); err != nil {
			break
		}
	}
	l.xwant, l.xslot = nil, nil // unclaimed: the caller posts it
	l.xop.buf = nil             // drop the caller's buffer
	var r *Request
	switch {
	case l.xdone && s != nil:
		r = &s.req // pending, seen by no one else yet
		r.status, r.err = l.xst, l.xerr
		r.setLocal(reqComplete)
		l.xerr = nil
		l.xn++
	case l.xdone:
		r = l.doneReq(l.xst, l.xerr)
		l.xerr = nil
		l.xn++
	case l.xreq != nil:
		r, l.xreq = l.xreq, nil // a rendezvous: completes as any other
		l.xn++
	}
	l.release()
	return r
}

// doneReq returns a completed request from the link's slab. Caller holds
// the ring (tok), which guards the slab.
func (l *shmLink) doneReq(st Status, err error) *Request {
	if len(l.reqSlab) == 0 {
		l.reqSlab = make([]Request, reqSlabSize)
	}
	r := &l.reqSlab[0]
	l.reqSlab = l.reqSlab[1:]
	r.status, r.err = st, err
	r.setLocal(reqComplete) // not returned yet
	return r
}

// Posted receives' requests come from shared slabs too: taking one is an
// atomic add instead of an allocation (at millions of receives a second,
// allocating each kept the garbage collector busy). A request the
// application keeps alive keeps its slab (~15 KiB) alive.
type recvReqSlab struct {
	next atomic.Int32
	rrs  [reqSlabSize]recvReq
}

var rrSlab atomic.Pointer[recvReqSlab]

// newRecvReq returns a zeroed recvReq from the current slab, starting a
// new slab when it is used up.
func newRecvReq() *recvReq {
	for {
		s := rrSlab.Load()
		if s != nil {
			if i := s.next.Add(1) - 1; i < reqSlabSize {
				return &s.rrs[i]
			}
		}
		rrSlab.CompareAndSwap(s, new(recvReqSlab))
	}
}
