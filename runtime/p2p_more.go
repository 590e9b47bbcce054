package mpi

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"
)

// overlaps reports whether two byte slices share memory.
func overlaps(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	pa, pb := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return pa < pb+uintptr(len(b)) && pb < pa+uintptr(len(a))
}

// errAliased: Sendrecv's buffers share memory, so the message received
// would overwrite the one being sent (MPI forbids it; it used to corrupt
// data silently).
func errAliased() error {
	return fmt.Errorf("%w: Sendrecv's send and receive buffers overlap (use SendrecvReplace)", ErrArg)
}

// SendrecvReplace sends buf to dest and replaces its contents with the
// message received from src (MPI_Sendrecv_replace). A shorter message
// fills buf's first Status.Count elements; a longer one is an error
// wrapping ErrTruncate. The outgoing data is copied first, so buf may be
// received into while the send is still in flight.
func SendrecvReplace[T Number](c *Comm, buf []T, dest, sendtag, src, recvtag int) (Status, error) {
	out := append([]T(nil), buf...)
	return Sendrecv(c, out, dest, sendtag, buf, src, recvtag)
}

// errProcNull is initRecvOp's answer for the source ProcNull: not an
// error for the caller, the receive completes at once (irecvOp).
var errProcNull = errors.New("mpi: source is ProcNull")

// procNullStatus is the status of a receive or probe from ProcNull.
var procNullStatus = Status{Source: ProcNull, Tag: AnyTag}

// RecvContext is Recv that gives up when ctx ends: the posted receive is
// withdrawn and the error wraps ctx.Err(). A receive that had already
// matched a message when ctx ended completes normally (buf holds the
// message), since its data may be arriving in buf.
func RecvContext[T Number](ctx context.Context, c *Comm, buf []T, src, tag int) (Status, error) {
	if err := checkTag(tag, true); err != nil {
		return Status{}, err
	}
	if ctx.Done() == nil {
		return Recv(c, buf, src, tag)
	}
	if err := ctx.Err(); err != nil {
		return Status{}, fmt.Errorf("mpi: recv: %w", err)
	}
	r := c.irecv(c.ctx, asBytes(buf), sizeOf[T](), src, tag, false)
	if _, err := r.Wait(ctx); err != nil && r.Cancel() {
		return Status{}, fmt.Errorf("mpi: recv: %w", ctx.Err())
	}
	// Done, or matched before the cancel: its result, once complete.
	return r.Wait(context.Background())
}

// Ssend is a synchronous Send: it returns once the receiver has matched
// the message with a receive (and taken its data), whatever its size. A
// message to the calling rank itself is sent as by Send.
func Ssend[T Number](c *Comm, buf []T, dest, tag int) error {
	_, err := Issend(c, buf, dest, tag).Wait(context.Background())
	return err
}

// Issend starts a synchronous send: the request completes once the
// receiver matched the message. buf must not change until then.
func Issend[T Number](c *Comm, buf []T, dest, tag int) *Request {
	if err := checkTag(tag, false); err != nil {
		return doneRequest(err)
	}
	return c.isendSync(asBytes(buf), dest, tag)
}

// isendSync sends data by rendezvous (RTS, CTS, DATA) whatever its size:
// the receiver answers CTS only once a receive matched the RTS, so the
// request's completion (DATA written) follows the match.
func (c *Comm) isendSync(data []byte, dest, tag int) *Request {
	p := c.p
	// errUsable: a freed communicator's id may be a later one's, whose
	// receives must not see this message.
	if err := c.errUsable(); err != nil {
		return doneRequest(err)
	}
	if dest < 0 || dest >= len(c.group) || c.group[dest] == p.rank {
		return c.isendWait(c.ctx, data, dest, tag, true) // ProcNull, errors, self
	}
	pe := p.peers[c.group[dest]]
	h := header{Type: frameRTS, Ctx: c.ctx, Src: int32(c.rank), Tag: int32(tag), Len: uint64(len(data)), ID: p.reqID.Add(1)}
	req := newRequest()
	if err := pe.addSend(h.ID, &sendOp{req: req, payload: data, ctx: h.Ctx}, &p.eng.fams); err != nil {
		return doneRequest(err)
	}
	viaShm := func(sl *shmLink) *Request {
		req.link = sl
		if err := sl.sendNow(&h, nil); err != nil {
			pe.takeSend(h.ID)
			req.complete(Status{}, err)
		}
		return req
	}
	if sl := pe.shmL.Load(); sl != nil && !pe.dead.Load() {
		return viaShm(sl)
	}
	l, err := p.getLink(p.ctx, pe)
	if err != nil {
		pe.takeSend(h.ID)
		return doneRequest(err)
	}
	if sl, ok := l.(*shmLink); ok {
		return viaShm(sl)
	}
	l.send(&outFrame{h: h, done: func(err error) {
		if err != nil {
			pe.takeSend(h.ID)
			req.complete(Status{}, err)
		}
	}})
	return req
}

// Message is a message taken from matching by Mprobe or Improbe: no other
// receive or probe can see it; only Mrecv receives it, once.
type Message struct {
	c    *Comm
	m    *message // nil for ProcNull
	done atomic.Bool
}

// Mprobe blocks until a message matching (src, tag) arrives, removes it
// from matching and returns it with its Status (Count in elements of T).
// Unlike Probe followed by Recv, no other goroutine's receive can take
// the message in between.
func Mprobe[T Number](c *Comm, src, tag int) (*Message, Status, error) {
	return MprobeContext[T](context.Background(), c, src, tag)
}

// MprobeContext is Mprobe that gives up when ctx ends.
func MprobeContext[T Number](ctx context.Context, c *Comm, src, tag int) (*Message, Status, error) {
	for {
		msg, st, ch, err := c.mprobe(src, tag, sizeOf[T]())
		if msg != nil || err != nil {
			return msg, st, err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, Status{}, fmt.Errorf("mpi: probe: %w", ctx.Err())
		}
	}
}

// Improbe is Mprobe that does not block: msg is nil when no message
// matches now.
func Improbe[T Number](c *Comm, src, tag int) (*Message, Status, error) {
	msg, st, _, err := c.mprobe(src, tag, sizeOf[T]())
	return msg, st, err
}

func (c *Comm) mprobe(src, tag, elem int) (*Message, Status, <-chan struct{}, error) {
	if err := checkTag(tag, true); err != nil {
		return nil, Status{}, nil, err
	}
	op, err := c.newRecvOp(c.ctx, nil, elem, src, tag)
	if err == errProcNull {
		return &Message{c: c}, procNullStatus, nil, nil
	}
	if err != nil {
		return nil, Status{}, nil, err
	}
	m, ch, err := c.p.eng.takeUnexpected(op)
	if err != nil || m == nil {
		return nil, Status{}, ch, err
	}
	n := len(m.data)
	if m.rts {
		n = m.length
	}
	return &Message{c: c, m: m}, Status{Source: m.src, Tag: m.tag, Count: countOf(n, elem), Bytes: n}, nil, nil
}

// Mrecv receives a message returned by Mprobe into buf (a longer message
// fills buf and returns an error wrapping ErrTruncate).
func Mrecv[T Number](msg *Message, buf []T) (Status, error) {
	if msg == nil || msg.c == nil {
		return Status{}, fmt.Errorf("%w: nil message", ErrArg)
	}
	if msg.done.Swap(true) {
		return Status{}, fmt.Errorf("%w: message already received", ErrArg)
	}
	m, c := msg.m, msg.c
	if m == nil {
		return procNullStatus, nil
	}
	msg.m = nil
	rr := new(recvReq)
	op, req := &rr.op, &rr.req
	*op = recvOp{ctx: m.ctx, src: m.src, tag: m.tag, srcWorld: m.srcWorld, comm: c, buf: asBytes(buf), elem: sizeOf[T](), req: req}
	req.op = op
	c.p.matched(op, m)
	return req.Wait(context.Background())
}

// takeUnexpected removes and returns the first unexpected message
// matching r; when there is none it answers as probe does.
func (e *engine) takeUnexpected(r *recvOp) (*message, <-chan struct{}, error) {
	return e.findUnexpected(r, true)
}
