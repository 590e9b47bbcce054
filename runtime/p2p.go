package mpi

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"unsafe"
)

// Number is the element type of typed buffers. Buffers travel as their
// in-memory bytes (no encoding), so all ranks must share byte order, which
// every platform Go runs MPI jobs on does (little endian).
type Number interface {
	~int | ~int8 | ~int16 | ~int32 | ~int64 |
		~uint | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~uintptr |
		~float32 | ~float64 | ~complex64 | ~complex128
}

// asBytes reinterprets buf's memory as bytes, without copying.
func asBytes[T Number](buf []T) []byte {
	if len(buf) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(buf))), len(buf)*int(unsafe.Sizeof(buf[0])))
}

func sizeOf[T Number]() int {
	var z T
	return int(unsafe.Sizeof(z))
}

// Send sends buf to rank dest of c with tag, and returns when buf may be
// reused: at once for small messages, after the receiver took the data for
// large ones (rendezvous).
func Send[T Number](c *Comm, buf []T, dest, tag int) error {
	if err := checkTag(tag, false); err != nil {
		return err
	}
	_, err := c.isendWait(c.ctx, asBytes(buf), dest, tag, true).Wait(context.Background())
	return err
}

// Isend starts a send; buf must not change until the request completes.
// Errors (a bad rank, a failed peer) are reported by the request.
func Isend[T Number](c *Comm, buf []T, dest, tag int) *Request {
	if err := checkTag(tag, false); err != nil {
		return doneRequest(err)
	}
	return c.isend(c.ctx, asBytes(buf), dest, tag)
}

// Recv receives into buf from rank src (or AnySource) with tag (or AnyTag).
// A longer message fills buf and returns an error wrapping ErrTruncate; one
// that is not a whole number of elements of T, an error wrapping ErrArg
// (Status.Count Undefined).
func Recv[T Number](c *Comm, buf []T, src, tag int) (Status, error) {
	if err := checkTag(tag, true); err != nil {
		return Status{}, err
	}
	if st, err, ok := c.recvDirect(c.ctx, asBytes(buf), sizeOf[T](), src, tag); ok {
		return st, err
	}
	// A blocking receive's request is never seen by the caller, so it is
	// recycled: at a million messages a second, allocating one each time
	// made the garbage collector run every few milliseconds.
	rr := recvReqs.Get().(*recvReq)
	st, err := c.irecvInto(rr, c.ctx, asBytes(buf), sizeOf[T](), src, tag, false).Wait(context.Background())
	if rr.req.isDone() && !rr.req.asked() && !rr.op.shared {
		*rr = recvReq{}
		recvReqs.Put(rr)
	}
	return st, err
}

var recvReqs = sync.Pool{New: func() any { return new(recvReq) }}

// Irecv starts a receive into buf. Errors are reported by the request.
func Irecv[T Number](c *Comm, buf []T, src, tag int) *Request {
	if err := checkTag(tag, true); err != nil {
		return doneRequest(err)
	}
	if r := c.irecvNow(c.ctx, asBytes(buf), sizeOf[T](), src, tag); r != nil {
		return r // the message was there already (irecvnow.go)
	}
	return c.irecv(c.ctx, asBytes(buf), sizeOf[T](), src, tag, false)
}

// Sendrecv sends sendbuf to dest and receives into recvbuf from src at the
// same time, so exchanges between pairs cannot deadlock. The buffers must
// not overlap (an error wrapping ErrArg): use SendrecvReplace.
func Sendrecv[T Number](c *Comm, sendbuf []T, dest, sendtag int, recvbuf []T, src, recvtag int) (Status, error) {
	if err := checkTag(sendtag, false); err != nil {
		return Status{}, err
	}
	if err := checkTag(recvtag, true); err != nil {
		return Status{}, err
	}
	if overlaps(asBytes(sendbuf), asBytes(recvbuf)) {
		return Status{}, errAliased()
	}
	return c.sendRecvWait(c.ctx, asBytes(sendbuf), dest, sendtag, asBytes(recvbuf), sizeOf[T](), src, recvtag)
}

// Probe blocks until a message matching (src, tag) can be received and
// describes it without receiving it; Count is in elements of T (Undefined
// if the message is not a whole number of them).
func Probe[T Number](c *Comm, src, tag int) (Status, error) {
	return ProbeContext[T](context.Background(), c, src, tag)
}

// ProbeContext is Probe that gives up when ctx ends.
func ProbeContext[T Number](ctx context.Context, c *Comm, src, tag int) (Status, error) {
	for {
		ok, st, ch, err := c.iprobe(src, tag, sizeOf[T]())
		if ok || err != nil {
			return st, err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return Status{}, fmt.Errorf("mpi: probe: %w", ctx.Err())
		}
	}
}

// Iprobe reports whether a message matching (src, tag) can be received now.
func Iprobe[T Number](c *Comm, src, tag int) (bool, Status, error) {
	ok, st, _, err := c.iprobe(src, tag, sizeOf[T]())
	return ok, st, err
}

func (c *Comm) iprobe(src, tag, elem int) (bool, Status, <-chan struct{}, error) {
	if err := checkTag(tag, true); err != nil {
		return false, Status{}, nil, err
	}
	op, err := c.newRecvOp(c.ctx, nil, elem, src, tag)
	if err != nil {
		if err == errProcNull {
			return true, procNullStatus, nil, nil
		}
		return false, Status{}, nil, err
	}
	m, ch, err := c.p.eng.probe(op)
	if err != nil || m == nil {
		return false, Status{}, ch, err
	}
	n := len(m.data)
	if m.rts {
		n = m.length
	}
	return true, Status{Source: m.src, Tag: m.tag, Count: countOf(n, elem), Bytes: n}, nil, nil
}

func checkTag(tag int, wild bool) error {
	if (tag < 0 && !(wild && tag == AnyTag)) || tag > math.MaxInt32 {
		return fmt.Errorf("%w: %d", ErrTag, tag)
	}
	return nil
}

// isend sends data on context ctx. Collectives (odd contexts) wait for
// their sends right away.
func (c *Comm) isend(ctx uint32, data []byte, dest, tag int) *Request {
	return c.isendWait(ctx, data, dest, tag, ctx&1 == 1)
}

// isendWait is isend; waits says the caller is about to wait for the
// request (see flagWait).
func (c *Comm) isendWait(ctx uint32, data []byte, dest, tag int, waits bool) *Request {
	return c.isendInto(nil, ctx, data, dest, tag, waits)
}

// isendInto is isendWait with the request the caller owns (a persistent
// send's), pending and seen by no one else yet, or nil for a new one (or
// a shared completed one).
func (c *Comm) isendInto(into *Request, ctx uint32, data []byte, dest, tag int, waits bool) *Request {
	p := c.p
	if err := c.errUsable(); err != nil {
		return doneInto(into, err)
	}
	if dest < 0 || dest >= len(c.group) {
		if dest == ProcNull {
			return doneInto(into, nil)
		}
		return doneInto(into, fmt.Errorf("%w: destination %d (communicator of %d)", ErrRank, dest, len(c.group)))
	}
	w := c.group[dest]
	if w == p.rank {
		m := &message{ctx: ctx, src: c.rank, tag: tag, srcWorld: w, data: append([]byte(nil), data...)}
		if op := p.eng.arrive(m); op != nil {
			p.deliver(op, m.src, m.tag, m.data)
		}
		return doneInto(into, nil)
	}
	pe := p.peers[w]
	h := header{Ctx: ctx, Src: int32(c.rank), Tag: int32(tag), Len: uint64(len(data))}
	if sl := pe.shmL.Load(); sl != nil && !pe.dead.Load() {
		return p.isendShm(into, sl, h, data, waits)
	}
	l, err := p.getLink(p.ctx, pe)
	if err != nil {
		return doneInto(into, err)
	}
	if sl, ok := l.(*shmLink); ok {
		return p.isendShm(into, sl, h, data, waits)
	}
	req := into
	if req == nil {
		req = newRequest()
	}
	if len(data) <= p.cfg.EagerLimit {
		h.Type = frameEager
		l.send(&outFrame{h: h, payload: data, done: func(err error) { req.complete(Status{}, err) }})
		return req
	}
	h.Type = frameRTS
	h.ID = p.reqID.Add(1)
	if err := pe.addSend(h.ID, &sendOp{req: req, payload: data, ctx: h.Ctx}, &p.eng.fams); err != nil {
		return doneInto(into, err)
	}
	l.send(&outFrame{h: h, done: func(err error) {
		if err != nil {
			pe.takeSend(h.ID)
			req.complete(Status{}, err)
		}
	}})
	return req
}

// reqDone is the request of every send that finished at once: it is
// complete and carries nothing, so one can be shared.
var reqDone = doneRequest(nil)

// doneInto completes the caller's request into with err, or returns a
// completed request when there is none.
func doneInto(into *Request, err error) *Request {
	if into != nil {
		into.complete(Status{}, err)
		return into
	}
	if err == nil {
		return reqDone
	}
	return doneRequest(err)
}

// isendShm sends over shared memory from the calling goroutine: an eager
// message is in the peer's ring when this returns (no allocation, no
// goroutine hop); a long one sends its RTS the same way, so frames enter
// the ring in send order (MPI's non-overtaking rule). into is as for
// isendInto.
func (p *proc) isendShm(into *Request, l *shmLink, h header, data []byte, waits bool) *Request {
	if len(data) <= l.eagerLimit() {
		h.Type = frameEager
		err := l.sendNow(&h, data)
		if into != nil {
			into.completeOwned(Status{}, err)
			return into
		}
		if err != nil {
			return doneRequest(err)
		}
		return reqDone
	}
	req := into
	if req == nil {
		req = newRequest()
	}
	req.link = l
	h.ID = p.reqID.Add(1)
	if l.cmaOn() {
		l.sendCMA(h, data, req, waits)
		return req
	}
	h.Type = frameRTS
	if err := l.pe.addSend(h.ID, &sendOp{req: req, payload: data, ctx: h.Ctx}, &p.eng.fams); err != nil {
		req.complete(Status{}, err)
		return req
	}
	if err := l.sendNow(&h, nil); err != nil {
		l.pe.takeSend(h.ID)
		req.complete(Status{}, err)
	}
	return req
}

// cmaOn says whether rendezvous sends to l's peer offer CMA.
func (l *shmLink) cmaOn() bool { return cmaSupported && !l.p.cfg.NoCMA && !l.noCMA.Load() }

// eagerLimit is the largest message sent eagerly to l's peer.
func (l *shmLink) eagerLimit() int {
	if l.cmaOn() {
		return l.p.cfg.ShmEagerLimit
	}
	return l.p.cfg.EagerLimit
}

func (c *Comm) newRecvOp(ctx uint32, buf []byte, elem, src, tag int) (*recvOp, error) {
	op := new(recvOp)
	return op, c.initRecvOp(op, ctx, buf, elem, src, tag)
}

// initRecvOp fills in op, which must be zero (new, or reset before reuse):
// the fields are stored one by one, since assigning a whole struct literal
// copied all of it through the write barrier's bulk path while the
// garbage collector ran (most of the time, at millions of receives a
// second), a sizeable part of posting a receive.
func (c *Comm) initRecvOp(op *recvOp, ctx uint32, buf []byte, elem, src, tag int) error {
	if err := c.errUsable(); err != nil {
		return err
	}
	op.ctx, op.src, op.tag, op.srcWorld, op.elem = ctx, src, tag, -1, elem
	op.comm, op.buf = c, buf
	if src != AnySource {
		if src < 0 || src >= len(c.group) {
			if src == ProcNull {
				return errProcNull
			}
			return fmt.Errorf("%w: source %d (communicator of %d)", ErrRank, src, len(c.group))
		}
		op.srcWorld = c.group[src]
		c.p.watch(op.srcWorld)
	}
	return nil
}

// recvReq is a receive's request and operation in one allocation.
type recvReq struct {
	req Request
	op  recvOp
}

// irecv posts a receive on context ctx.
func (c *Comm) irecv(ctx uint32, buf []byte, elem, src, tag int, alloc bool) *Request {
	return c.irecvInto(newRecvReq(), ctx, buf, elem, src, tag, alloc)
}

func (c *Comm) irecvInto(rr *recvReq, ctx uint32, buf []byte, elem, src, tag int, alloc bool) *Request {
	return c.irecvOp(&rr.req, &rr.op, ctx, buf, elem, src, tag, alloc)
}

// irecvOp posts a receive whose request and operation are req and op
// (zero, or reset for reuse: RecvSlot).
func (c *Comm) irecvOp(req *Request, op *recvOp, ctx uint32, buf []byte, elem, src, tag int, alloc bool) *Request {
	if err := c.initRecvOp(op, ctx, buf, elem, src, tag); err != nil {
		failInit(req, err)
		return req
	}
	op.alloc = alloc
	return c.postOp(req, op)
}

// failInit completes req with initRecvOp's error (ProcNull: at once, no
// error).
func failInit(req *Request, err error) {
	if err == errProcNull {
		req.complete(procNullStatus, nil)
	} else {
		req.complete(Status{}, err)
	}
}

// postOp posts op, filled in by initRecvOp, as req's operation.
func (c *Comm) postOp(req *Request, op *recvOp) *Request {
	if op.req != req { // a reused slot's is already: spare the write barrier
		op.req = req
	}
	req.op = op
	m, err := c.p.eng.post(op)
	if err != nil {
		req.complete(Status{}, err)
	} else if m != nil {
		c.p.matched(op, m)
	}
	return req
}

// matched finishes a receive that matched an unexpected message.
func (p *proc) matched(op *recvOp, m *message) {
	if !m.rts {
		p.deliver(op, m.src, m.tag, m.data)
		return
	}
	p.acceptRTS(op, m, true)
}

// acceptRTS answers a matched rendezvous: over shared memory with CMA it
// reads the sender's buffer directly and answers FIN; otherwise it answers
// CTS and DATA then lands in op's buffer. direct says the caller is not a
// link's receiving goroutine, so it may write to a ring itself.
func (p *proc) acceptRTS(op *recvOp, m *message, direct bool) {
	pe, src, tag, id, ctx := m.pe, m.src, m.tag, m.id, m.ctx
	op.src, op.tag = src, tag // from now on: the matched envelope
	if sl, ok := pe.current().(*shmLink); ok && m.cma && p.readCMA(op, m, sl, !direct) {
		return
	}
	l := pe.current()
	if l == nil {
		op.req.complete(Status{}, &PeerError{Rank: pe.rank, Err: errors.New("no connection")})
		return
	}
	if err := pe.addRdv(id, op); err != nil { // DATA finds it there
		op.req.complete(Status{}, err)
		return
	}
	l.send(&outFrame{h: header{Type: frameCTS, Ctx: ctx, Src: int32(src), ID: id}})
}

// deliver completes op with an eager message's data.
func (p *proc) deliver(op *recvOp, src, tag int, data []byte) {
	if op.alloc {
		op.req.data = data
		op.req.complete(Status{Source: src, Tag: tag, Count: len(data), Bytes: len(data)}, nil)
		return
	}
	n := copy(op.buf, data)
	st := recvStatus(op, src, tag, n)
	op.req.complete(st, recvErr(op, st, len(data)))
}

// recvStatus is the Status of a receive of which n bytes landed in
// op.buf: Count Undefined when they are not a whole number of elements
// (as MPI_Get_count's MPI_UNDEFINED; recvErr makes it an error).
func recvStatus(op *recvOp, src, tag, n int) Status {
	c := n
	if op.elem != 1 { // bytes need no division (tens of cycles a message)
		if c = n / op.elem; c*op.elem != n {
			c = Undefined
		}
	}
	return Status{Source: src, Tag: tag, Count: c, Bytes: n}
}

// recvErr is the error of a receive with status st of a msg-byte message
// into op.buf, or nil: ErrTruncate's when the message was longer than the
// buffer, errPartial's when Count is Undefined. The check is inlined; the
// error is made out of line (every receive completes through here).
func recvErr(op *recvOp, st Status, msg int) error {
	if msg > len(op.buf) || st.Count < 0 {
		return recvFailed(op, st, msg)
	}
	return nil
}

func recvFailed(op *recvOp, st Status, msg int) error {
	if msg > len(op.buf) {
		return errTruncated(msg, len(op.buf), st.Source, st.Tag)
	}
	return errPartial(st.Bytes, op.elem, st.Source, st.Tag)
}

// countOf is a k-byte message's count of elem-byte elements, Undefined if
// it is not a whole number of them.
func countOf(k, elem int) int {
	if k%elem != 0 {
		return Undefined
	}
	return k / elem
}

// errPartial is the error of a k-byte message from src with tag received
// into elem-byte elements it does not fill a whole number of (the sender
// sent another type): its bytes were delivered, the last element partly.
func errPartial(k, elem, src, tag int) error {
	return fmt.Errorf("%w: %d-byte message from rank %d (tag %d) is not a whole number of %d-byte elements of the receive buffer", ErrArg, k, src, tag, elem)
}

// truncErr is ErrTruncate's error for a msg-byte message from rank src
// with tag into a buf-byte buffer, or nil. The check is inlined; the error
// is made out of line.
func truncErr(msg, buf, src, tag int) error {
	if msg > buf {
		return errTruncated(msg, buf, src, tag)
	}
	return nil
}

// errTruncated names the message's source and tag, when known (src >= 0).
func errTruncated(msg, buf, src, tag int) error {
	if src < 0 {
		return fmt.Errorf("%w: %d-byte message, %d-byte buffer", ErrTruncate, msg, buf)
	}
	return fmt.Errorf("%w: %d-byte message from rank %d (tag %d), %d-byte buffer", ErrTruncate, msg, src, tag, buf)
}

// dispatch handles one incoming frame from pe; r yields its payload.
// A returned error drops the link.
func (p *proc) dispatch(pe *peer, l link, h header, r *bufio.Reader) error {
	src, tag := int(h.Src), int(h.Tag)
	switch h.Type {
	case frameEager:
		if op := p.eng.takePosted(h.Ctx, src, tag); op != nil {
			return p.readInto(op, pe, src, tag, int(h.Len), r)
		}
		data := make([]byte, h.Len)
		if _, err := io.ReadFull(r, data); err != nil {
			return err
		}
		m := &message{ctx: h.Ctx, src: src, tag: tag, srcWorld: pe.rank, data: data}
		if op := p.eng.arrive(m); op != nil {
			p.deliver(op, src, tag, data)
		}
	case frameRTS:
		if h.Len > math.MaxInt {
			return errFrame
		}
		m := &message{ctx: h.Ctx, src: src, tag: tag, srcWorld: pe.rank, rts: true, length: int(h.Len), id: h.ID, pe: pe}
		if op := p.eng.arrive(m); op != nil {
			p.acceptRTS(op, m, false)
		}
	case frameCTS:
		s := pe.takeSend(h.ID)
		if s == nil {
			return fmt.Errorf("%w: cts for unknown id %d", errFrame, h.ID)
		}
		streamData(l, h.Ctx, h.ID, s)
	case frameData:
		pe.mu.Lock()
		op := pe.rdv[h.ID]
		delete(pe.rdv, h.ID)
		pe.mu.Unlock()
		if op == nil {
			return fmt.Errorf("%w: data for unknown id %d", errFrame, h.ID)
		}
		return p.readInto(op, pe, op.src, op.tag, int(h.Len), r)
	case framePut, framePutDone:
		return fmt.Errorf("%w: type %d is for shared memory only", errFrame, h.Type)
	}
	return nil
}

// readInto reads an n-byte payload straight into op's buffer and
// completes op; bytes beyond the buffer are discarded (truncation).
func (p *proc) readInto(op *recvOp, pe *peer, src, tag, n int, r *bufio.Reader) error {
	if op.alloc {
		data := make([]byte, n)
		if _, err := io.ReadFull(r, data); err != nil {
			op.req.complete(Status{}, &PeerError{Rank: pe.rank, Err: err})
			return err
		}
		p.deliver(op, src, tag, data)
		return nil
	}
	k := min(n, len(op.buf))
	if _, err := io.ReadFull(r, op.buf[:k]); err != nil {
		op.req.complete(Status{}, &PeerError{Rank: pe.rank, Err: err})
		return err
	}
	if n > k {
		if _, err := r.Discard(n - k); err != nil {
			op.req.complete(Status{}, &PeerError{Rank: pe.rank, Err: err})
			return err
		}
	}
	st := recvStatus(op, src, tag, k)
	op.req.complete(st, recvErr(op, st, n))
	return nil
}
