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
// its writes (frames go out in send order) and one that reads frames and
// hands them to proc.dispatch. TCP is the only link today; a shared-memory
// ring (internal/shm) can implement the same interface for same-host peers.
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
	ready   chan struct{} // closed once ln is set or err is set
	err     error
	sends   map[uint64]*sendOp // rendezvous sends waiting for CTS
	rdv     map[uint64]*recvOp // rendezvous receives waiting for DATA
}

type sendOp struct {
	req     *Request
	payload []byte
}

func newPeer(rank int) *peer {
	return &peer{rank: rank, ready: make(chan struct{}), sends: map[uint64]*sendOp{}, rdv: map[uint64]*recvOp{}}
}

func (pe *peer) current() link {
	pe.mu.Lock()
	defer pe.mu.Unlock()
	return pe.ln
}

// fail records err (first wins), wakes waiters, and fails every pending
// rendezvous with this peer.
func (pe *peer) fail(err error) {
	pe.mu.Lock()
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
		r.req.complete(Status{}, err)
	}
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
		if !pe.dialing {
			pe.dialing = true
			p.wg.Add(1)
			go p.dial(pe)
		}
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

// attach installs a handshaken connection as pe's link. Caller holds pe.mu.
func (p *proc) attachLocked(pe *peer, conn net.Conn) {
	l := newTCPLink(p, pe, conn)
	pe.ln = l
	pe.dialing = false
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
	hsOK  = 0 // link established
	hsDup = 1 // refused: the other direction's connection wins
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
	defer pe.mu.Unlock()
	status := byte(hsOK)
	// One connection per pair: when both sides dial at once, the lower
	// rank's dial wins.
	if pe.ln != nil || pe.err != nil || (pe.dialing && p.rank < int(d)) {
		status = hsDup
	}
	reply := append([]byte{status}, hsMAC(p.secret, "accept", nA, nD, d, a, status)...)
	if _, err := conn.Write(reply); err != nil {
		return err
	}
	if status != hsOK {
		return errors.New("duplicate")
	}
	conn.SetDeadline(time.Time{})
	p.attachLocked(pe, conn)
	return nil
}

// dial connects to pe and runs the dialer side of the handshake.
func (p *proc) dial(pe *peer) {
	defer p.wg.Done()
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
	pe.fail(perr)
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
	if reply[0] != hsOK {
		// pe.dialing stays set until the winning connection is attached, so
		// no second dial starts meanwhile.
		conn.Close()
		return true, errors.New("refused as duplicate")
	}
	if !stop() {
		return fail(ctx.Err())
	}
	pe.mu.Lock()
	defer pe.mu.Unlock()
	if pe.ln != nil || pe.err != nil {
		conn.Close() // cannot happen with the tie-break; be safe
		return false, nil
	}
	p.attachLocked(pe, conn)
	return false, nil
}

// tcpLink is a link over one TCP connection.
type tcpLink struct {
	p    *proc
	pe   *peer
	conn net.Conn

	mu       sync.Mutex
	queue    []*outFrame
	kick     chan struct{} // cap 1: the writer has work
	closed   bool          // no more frames accepted
	byeQueue bool
	dead     chan struct{} // closed by close()
	deadOnce sync.Once
	alive    atomic.Int32 // running loops; the last one out closes conn
}

func newTCPLink(p *proc, pe *peer, conn net.Conn) *tcpLink {
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	l := &tcpLink{p: p, pe: pe, conn: conn, kick: make(chan struct{}, 1), dead: make(chan struct{})}
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
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		if f.done != nil {
			f.done(l.failure())
		}
		return
	}
	l.queue = append(l.queue, f)
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
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
	var werr error
	for {
		select {
		case <-l.kick:
		case <-l.dead:
			werr = l.failure()
		}
		l.mu.Lock()
		q := l.queue
		l.queue = nil
		if werr != nil {
			l.closed = true
		}
		l.mu.Unlock()
		for i, f := range q {
			if werr == nil {
				f.h.encode(hb[:])
				bufs := net.Buffers{hb[:]}
				if len(f.payload) > 0 {
					bufs = append(bufs, f.payload)
				}
				if _, err := bufs.WriteTo(l.conn); err != nil {
					werr = err
					l.close()
					werr = l.failure()
				}
			}
			if f.done != nil {
				f.done(werr)
			}
			if werr == nil && f.h.Type == frameBye {
				l.mu.Lock()
				l.closed = true
				// frames after BYE in this batch, and any queued since
				rest := append(q[i+1:], l.queue...)
				l.queue = nil
				l.mu.Unlock()
				if tc, ok := l.conn.(*net.TCPConn); ok {
					tc.CloseWrite()
				}
				ferr := l.failure()
				for _, r := range rest {
					if r.done != nil {
						r.done(ferr)
					}
				}
				return
			}
		}
		if werr != nil {
			// Frames queued while this batch was written would never
			// complete: fail them, and refuse later ones (send checks
			// closed).
			l.mu.Lock()
			l.closed = true
			rest := l.queue
			l.queue = nil
			l.mu.Unlock()
			for _, r := range rest {
				if r.done != nil {
					r.done(werr)
				}
			}
			return
		}
	}
}

// readLoop reads frames until the connection ends. An orderly end (BYE
// then EOF) marks the peer finalized; anything else marks it failed.
func (l *tcpLink) readLoop() {
	defer l.loopDone()
	bye, err := l.p.readFrames(l.pe, l, bufio.NewReaderSize(l.conn, 64<<10))
	var cause error
	if bye && errors.Is(err, io.EOF) {
		cause = &PeerError{Rank: l.pe.rank, Err: ErrPeerFinalized}
		l.shutdown(time.Now().Add(l.p.cfg.Linger)) // answer with our own BYE
	} else {
		cause = &PeerError{Rank: l.pe.rank, Err: fmt.Errorf("connection lost: %v", err)}
	}
	if closed := l.p.errClosed(); closed != nil {
		cause = closed
	}
	l.pe.fail(cause)
	l.p.eng.failSource(l.pe.rank, cause, bye)
	if !bye {
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
