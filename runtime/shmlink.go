package mpi

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/gompi/gompi/internal/shm"
)

// Same-host peers talk through a shared-memory ring pair (internal/shm)
// instead of TCP; see docs/transport.md. The authenticated TCP connection
// is still made first and stays open as the control and liveness path:
// its loss marks the peer dead, and the shm channel is only used when both
// sides confirmed over it that they mapped the same file.

// shmStats counts what the shared-memory transport did, for tests and
// debugging.
type shmStats struct {
	links     atomic.Int64 // shm links established
	cmaReads  atomic.Int64 // rendezvous completed by process_vm_readv
	cmaFalls  atomic.Int64 // CMA reads that failed and fell back to streaming
	streamRdv atomic.Int64 // rendezvous payloads streamed through a ring
	cmaSplits atomic.Int64 // CMA rendezvous copied half by each side
	cmaPuts   atomic.Int64 // halves this rank wrote into a receiver (PUT)
	putFalls  atomic.Int64 // PUTs this rank could not write (PUTDONE failed)
}

// shmLink is a link over a shared-memory channel, with the authenticated
// TCP connection (tcp) kept as control path.
//
// Writes: user goroutines write eager frames and RTS straight into the
// ring (shm.Chan serialises concurrent Sends with its own mutex), so the
// small-message path has no goroutine hop and no allocation. Frames that
// the receiving goroutine produces (CTS, FIN, streamed DATA) go through a
// queue and a writer goroutine instead, so that the receiver never blocks
// on a full ring: if both receivers did, neither ring would drain.
//
// Reads: one goroutine (readLoop) blocks in Recv, parses headers, runs the
// matching and copies payloads straight into posted buffers.
type shmLink struct {
	p   *proc
	pe  *peer
	ch  *shm.Chan
	tcp *tcpLink

	// lctx ends the link's blocking calls: cancelled by close, by the
	// control connection's loss, or at the shutdown deadline.
	lctx   context.Context
	cancel context.CancelFunc
	lost   atomic.Pointer[error] // why the control connection failed

	noCMA atomic.Bool // the peer could not read our memory: stream instead
	cmaOK atomic.Bool // we read the peer's memory once: it may write ours (split)
	noPut atomic.Bool // the peer could not write our memory: read it all

	frameQueue
	wdone chan struct{} // closed when the writer exits
	timer *time.Timer   // ends the link at the shutdown deadline

	// Receiving turns (see help): tok says who consumes the ring (tokFree,
	// tokReader: readLoop, tokHelper: a waiting goroutine); want is set
	// while a helper waits for readLoop to step aside, idleCancel ends
	// readLoop's wait for the next message so that it does, and freed
	// tells the helper it has; resume wakes readLoop when a helper leaves.
	// A helper's turn while readLoop is away costs two atomic operations:
	// the CAS on tok and its release.
	tok        atomic.Int32
	want       atomic.Int32
	idleCancel atomic.Pointer[context.CancelFunc]
	resume     chan struct{}
	freed      chan struct{}
	unmap      atomic.Bool // closeRing waits for the ring to be free

	// A blocking Recv taking its message straight from the ring (see
	// recvDirect): xwant is its receive until a frame claims it, xop its
	// storage, xst/xerr/xdone the result of an eager match, xreq the
	// request of a rendezvous match.
	xwant *recvOp
	xop   recvOp
	xst   Status
	xerr  error
	xdone bool
	xreq  *Request
	xslot *RecvSlot // IrecvInto's slot: a rendezvous match uses its request
	xn    int       // direct receives done, for tests (an atomic would cost a hop 3 ns)
	// reqSlab: completed requests for irecvNow, guarded by tok.
	reqSlab []Request

	// Receiver state, owned by the holder of tok (dst runs inside Recv).
	bye   bool  // BYE received
	rxErr error // the ring failed
	hb    [headerSize]byte
	rh    header
	rop   *recvOp
	rdata []byte
	rerr  error
	desc  [putDescSize]byte // an RTS's or a PUT's descriptor
	dstFn func(int) []byte
}

func newShmLink(p *proc, pe *peer) *shmLink {
	l := &shmLink{p: p, pe: pe, frameQueue: frameQueue{kick: make(chan struct{}, 1)}, wdone: make(chan struct{}),
		resume: make(chan struct{}, 1), freed: make(chan struct{}, 1)}
	l.lctx, l.cancel = context.WithCancel(context.Background())
	l.dstFn = l.dst
	return l
}

// alive is the shm channel's liveness check: the control connection.
func (l *shmLink) alive() error {
	if e := l.lost.Load(); e != nil {
		return *e
	}
	return nil
}

// controlLost is called when the TCP control connection fails: the peer
// is gone, so wake and end every blocked call on the channel. The ring
// stays open: frames the peer completed before it died are still in it
// (its Send returned), and readLoop drains them (a receive with a
// cancelled context still takes what is there) before it closes the
// ring, so they can be received as over TCP (docs/transport.md).
func (l *shmLink) controlLost(err error) {
	l.lost.CompareAndSwap(nil, &err)
	l.cancel()
}

// closeRing closes the channel: at once for its users (Shutdown wakes
// them; later calls fail without touching the memory), and unmaps it once
// no one holds the ring, since receives skip the channel's own lock
// (recvOne). A caller holding the ring leaves the unmap to its release.
func (l *shmLink) closeRing() {
	l.ch.Shutdown()
	l.unmap.Store(true)
	l.tryUnmap()
}

func (l *shmLink) tryUnmap() {
	if l.tok.CompareAndSwap(tokFree, tokClosing) {
		l.ch.Close() // waits for a Send in progress, which Shutdown ended
		l.tok.Store(tokFree)
		select {
		case l.resume <- struct{}{}: // readLoop may have waited for the ring
		default:
		}
	}
}

func (l *shmLink) failure(err error) error {
	if e := l.p.errClosed(); e != nil {
		return e
	}
	l.pe.mu.Lock()
	defer l.pe.mu.Unlock()
	if l.pe.err != nil {
		return l.pe.err
	}
	if e := l.lost.Load(); e != nil {
		err = *e
	}
	return &PeerError{Rank: l.pe.rank, Err: fmt.Errorf("shared memory: %v", err)}
}

// sendNow writes one frame into the ring from the calling goroutine. It
// blocks only while the ring is full (the peer's receiver drains it
// continuously) and fails when the peer or the link is gone.
func (l *shmLink) sendNow(h *header, payload []byte) error {
	var hb [headerSize]byte
	h.encode(hb[:])
	if err := l.ch.Send(l.lctx, hb[:], payload); err != nil {
		return l.failure(err)
	}
	return nil
}

// sendSoon writes a frame produced while receiving (CTS, FIN): straight
// into the ring if it fits now (no hand-off to the writer, whose thread may
// have to wait for a core), else through the writer, so a receiver never
// blocks on a full ring.
func (l *shmLink) sendSoon(f *outFrame) {
	var hb [headerSize]byte
	f.h.encode(hb[:])
	l.mu.Lock()
	queued := len(l.queue) > 0 || l.closed // keep order behind queued frames
	l.mu.Unlock()
	if !queued {
		if ok, err := l.ch.TrySend(hb[:], f.payload); ok || err != nil {
			if err != nil {
				err = l.failure(err)
			}
			if f.done != nil {
				f.done(err)
			}
			return
		}
	}
	l.send(f)
}

// send queues f for the writer goroutine (link interface).
func (l *shmLink) send(f *outFrame) {
	if !l.push(f) && f.done != nil {
		f.done(l.failure(shm.ErrClosed))
	}
}

func (l *shmLink) writeLoop() {
	defer l.p.wg.Done()
	defer close(l.wdone)
	for {
		select {
		case <-l.kick:
		case <-l.lctx.Done():
			l.drain(nil, l.failure(l.lctx.Err()))
			return
		}
		q := l.take()
		for i, f := range q {
			err := l.sendNow(&f.h, f.payload)
			if f.done != nil {
				f.done(err)
			}
			if err != nil {
				l.drain(q[i+1:], err)
				return
			}
			if f.h.Type == frameBye {
				l.drain(q[i+1:], l.failure(shm.ErrClosed))
				return
			}
		}
	}
}

// shutdown queues BYE behind every queued frame (frames written directly
// are already in the ring, ahead of it), says goodbye on the control
// connection too, and ends the link at deadline.
func (l *shmLink) shutdown(deadline time.Time) {
	l.mu.Lock()
	if !l.closed && !l.byeQueue {
		l.byeQueue = true
		l.queue = append(l.queue, &outFrame{h: header{Type: frameBye}})
	}
	if l.timer == nil {
		l.timer = time.AfterFunc(time.Until(deadline), l.cancel)
	}
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}
	l.tcp.shutdown(deadline)
}

// close drops the link at once.
func (l *shmLink) close() {
	l.cancel()
	l.closeRing()
	l.tcp.close()
}

// readLoop receives frames until the peer says goodbye or the channel
// fails, then records the peer's fate: finalized (BYE) or failed.
func (l *shmLink) readLoop() {
	defer l.p.wg.Done()
	bye, err := l.readFrames()
	var cause error = &PeerError{Rank: l.pe.rank, Err: ErrPeerFinalized}
	if !bye {
		if e := l.lost.Load(); e != nil {
			err = *e
		}
		cause = &PeerError{Rank: l.pe.rank, Err: fmt.Errorf("connection lost: %v", err)}
	}
	if closed := l.p.errClosed(); closed != nil {
		cause = closed
	}
	l.pe.fail(cause)
	l.p.eng.failSource(l.pe.rank, cause, bye)
	if bye {
		// Answer with our own BYE, and close the channel only once it is
		// in the ring: the peer treats a close without BYE as a failure.
		// The control connection ends on its own after its BYE (an abrupt
		// close would look like a crash to the peer).
		l.shutdown(time.Now().Add(l.p.cfg.Linger))
		select {
		case <-l.wdone:
		case <-l.lctx.Done():
		}
		l.cancel()
		l.closeRing()
	} else {
		l.close()
	}
	l.mu.Lock()
	if l.timer != nil {
		l.timer.Stop()
	}
	l.mu.Unlock()
}

// Receiving takes turns. The ring has one consumer at a time: whoever
// holds l.tok. Normally that is readLoop's goroutine, blocked in the ring.
// A goroutine that waits for a request involving this peer (Request.Wait)
// instead takes the ring over (help): it takes the token, or, while
// readLoop holds it, sets want, which tells readLoop to step aside (its
// wait for the next message ends with shm.ErrIdle), and then receives and
// dispatches frames itself until its request is done. The message thus
// goes from the ring into the waiter's buffer on the waiter's own thread,
// with no goroutine hand-off, which is what makes small-message latency
// close to the ring's own. When the helper leaves, readLoop resumes, so
// messages still progress while no one waits.

// readerSpin is readLoop's spin before it sleeps; 0 means Config.ShmSpin,
// as for helpers. (A short one was tried: readLoop then sleeps, and the
// futex wake-ups it needs cost more than its spinning does.)
const readerSpin = 0

// helperGrace is how long readLoop leaves the ring alone after the last
// helper left. While helpers keep returning within it, or take the ring
// back from readLoop within maxHelperGrace, readLoop doubles it up to
// maxHelperGrace (so a ping-pong or windowed loop wakes readLoop a quarter
// as often, and its spinning thread competes less with the ranks for the
// cores); once readLoop has received alone for maxHelperGrace, it is back
// to helperGrace. A message that arrives while no one helps waits at most
// maxHelperGrace for readLoop: that bound matters for frames the peer
// needs answered while this rank helps another link (a split rendezvous's
// PUT), so it stays short.
const (
	helperGrace    = 50 * time.Microsecond
	maxHelperGrace = 200 * time.Microsecond
)

// Who consumes the ring (shmLink.tok).
const (
	tokFree = iota
	tokReader
	tokHelper
	tokClosing // closeRing unmaps the channel
)

// helping says a helper holds the ring or waits for it.
func (l *shmLink) helping() bool { return l.tok.Load() == tokHelper || l.want.Load() != 0 }

// readFrames is readLoop's receiving loop; see dst for where payloads go.
func (l *shmLink) readFrames() (bye bool, err error) {
	grace := helperGrace
	var held time.Time // since when readLoop has had the ring, zero if not
	t := time.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	for {
		if l.helping() {
			held = time.Time{}
			select {
			case <-l.resume:
				// Let the ring rest a moment before taking it back: a
				// goroutine in a send/receive loop is usually about to
				// help again, and each take-back costs it a wake-up.
				t.Reset(grace)
				select {
				case <-t.C:
				case <-l.lctx.Done():
					t.Stop()
				}
			case <-l.lctx.Done():
				// Take the ring once more to learn how it ended.
			}
			if l.helping() && l.lctx.Err() == nil {
				// Helpers keep coming back: look less often. Each
				// look is a thread wake-up on a core the ranks use.
				grace = min(2*grace, maxHelperGrace)
				continue
			}
		}
		if !l.tok.CompareAndSwap(tokFree, tokReader) {
			// A helper has it (even after lctx ended, until its
			// receive returns): it signals resume when it leaves.
			<-l.resume
			continue
		}
		if l.bye || l.rxErr != nil {
			bye, err = l.bye, l.rxErr
			l.releaseReader()
			return bye, err
		}
		idle, cancel := context.WithCancel(l.lctx)
		// Publish cancel, then look for a waiting helper; acquire sets
		// want, then looks for cancel: one of the two sees the other.
		l.idleCancel.Store(&cancel)
		if l.want.Load() != 0 {
			cancel() // a helper came meanwhile
		}
		if held.IsZero() {
			held = time.Now()
		}
		woke := wokeWaiters.Load()
		_, err = l.recvOne(idle, readerSpin)
		l.idleCancel.Store(nil)
		cancel()
		switch {
		case err == shm.ErrIdle:
			if time.Since(held) < maxHelperGrace {
				// A helper wanted the ring back soon: we took it in a
				// gap of a loop that keeps helping (a window of
				// receives being posted), where our spinning thread
				// only competes with the ranks for the cores.
				grace = min(2*grace, maxHelperGrace)
			}
			held = time.Time{}
		case err == nil && grace != helperGrace && time.Since(held) >= maxHelperGrace:
			grace = helperGrace // no helper for a while: we are the receiver
		}
		bye = l.bye
		l.releaseReader()
		if bye {
			return true, nil
		}
		if err != nil && err != shm.ErrIdle {
			return false, err
		}
		if wokeWaiters.Load() != woke {
			runtime.Gosched() // let the goroutine this frame woke run now
		}
	}
}

func (l *shmLink) releaseReader() {
	l.tok.Store(tokFree)
	if l.unmap.Load() {
		l.tryUnmap()
	}
	if l.want.Load() != 0 {
		select {
		case l.freed <- struct{}{}:
		default:
		}
	}
}

// acquire takes the ring for a helper. It fails when another helper has
// it or is waiting for it: one helper at a time, the others wait as
// before, for the helper or readLoop to complete their requests.
func (l *shmLink) acquire() bool {
	if l.tok.CompareAndSwap(tokFree, tokHelper) {
		return true
	}
	if l.tok.Load() == tokHelper || !l.want.CompareAndSwap(0, 1) {
		return false
	}
	defer l.want.Store(0)
	for i := 0; ; i++ {
		if cancel := l.idleCancel.Load(); cancel != nil {
			(*cancel)() // harmless if readLoop has already finished with it
		}
		if l.tok.CompareAndSwap(tokFree, tokHelper) {
			return true
		}
		if l.tok.Load() == tokHelper {
			return false // another helper got in first
		}
		// readLoop notices the cancel within its spin (well under a
		// µs), so poll briefly before sleeping, which costs a wake-up.
		if i < 1000 {
			runtime.Gosched()
			continue
		}
		select {
		case <-l.freed:
		case <-time.After(time.Millisecond): // readLoop may have left for good
		}
	}
}

// release gives the ring back after acquire and lets readLoop resume.
func (l *shmLink) release() {
	l.tok.Store(tokFree)
	if l.unmap.Load() {
		l.tryUnmap()
	}
	select {
	case l.resume <- struct{}{}:
	default:
	}
}

// help receives frames on the calling goroutine until r completes (see
// above). It gives up, leaving the rest to readLoop, when the ring fails
// or says goodbye.
func (l *shmLink) help(r, also *Request) {
	if !l.acquire() {
		return
	}
	var idle context.Context = (*reqWait)(r) // no allocation
	if also != nil {
		idle = reqCtx{r, also}
	}
	// Waiting for a rendezvous send that did not say so in its RTS (an
	// Isend): tell the peer we now answer PUTs promptly (splitAt).
	announce := r.link == l
	if announce {
		l.ch.SetWord(1)
	}
	l.helpUntil(idle)
	if announce {
		l.ch.SetWord(0)
	}
	l.release()
}

// helpUntil receives and dispatches frames until idle ends, the ring
// fails or says goodbye. The caller holds the ring.
func (l *shmLink) helpUntil(idle context.Context) {
	for !l.bye && l.rxErr == nil && idle.Err() == nil {
		if _, err := l.recvOne(idle, 0); err != nil {
			break // ErrIdle: idle ended; anything else is for readLoop
		}
	}
}

// reqCtx is a context that ends when request r (or also, if set)
// completes: a helper's wait for the next message ends when its request is
// done by other means (a peer failure, a match from elsewhere,
// cancellation). Done is r's alone; also is seen by Err, which the ring
// checks while it spins and after each futex sleep (Poll), which is enough
// for its purpose (Sendrecv noticing a failed send).
type reqCtx struct{ r, also *Request }

func (reqCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c reqCtx) Done() <-chan struct{}     { return c.r.Done() }
func (c reqCtx) Err() error {
	if c.r.isDone() || (c.also != nil && c.also.isDone()) {
		return context.Canceled
	}
	return nil
}
func (reqCtx) Value(any) any { return nil }

// reqWait is reqCtx without also: a *Request seen as a context, which
// costs no allocation (the ring asks for Done only before it sleeps).
type reqWait Request

func (*reqWait) Deadline() (time.Time, bool) { return time.Time{}, false }
func (w *reqWait) Done() <-chan struct{}     { return (*Request)(w).Done() }
func (w *reqWait) Err() error {
	if (*Request)(w).isDone() {
		return context.Canceled
	}
	return nil
}
func (*reqWait) Value(any) any { return nil }

// recvOne receives and dispatches one frame. Caller holds the ring (tok). A ring
// failure is recorded in l.rxErr, a BYE in l.bye.
func (l *shmLink) recvOne(idle context.Context, spin time.Duration) (n int, err error) {
	p, pe := l.p, l.pe
	// Cleared only when set (an eager frame into a posted receive leaves
	// rdata and rerr nil): a pointer store costs a write barrier check.
	if l.rop != nil {
		l.rop = nil
	}
	if l.rdata != nil {
		l.rdata = nil
	}
	if l.rerr != nil {
		l.rerr = nil
	}
	n, err = l.ch.RecvSplitIdleExclusive(l.lctx, idle, spin, l.hb[:], l.dstFn)
	if err == shm.ErrIdle {
		return 0, err
	}
	if l.rerr != nil {
		err = l.rerr
	} else if err != nil && l.rop != nil && errors.Is(err, shm.ErrTruncated) {
		err = nil // a short user buffer: the message was consumed
	}
	if err != nil {
		if l.rop != nil {
			l.finish(l.rop, Status{}, &PeerError{Rank: pe.rank, Err: err})
		}
		l.rxErr = err
		return 0, err
	}
	h := &l.rh
	switch h.Type {
	case frameEager:
		src, tag := int(h.Src), int(h.Tag)
		if op := l.rop; op != nil {
			l.completeEager(op, src, tag, n)
			break
		}
		m := &message{ctx: h.Ctx, src: src, tag: tag, srcWorld: pe.rank, data: l.rdata}
		if op := p.eng.arrive(m); op != nil {
			p.deliver(op, src, tag, m.data)
		}
	case frameData:
		l.complete(l.rop, l.rop.src, l.rop.tag, n)
	case frameRTS:
		m := &message{ctx: h.Ctx, src: int(h.Src), tag: int(h.Tag), srcWorld: pe.rank, rts: true,
			length: int(h.Len), id: h.ID, pe: pe}
		if h.Flags&flagCMA != 0 {
			m.cma = true
			m.waits = h.Flags&flagWait != 0
			m.pid = int(binary.LittleEndian.Uint64(l.desc[:]))
			m.addr = binary.LittleEndian.Uint64(l.desc[8:])
		}
		if op := l.claimRTS(m); op != nil {
			p.acceptRTS(op, m, false)
		}
	case frameCTS:
		// The peer streams: either it asked for it, or our CMA RTS
		// could not be read (then stop offering CMA to this peer).
		s := pe.takeSend(h.ID)
		if s == nil {
			l.rxErr = fmt.Errorf("%w: cts for unknown id %d", errFrame, h.ID)
			return 0, l.rxErr
		}
		if s.cma {
			l.noCMA.Store(true)
		}
		p.shm.streamRdv.Add(1)
		streamData(l, h.Ctx, h.ID, s)
	case frameFin:
		s := pe.takeSend(h.ID)
		if s == nil {
			l.rxErr = fmt.Errorf("%w: fin for unknown id %d", errFrame, h.ID)
			return 0, l.rxErr
		}
		s.req.complete(Status{}, nil)
		runtime.KeepAlive(s.payload) // the peer has finished reading it
	case framePut:
		if err := l.put(h); err != nil {
			l.rxErr = err
			return 0, err
		}
	case framePutDone:
		if err := l.putDone(h); err != nil {
			l.rxErr = err
			return 0, err
		}
	case frameBye:
		l.bye = true
	}
	return n, nil
}

// complete finishes a receive whose n-byte payload Recv just copied into
// the buffer dst chose.
func (l *shmLink) complete(op *recvOp, src, tag, n int) {
	if op.alloc {
		l.p.deliver(op, src, tag, l.rdata)
		return
	}
	k := min(n, len(op.buf))
	st := recvStatus(op, src, tag, k)
	l.finish(op, st, recvErr(op, st, n))
}

// completeEager is complete for an eager frame's receive, which claimEager
// took for this link alone: no one else can complete it.
func (l *shmLink) completeEager(op *recvOp, src, tag, n int) {
	if op.alloc {
		l.p.deliver(op, src, tag, l.rdata)
		return
	}
	k := min(n, len(op.buf))
	st := recvStatus(op, src, tag, k)
	err := recvErr(op, st, n)
	if op == &l.xop {
		l.xst, l.xerr, l.xdone = st, err, true
		return
	}
	op.req.completeOwned(st, err)
}

// dst runs inside Recv once the header is in l.hb and the payload length
// is known: it validates the header and picks where the payload goes, the
// posted receive's own buffer whenever there is one.
func (l *shmLink) dst(n int) []byte {
	h := &l.rh
	if err := h.decode(l.hb[:], l.p.cfg.EagerLimit); err != nil {
		l.rerr = err
		return nil
	}
	switch h.Type {
	case frameEager, frameData:
		if uint64(n) != h.Len {
			l.rerr = fmt.Errorf("%w: payload %d bytes, header says %d", errFrame, n, h.Len)
			return nil
		}
		var op *recvOp
		if h.Type == frameEager {
			op = l.claimEager(h.Ctx, int(h.Src), int(h.Tag))
		} else {
			l.pe.mu.Lock()
			op = l.pe.rdv[h.ID]
			delete(l.pe.rdv, h.ID)
			l.pe.mu.Unlock()
			if op == nil {
				l.rerr = fmt.Errorf("%w: data for unknown id %d", errFrame, h.ID)
				return nil
			}
		}
		l.rop = op
		if op != nil && !op.alloc {
			return op.buf
		}
		l.rdata = make([]byte, n)
		return l.rdata
	case frameRTS:
		want := 0
		if h.Flags&flagCMA != 0 {
			want = cmaDescSize
		}
		if n != want {
			l.rerr = fmt.Errorf("%w: rts with %d extra bytes", errFrame, n)
			return nil
		}
		return l.desc[:n]
	case framePut:
		if n != putDescSize {
			l.rerr = fmt.Errorf("%w: put with %d extra bytes", errFrame, n)
			return nil
		}
		return l.desc[:n]
	default:
		if n != 0 {
			l.rerr = fmt.Errorf("%w: type %d carries no payload", errFrame, h.Type)
		}
		return nil
	}
}
