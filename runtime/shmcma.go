package mpi

// Large messages between same-host peers by cross-memory attach: the
// receiver reads the sender's buffer (process_vm_readv), and for split
// receives the sender writes the second half (process_vm_writev) on PUT.
// See docs/transport.md, "Large messages" and "Split copies".

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
)

// putDone records that the sender wrote its half of a split receive (or
// could not: then we read that part too, and stop asking it).
func (l *shmLink) putDone(h *header) error {
	pe := l.pe
	pe.mu.Lock()
	op := pe.rdv[h.ID]
	delete(pe.rdv, h.ID)
	pe.mu.Unlock()
	if op == nil || op.split == nil {
		return fmt.Errorf("%w: putdone for unknown id %d", errFrame, h.ID)
	}
	sp := op.split
	if h.Flags&flagFailed != 0 {
		l.noPut.Store(true)
		sp.putErr = cmaReadFn(sp.m.pid, sp.m.addr+uint64(sp.half), sp.buf[sp.half:])
	}
	l.p.finishSplit(op, l, true)
	return nil
}

// put answers a receiver's PUT: write the tail of our rendezvous buffer
// into its memory, then PUTDONE. It runs on the receiving goroutine; the
// sender's core would otherwise sit idle while the receiver copies.
func (l *shmLink) put(h *header) error {
	pe := l.pe
	pe.mu.Lock()
	s := pe.sends[h.ID]
	pe.mu.Unlock()
	if s == nil || !s.cma {
		return fmt.Errorf("%w: put for unknown id %d", errFrame, h.ID)
	}
	pid := int(binary.LittleEndian.Uint64(l.desc[:]))
	addr := binary.LittleEndian.Uint64(l.desc[8:])
	off := binary.LittleEndian.Uint64(l.desc[16:])
	if off > uint64(len(s.payload)) || h.Len > uint64(len(s.payload))-off {
		return fmt.Errorf("%w: put of %d bytes at %d outside a %d-byte message", errFrame, h.Len, off, len(s.payload))
	}
	done := header{Type: framePutDone, Ctx: h.Ctx, ID: h.ID}
	if err := cmaWriteFn(pid, addr, s.payload[off:off+h.Len]); err != nil {
		done.Flags = flagFailed
		l.p.shm.putFalls.Add(1)
	} else {
		l.p.shm.cmaPuts.Add(1)
	}
	// The send stays in pe.sends: it completes on the receiver's FIN,
	// which comes after this PUTDONE.
	l.sendSoon(&outFrame{h: done})
	return nil
}

// sendCMA starts a rendezvous whose payload the receiver reads straight
// out of this process. The request completes on FIN (or, if the receiver
// cannot read it, after streaming on CTS), or when the peer fails; until
// then peer.sends keeps data referenced, so its memory stays put.
func (l *shmLink) sendCMA(h header, data []byte, req *Request, waits bool) {
	pe := l.pe
	h.Type, h.Flags = frameRTS, flagCMA
	if waits {
		h.Flags |= flagWait
	}
	if err := pe.addSend(h.ID, &sendOp{req: req, payload: data, cma: true, ctx: h.Ctx}, &l.p.eng.fams); err != nil {
		req.complete(Status{}, err)
		return
	}
	var desc [cmaDescSize]byte
	binary.LittleEndian.PutUint64(desc[:], uint64(os.Getpid()))
	binary.LittleEndian.PutUint64(desc[8:], bufAddr(data))
	if err := l.sendNow(&h, desc[:]); err != nil {
		pe.takeSend(h.ID)
		req.complete(Status{}, err)
	}
}

// readCMA completes a matched CMA rendezvous by reading the sender's
// buffer directly. It reports false if the read failed (no permission,
// no such process in our pid namespace, no kernel support), in which case
// the caller falls back to CTS and streaming.
func (p *proc) readCMA(op *recvOp, m *message, l *shmLink, onReader bool) bool {
	if p.cfg.NoCMA || !cmaSupported {
		return false
	}
	var buf []byte
	if op.alloc {
		buf = make([]byte, m.length)
	} else {
		buf = op.buf[:min(m.length, len(op.buf))]
	}
	if half := l.splitAt(len(buf), m.waits); half > 0 {
		p.readSplit(op, m, l, buf, half, onReader)
		return true
	}
	if err := cmaReadFn(m.pid, m.addr, buf); err != nil {
		p.shm.cmaFalls.Add(1)
		return false
	}
	p.shm.cmaReads.Add(1)
	l.cmaOK.Store(true)
	l.sendFin(m, onReader)
	p.completeCMA(op, m, buf)
	return true
}

// sendFin tells the sender its buffer is no longer needed.
func (l *shmLink) sendFin(m *message, onReader bool) {
	fin := header{Type: frameFin, Ctx: m.ctx, ID: m.id}
	if onReader {
		l.sendSoon(&outFrame{h: fin})
	} else {
		l.sendNow(&fin, nil) // a failure here fails the peer; the data is ours already
	}
}

// completeCMA completes a receive whose data is all in buf.
func (p *proc) completeCMA(op *recvOp, m *message, buf []byte) {
	if op.alloc {
		p.deliver(op, m.src, m.tag, buf)
	} else {
		st := recvStatus(op, m.src, m.tag, len(buf))
		op.req.complete(st, recvErr(op, st, m.length))
	}
}

// splitRecv is a CMA rendezvous copied by both sides at once: the
// receiver reads buf[:half] from the sender, the sender writes buf[half:]
// (PUT, answered by PUTDONE). Each side's copy runs on its own core, so
// a large message moves at up to twice the speed of one copy.
type splitRecv struct {
	m       *message
	buf     []byte
	half    int
	left    atomic.Int32 // halves not yet copied
	readErr error        // our half; written before left is decremented
	putErr  error        // the sender's half, when we had to read it
}

// splitAt is where a CMA rendezvous of n bytes is split, or 0 to read it
// all: only large messages, only once the pair has shown that cross-
// memory attach works between them (one whole read), so a failing read
// never leaves a PUT outstanding, and only when the sender will answer the
// PUT soon: it blocks on this send (waits, flagWait) or a goroutine of its
// is receiving on this link right now (its ring word, set by help). A
// sender busy computing between Isend and Wait would leave our receive
// waiting for its half; then we read it all ourselves.
func (l *shmLink) splitAt(n int, waits bool) int {
	min := l.p.cfg.CMASplit
	if min <= 0 || n < min || !l.cmaOK.Load() || l.noPut.Load() {
		return 0
	}
	if !waits && l.ch.PeerWord() == 0 {
		return 0
	}
	return n / 2 &^ 4095
}

// readSplit asks the sender to write the tail of buf and reads the head.
// The receive completes in finishSplit, after both halves.
func (p *proc) readSplit(op *recvOp, m *message, l *shmLink, buf []byte, half int, onReader bool) {
	pe := l.pe
	sp := &splitRecv{m: m, buf: buf, half: half}
	sp.left.Store(2)
	op.split = sp
	if err := pe.addRdv(m.id, op); err != nil { // PUTDONE finds it there
		op.req.complete(Status{}, err)
		return
	}
	p.shm.cmaSplits.Add(1)
	var desc [putDescSize]byte
	binary.LittleEndian.PutUint64(desc[:], uint64(os.Getpid()))
	binary.LittleEndian.PutUint64(desc[8:], bufAddr(buf[half:]))
	binary.LittleEndian.PutUint64(desc[16:], uint64(half))
	put := header{Type: framePut, Ctx: m.ctx, Len: uint64(len(buf) - half), ID: m.id}
	if onReader {
		l.sendSoon(&outFrame{h: put, payload: desc[:]})
	} else if err := l.sendNow(&put, desc[:]); err != nil {
		return // the peer failed, and op with it
	}
	sp.readErr = cmaReadFn(m.pid, m.addr, buf[:half])
	p.finishSplit(op, l, onReader)
}

// finishSplit records one copied half; after the second it answers FIN
// and completes the receive.
func (p *proc) finishSplit(op *recvOp, l *shmLink, onReader bool) {
	sp := op.split
	if sp.left.Add(-1) != 0 {
		return
	}
	l.sendFin(sp.m, onReader)
	if err := errors.Join(sp.readErr, sp.putErr); err != nil {
		op.req.complete(Status{}, &PeerError{Rank: l.pe.rank, Err: fmt.Errorf("process_vm_readv: %w", err)})
		return
	}
	p.completeCMA(op, sp.m, sp.buf)
}

// cmaReadFn is cmaRead; tests replace it to simulate a kernel or policy
// that refuses cross-memory attach.
var cmaReadFn = cmaRead

// cmaWriteFn is cmaWrite; tests replace it to refuse the sender's half.
var cmaWriteFn = cmaWrite
