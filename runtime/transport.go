package mpi

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// link is a connection to one peer. A link has one goroutine that owns
// its writes (frames go out in send order) and one that reads its byte
// stream with proc.readFrames, which parses and dispatches every frame.
// tcpLink is one; shmLink (shmlink.go) is the other, for same-host peers,
// installed as peer.ln after the same authentication.
type link interface {
	// send queues f; it never blocks on the network. f.done, if set, is
	// called once with the write's result.
	send(f *outFrame)
	// shutdown queues BYE after every queued frame, half-closes, and makes
	// the reader give up at deadline.
	shutdown(deadline time.Time)
	// close drops the connection at once; queued frames fail.
	close()
}

// outFrame is one frame waiting to be written.
type outFrame struct {
	h       header
	payload []byte
	done    func(error)
}

// peer is the runtime's state for one other rank.
type peer struct {
	rank    int
	mu      sync.Mutex
	ln      link
	dialing bool
	// accepting counts connections the peer dialled that passed the
	// handshake and are being set up; while there are any, a failed dial
	// of ours only leaves its error in dialErr: the peer may have sent
	// on its connection and died since (dial refused), and what it sent
	// must still be received.
	accepting int
	dialErr   error
	ready     chan struct{} // closed once ln is set or err is set
	err       error
	sends     map[uint64]*sendOp // rendezvous sends waiting for CTS
	rdv       map[uint64]*recvOp // rendezvous receives waiting for DATA

	// Lock-free views for the shared-memory fast path (a blocking send
	// or receive must not pay for pe.mu): the shm link once installed
	// (never replaced), and whether the peer failed.
	shmL atomic.Pointer[shmLink]
	dead atomic.Bool
	// started is set once a link to the peer exists or is being made,
	// so a receive checks it without pe.mu.
	started atomic.Bool
}

type sendOp struct {
	req     *Request
	payload []byte
	cma     bool   // offered for process_vm_readv (shared-memory links)
	ctx     uint32 // its context: a failed collective family fails it (failnotice.go)
}

// addSend records s as the rendezvous send id to pe, where CTS, FIN and
// PUT find it and a failure of the peer fails it; it returns the peer's
// error instead if it already failed, or the collective family's (fs) if
// s is a send of a collective that failed (checked under pe.mu, which
// failFamilySends takes after recording the family, so no send escapes).
func (pe *peer) addSend(id uint64, s *sendOp, fs *famSet) error {
	pe.mu.Lock()
	defer pe.mu.Unlock()
	if pe.err != nil {
		return pe.err
	}
	if err := fs.err(s.ctx); err != nil {
		return err
	}
	pe.sends[id] = s
	return nil
}

// takeSend removes and returns the rendezvous send with id (nil if none).
func (pe *peer) takeSend(id uint64) *sendOp {
	pe.mu.Lock()
	defer pe.mu.Unlock()
	s := pe.sends[id]
	delete(pe.sends, id)
	return s
}

// streamData answers a CTS for s: its payload goes as one DATA frame on l,
// and the send completes when that frame is written.
func streamData(l link, ctx uint32, id uint64, s *sendOp) {
	l.send(&outFrame{h: header{Type: frameData, Ctx: ctx, Len: uint64(len(s.payload)), ID: id},
		payload: s.payload, done: func(err error) { s.req.complete(Status{}, err) }})
}

// frameQueue holds a link's frames for its writer goroutine; both link
// kinds embed it.
type frameQueue struct {
	mu       sync.Mutex
	queue    []*outFrame
	kick     chan struct{} // cap 1: the writer has work
	closed   bool          // no more frames accepted
	byeQueue bool          // BYE is queued
}

// push queues f and wakes the writer; false if the link is closed.
func (q *frameQueue) push(f *outFrame) bool {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false
	}
	q.queue = append(q.queue, f)
	q.mu.Unlock()
	select {
	case q.kick <- struct{}{}:
	default:
	}
	return true
}

// take returns the queued frames for the writer to send.
func (q *frameQueue) take() []*outFrame {
	q.mu.Lock()
	defer q.mu.Unlock()
	f := q.queue
	q.queue = nil
	return f
}

// drain stops the link accepting frames and fails rest and every frame
// still queued with err.
func (q *frameQueue) drain(rest []*outFrame, err error) {
	q.mu.Lock()
	q.closed = true
	rest = append(rest, q.queue...)
	q.queue = nil
	q.mu.Unlock()
	for _, f := range rest {
		if f.done != nil {
			f.done(err)
		}
	}
}

func newPeer(rank int) *peer {
	return &peer{rank: rank, ready: make(chan struct{}), sends: map[uint64]*sendOp{}, rdv: map[uint64]*recvOp{}}
}

func (pe *peer) current() link {
	pe.mu.Lock()
	defer pe.mu.Unlock()
	return pe.ln
}

// addRdv records op as the receive of the peer's rendezvous id, where the
// frames that finish it find it and a failure of the peer fails it; it
// returns the peer's error instead if it already failed.
func (pe *peer) addRdv(id uint64, op *recvOp) error {
	pe.mu.Lock()
	defer pe.mu.Unlock()
	if pe.err != nil {
		return pe.err
	}
	op.shared = true // referenced from rdv: not recycled (Recv)
	pe.rdv[id] = op
	return nil
}

// fail records err (first wins), wakes waiters, and fails every pending
// rendezvous with this peer.
func (pe *peer) fail(err error) {
	pe.mu.Lock()
	pe.failAndUnlock(err)
}

// failAndUnlock is fail for a caller that holds pe.mu (and decided under
// it that the peer failed).
func (pe *peer) failAndUnlock(err error) {
	pe.dead.Store(true)
	if pe.err == nil {
		pe.err = err
		if pe.ln == nil {
			close(pe.ready)
		}
	}
	err = pe.err
	sends, rdv := pe.sends, pe.rdv
	pe.sends, pe.rdv = map[uint64]*sendOp{}, map[uint64]*recvOp{}
	pe.mu.Unlock()
	for _, s := range sends {
		s.req.complete(Status{}, err)
	}
	for _, r := range rdv {
		if r.split != nil {
			pinForever(r.split.buf)
		}
		r.req.complete(Status{}, err)
	}
}

// pinned keeps the buffers of split rendezvous whose peer failed before
// its PUTDONE: the peer may still be writing into them (process_vm_writev),
// so their memory must never be reused. A failed peer is rare; the leak is
// the price of memory safety.
var pinned struct {
	sync.Mutex
	bufs [][]byte
}

func pinForever(b []byte) {
	pinned.Lock()
	pinned.bufs = append(pinned.bufs, b)
	pinned.Unlock()
}

// getLink returns the link to pe, connecting on first use.
func (p *proc) getLink(ctx context.Context, pe *peer) (link, error) {
	for {
		pe.mu.Lock()
		if pe.err != nil {
			err := pe.err
			pe.mu.Unlock()
			return nil, err
		}
		if pe.ln != nil {
			l := pe.ln
			pe.mu.Unlock()
			return l, nil
		}
		ready := pe.ready
		p.startDialLocked(pe)
		pe.mu.Unlock()
		select {
		case <-ready:
		case <-p.closing:
			return nil, p.closeErr
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// startDialLocked starts connecting to pe unless a connection is being
// made. Caller holds pe.mu.
func (p *proc) startDialLocked(pe *peer) {
	pe.started.Store(true)
	if !pe.dialing {
		pe.dialing = true
		p.wg.Add(1)
		go p.dial(pe)
	}
}

// watch makes sure a connection to world rank w exists or is being made,
// so that an operation waiting for w alone (a receive, a probe) learns of
// its death: a peer that died before anyone connected to it is found by
// the dial (a dead rank's listener refuses at once; a cut-off host times
// out after ConnectTimeout), and once connected, the link's loss fails
// the peer. Only the first call per peer takes the lock.
func (p *proc) watch(w int) {
	if w == p.rank || w < 0 || w >= len(p.peers) {
		return
	}
	pe := p.peers[w]
	if pe == nil || pe.started.Load() {
		return
	}
	pe.mu.Lock()
	if pe.err == nil && pe.ln == nil && p.errClosed() == nil {
		p.startDialLocked(pe)
	} else {
		pe.started.Store(true)
	}
	pe.mu.Unlock()
}

// attach installs a handshaken connection as pe's link, with sl (if not
// nil) as the shared-memory link it controls. Caller holds pe.mu.
func (p *proc) attachLocked(pe *peer, conn net.Conn, sl *shmLink) {
	if p.errClosed() != nil {
		conn.Close() // Finalize or Abort already went over the peers
		if sl != nil {
			sl.cancel()
			sl.closeRing()
		}
		return
	}
	l := newTCPLink(p, pe, conn)
	pe.ln = l
	if sl != nil {
		sl.tcp, l.ctl = l, sl
		pe.ln = sl
		pe.shmL.Store(sl)
		p.wg.Add(2)
		go sl.writeLoop()
		go sl.readLoop()
	}
	pe.dialing = false
	pe.started.Store(true)
	if pe.err == nil {
		close(pe.ready)
	}
	p.wg.Add(2)
	go l.writeLoop()
	go l.readLoop()
}

// Handshake (see docs/transport.md):
//
//	A→D  "GOMPI-RT1" nonceA[16]
//	D→A  "GOMPI-RT1" dRank u32 aRank u32 nonceD[16] mac(dial)[32]
//	A→D  status u8 mac(accept)[32]
//
// mac(dial) = HMAC-SHA256(secret, "dial" nonceA nonceD dRank aRank),
// mac(accept) = HMAC-SHA256(secret, "accept" nonceA nonceD dRank aRank status).
const hsMagic = "GOMPI-RT1"

const (
	hsOK      = 0 // link established
	hsDup     = 1 // refused: the other direction's connection wins
	hsRefused = 2 // refused: the acceptor considers the dialer failed or is closing
)

func hsMAC(secret []byte, label string, nA, nD []byte, d, a uint32, extra ...byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(label))
	m.Write(nA)
	m.Write(nD)
	var b [8]byte
	binary.LittleEndian.PutUint32(b[:], d)
	binary.LittleEndian.PutUint32(b[4:], a)
	m.Write(b[:])
	m.Write(extra)
	return m.Sum(nil)
}

var errAuth = errors.New("mpi: handshake failed authentication")

func (p *proc) acceptLoop() {
	defer p.wg.Done()
	for {
		conn, err := p.ln.Accept()
		if err != nil {
			select {
			case <-p.closing:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			time.Sleep(10 * time.Millisecond) // e.g. EMFILE: back off
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			if err := p.accept(conn); err != nil {
				conn.Close()
			}
		}()
	}
}

// accept runs the acceptor side of the handshake; strangers and bad
// handshakes are dropped without touching any peer state.
func (p *proc) accept(conn net.Conn) error {
	stop := context.AfterFunc(p.ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	conn.SetDeadline(time.Now().Add(p.cfg.HandshakeTimeout))
	nA := make([]byte, 16)
	rand.Read(nA)
	if _, err := conn.Write(append([]byte(hsMagic), nA...)); err != nil {
		return err
	}
	buf := make([]byte, len(hsMagic)+8+16+32)
	if _, err := io.ReadFull(conn, buf); err != nil {
		return err
	}
	if string(buf[:len(hsMagic)]) != hsMagic {
		return errAuth
	}
	b := buf[len(hsMagic):]
	d, a := binary.LittleEndian.Uint32(b), binary.LittleEndian.Uint32(b[4:])
	nD, mac := b[8:24], b[24:56]
	if !hmac.Equal(mac, hsMAC(p.secret, "dial", nA, nD, d, a)) || int(a) != p.rank || int(d) >= p.size || int(d) == p.rank {
		return errAuth
	}
	pe := p.peers[d]
	pe.mu.Lock()
	status := byte(hsOK)
	switch {
	case pe.err != nil || p.errClosed() != nil:
		status = hsRefused
	case pe.ln != nil || (pe.dialing && p.rank < int(d)):
		// One connection per pair: when both sides dial at once, the
		// lower rank's dial wins.
		status = hsDup
	}
	wasDialing := pe.dialing
	if status == hsOK {
		// This connection is being set up (shared memory is negotiated
		// without the lock): no local dial may start meanwhile.
		pe.dialing = true
		pe.accepting++
	}
	pe.mu.Unlock()
	reply := append([]byte{status}, hsMAC(p.secret, "accept", nA, nD, d, a, status)...)
	if _, err := conn.Write(reply); err != nil {
		if status == hsOK {
			pe.mu.Lock()
			p.acceptFailedAndUnlock(pe, wasDialing)
		}
		return err
	}
	if status != hsOK {
		return errors.New("duplicate")
	}
	sl := p.negotiateShm(p.ctx, pe, conn)
	conn.SetDeadline(time.Time{})
	runHook(&testHookAccepted, p, pe)
	pe.mu.Lock()
	if pe.ln != nil || pe.err != nil {
		if sl != nil {
			sl.cancel()
			sl.closeRing()
		}
		p.acceptFailedAndUnlock(pe, wasDialing)
		return errors.New("peer failed while connecting")
	}
	pe.accepting--
	p.attachLocked(pe, conn, sl)
	pe.mu.Unlock()
	return nil
}

// acceptFailedAndUnlock ends the set-up of a connection pe dialled that
// will not be used. If our own dial failed meanwhile and no other
// connection can still come, the peer has failed. Caller holds pe.mu.
func (p *proc) acceptFailedAndUnlock(pe *peer, wasDialing bool) {
	pe.accepting--
	if pe.ln != nil || pe.err != nil || pe.accepting > 0 {
		pe.mu.Unlock()
		return
	}
	if err := pe.dialErr; err != nil && p.errClosed() == nil {
		pe.failAndUnlock(err)
		p.eng.failSource(pe.rank, err, false)
		return
	}
	pe.dialing = wasDialing
	pe.mu.Unlock()
}

// Test hooks (unset outside tests): testHookDial runs as a dial starts,
// testHookAccepted once a connection the peer dialled is negotiated, just
// before it is attached. They let a test order a dial and an accept.
var testHookDial, testHookAccepted atomic.Pointer[func(p *proc, pe *peer)]

func runHook(h *atomic.Pointer[func(p *proc, pe *peer)], p *proc, pe *peer) {
	if f := h.Load(); f != nil {
		(*f)(p, pe)
	}
}

// dial connects to pe and runs the dialer side of the handshake.
func (p *proc) dial(pe *peer) {
	defer p.wg.Done()
	runHook(&testHookDial, p, pe)
	ctx, cancel := context.WithTimeout(p.ctx, p.cfg.ConnectTimeout)
	defer cancel()
	dup, err := p.dialOnce(ctx, pe)
	if err == nil {
		return
	}
	if dup {
		// The peer's own dial wins; it arrives through accept.
		select {
		case <-pe.ready:
			return
		case <-ctx.Done():
			err = fmt.Errorf("waiting for the peer's connection: %w", ctx.Err())
		}
	}
	if p.errClosed() != nil {
		return
	}
	perr := &PeerError{Rank: pe.rank, Err: err}
	pe.mu.Lock()
	if pe.ln != nil || pe.accepting > 0 {
		// The peer's own connection is attached or being set up: it
		// decides the peer's fate, after what it carried (a peer that
		// sent and then died refuses our dial, but its messages are
		// there). If that set-up fails, dialErr fails the peer.
		if pe.ln == nil {
			pe.dialErr = perr
		}
		pe.mu.Unlock()
		return
	}
	pe.failAndUnlock(perr)
	p.eng.failSource(pe.rank, perr, false)
}

func (p *proc) dialOnce(ctx context.Context, pe *peer) (dup bool, err error) {
	addr, err := p.addrOf(ctx, pe.rank)
	if err != nil {
		return false, fmt.Errorf("address: %w", err)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false, err
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	fail := func(err error) (bool, error) { conn.Close(); return false, err }
	hello := make([]byte, len(hsMagic)+16)
	if _, err := io.ReadFull(conn, hello); err != nil {
		return fail(err)
	}
	if string(hello[:len(hsMagic)]) != hsMagic {
		return fail(errAuth)
	}
	nA := hello[len(hsMagic):]
	nD := make([]byte, 16)
	rand.Read(nD)
	dr, ar := uint32(p.rank), uint32(pe.rank)
	msg := []byte(hsMagic)
	msg = binary.LittleEndian.AppendUint32(msg, dr)
	msg = binary.LittleEndian.AppendUint32(msg, ar)
	msg = append(msg, nD...)
	msg = append(msg, hsMAC(p.secret, "dial", nA, nD, dr, ar)...)
	if _, err := conn.Write(msg); err != nil {
		return fail(err)
	}
	reply := make([]byte, 33)
	if _, err := io.ReadFull(conn, reply); err != nil {
		return fail(err)
	}
	if !hmac.Equal(reply[1:], hsMAC(p.secret, "accept", nA, nD, dr, ar, reply[0])) {
		return fail(errAuth)
	}
	switch reply[0] {
	case hsOK:
	case hsDup:
		// pe.dialing stays set until the winning connection is attached, so
		// no second dial starts meanwhile.
		conn.Close()
		return true, errors.New("refused as duplicate")
	default:
		return fail(errors.New("refused by the peer"))
	}
	sl := p.negotiateShm(ctx, pe, conn)
	if !stop() {
		if sl != nil {
			sl.cancel()
			sl.closeRing()
		}
		return fail(ctx.Err())
	}
	pe.mu.Lock()
	defer pe.mu.Unlock()
	if pe.ln != nil || pe.err != nil {
		conn.Close() // cannot happen with the tie-break; be safe
		if sl != nil {
			sl.cancel()
			sl.closeRing()
		}
		return false, nil
	}
	p.attachLocked(pe, conn, sl)
	return false, nil
}

// tcpLink is a link over one TCP connection.
type tcpLink struct {
	p    *proc
	pe   *peer
	conn net.Conn

	frameQueue
	dead     chan struct{} // closed by close()
	deadOnce sync.Once
	alive    atomic.Int32 // running loops; the last one out closes conn
	// ctl is the shared-memory link this connection controls (nil for a
	// plain TCP link): then only BYE travels here, and losing the
	// connection ends the shm link.
	ctl *shmLink
}

func newTCPLink(p *proc, pe *peer, conn net.Conn) *tcpLink {
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
		// Keepalive notices a peer whose host vanished without closing.
		tc.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: 15 * time.Second, Interval: 5 * time.Second, Count: 3})
	}
	l := &tcpLink{p: p, pe: pe, conn: conn, frameQueue: frameQueue{kick: make(chan struct{}, 1)}, dead: make(chan struct{})}
	l.alive.Store(2)
	return l
}

// loopDone is called by each loop as it ends.
func (l *tcpLink) loopDone() {
	if l.alive.Add(-1) == 0 {
		l.close()
	}
	l.p.wg.Done()
}

func (l *tcpLink) send(f *outFrame) {
	if !l.push(f) && f.done != nil {
		f.done(l.failure())
	}
}

func (l *tcpLink) failure() error {
	if err := l.p.errClosed(); err != nil {
		return err
	}
	l.pe.mu.Lock()
	defer l.pe.mu.Unlock()
	if l.pe.err != nil {
		return l.pe.err
	}
	return &PeerError{Rank: l.pe.rank, Err: errors.New("connection closed")}
}

func (l *tcpLink) shutdown(deadline time.Time) {
	l.mu.Lock()
	if !l.closed && !l.byeQueue {
		l.byeQueue = true
		l.queue = append(l.queue, &outFrame{h: header{Type: frameBye}})
	}
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}
	l.conn.SetDeadline(deadline)
}

func (l *tcpLink) close() {
	l.deadOnce.Do(func() {
		close(l.dead)
		l.conn.Close()
	})
}

func (l *tcpLink) writeLoop() {
	defer l.loopDone()
	var hb [headerSize]byte
	for {
		select {
		case <-l.kick:
		case <-l.dead:
			l.drain(nil, l.failure())
			return
		}
		q := l.take()
		for i, f := range q {
			f.h.encode(hb[:])
			bufs := net.Buffers{hb[:]}
			if len(f.payload) > 0 {
				bufs = append(bufs, f.payload)
			}
			if _, err := bufs.WriteTo(l.conn); err != nil {
				l.close()
				l.drain(q[i:], l.failure())
				return
			}
			if f.done != nil {
				f.done(nil)
			}
			if f.h.Type == frameBye {
				if tc, ok := l.conn.(*net.TCPConn); ok {
					tc.CloseWrite()
				}
				l.drain(q[i+1:], l.failure())
				return
			}
		}
	}
}

// readLoop reads frames until the connection ends. An orderly end (BYE
// then EOF) marks the peer finalized; anything else marks it failed.
func (l *tcpLink) readLoop() {
	defer l.loopDone()
	bye, err := l.p.readFrames(l.pe, l, bufio.NewReaderSize(l.conn, 64<<10))
	orderly := bye && errors.Is(err, io.EOF)
	if l.ctl != nil {
		// The shm link's reader decides the peer's fate; it gets a BYE
		// through the ring after every message. A connection lost without
		// BYE means the peer crashed or aborted: stop waiting on the ring.
		if orderly {
			l.shutdown(time.Now().Add(l.p.cfg.Linger))
		} else {
			l.ctl.controlLost(fmt.Errorf("control connection lost: %v", err))
			l.close()
		}
		return
	}
	var cause error = &PeerError{Rank: l.pe.rank, Err: ErrPeerFinalized}
	if !orderly {
		cause = &PeerError{Rank: l.pe.rank, Err: fmt.Errorf("connection lost: %v", err)}
	}
	if closed := l.p.errClosed(); closed != nil {
		cause = closed
	}
	l.pe.fail(cause)
	l.p.eng.failSource(l.pe.rank, cause, orderly)
	if orderly {
		l.shutdown(time.Now().Add(l.p.cfg.Linger)) // answer with our own BYE
	} else {
		l.close()
	}
}

// readFrames parses frames from r and dispatches them until an error. bye
// reports whether the peer said goodbye (any later frame is an error).
func (p *proc) readFrames(pe *peer, l link, r *bufio.Reader) (bye bool, err error) {
	var hb [headerSize]byte
	for {
		if _, err = io.ReadFull(r, hb[:]); err != nil {
			return bye, err
		}
		var h header
		if h, err = decodeHeader(hb[:], p.cfg.EagerLimit); err != nil {
			return bye, err
		}
		if bye {
			return bye, fmt.Errorf("%w: frame after bye", errFrame)
		}
		if h.Type == frameBye {
			bye = true
			continue
		}
		if err = p.dispatch(pe, l, h, r); err != nil {
			return bye, err
		}
	}
}
