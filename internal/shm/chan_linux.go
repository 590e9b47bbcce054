//go:build linux

package shm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// File layout (offsets in bytes; see docs/shm.md). Counters and flags that
// different sides write live 128 bytes apart so that neither they nor the
// adjacent-line prefetcher make the two cores fight over a line.
const (
	hdrSize = 4096

	offMagic    = 0   // uint64, fileMagic
	offVersion  = 8   // uint32
	offState    = 12  // uint32 futex word: stateInit -> stateReady -> stateAttached
	offRingSize = 16  // uint64, bytes per direction
	offPid      = 24  // 2 x uint32, pid of side 0 (creator) and side 1
	offStart    = 32  // 2 x uint64, start time of those pids (against pid reuse)
	offPidNS    = 48  // 2 x uint64, pid namespace inode (pids compare only within one)
	offClosed   = 128 // 2 x uint32, side i has closed
	offRings    = 256 // ring i's control block at offRings + i*ringStride
	ringStride  = 512
	offWord     = 1536 // 2 x uint64 at offWord + i*wordStride: side i's user word
	wordStride  = 128

	// Within a ring's control block.
	rcHead     = 0   // uint64 bytes ever written (producer)
	rcConsWait = 128 // uint32, consumer sleeps (or is about to)
	rcConsSeq  = 132 // uint32 futex word the consumer sleeps on
	rcTail     = 256 // uint64 bytes ever consumed (consumer)
	rcProdWait = 384 // uint32, producer sleeps (or is about to)
	rcProdSeq  = 388 // uint32 futex word the producer sleeps on

	fileMagic   = 0x314d48534f504d47 // "GMPOSHM1" read little-endian
	fileVersion = 2                  // 2: a waker clears the waiting flag (docs/shm.md, "Wait and wake")

	stateInit      = 0
	stateReady     = 1
	stateAttached  = 2
	stateAbandoned = 3 // the creator gave up waiting

	// A frame header is one 8-byte word: frameTag in the top 16 bits, the
	// message length in the low 48. Frames start 8-aligned, so a header never
	// straddles the wrap-around point; the body may and is split-copied.
	frameTag   = 0xA55A
	frameBytes = 8

	// publishChunk: a long message's producer publishes its head (and its
	// consumer its tail) every this many bytes, so both copy concurrently.
	publishChunk = 64 << 10

	// fastFrame: frames up to this size (header, body and pad) that need
	// no wait and do not wrap are sent and received by a path without
	// loops; longer ones go through put and take, which publish every
	// publishChunk.
	fastFrame = 4 << 10
)

// ring is one direction as seen by one side (producer or consumer).
type ring struct {
	head, tail         *atomic.Uint64
	consWait, prodWait *atomic.Uint32 // "I sleep, wake me" flags
	consSeq, prodSeq   *atomic.Uint32 // futex words, bumped by every wake-up
	data               []byte
	mask               uint64
	pos                uint64 // own counter: head for the producer, tail for the consumer
	cache              uint64 // last value read of the other side's counter
	published          uint64 // own counter as last stored in shared memory
}

func (r *ring) size() uint64 { return r.mask + 1 }

// Chan is one end of a bidirectional channel. Send and Recv may be called
// from different goroutines at once; concurrent Sends (or Recvs) serialize.
type Chan struct {
	mem  []byte
	side int // 0: creator, 1: opener
	opt  Options

	closedSelf, closedPeer *atomic.Uint32
	wordMu                 sync.Mutex // SetWord and PeerWord against Close's unmap
	wordSelf, wordPeer     *atomic.Uint64
	closeMu                sync.Mutex // serialises Close
	peerPid                int
	peerStart              uint64
	checkPid               bool
	closing                atomic.Bool

	// The sender's state and the receiver's are written by different
	// threads (a rank sends while its reader spins on the other ring), so
	// each group has cache lines of its own, 128 bytes from anything else
	// (the adjacent-line prefetcher pairs lines). Sharing them cost the
	// sender a cache miss per message: the store to tx.published shared a
	// line with the rx ring's pointers that a spinning receiver reloads,
	// and the sendMu Unlock that followed waited for it (a third of an
	// 8-byte Send's cost in gompi-bench mr's profile).
	_ [128]byte

	sendMu sync.Mutex
	tx     ring
	txErr  error // sticky: a Send that failed mid-message broke the stream

	_ [128]byte

	recvMu sync.Mutex
	rx     ring
	rxErr  error     // sticky: corrupt stream
	rxSpin spinAdapt // the receiver's spin, adapted to how its waits end

	_ [128]byte
}

func u64(mem []byte, off int) *atomic.Uint64 { return (*atomic.Uint64)(unsafe.Pointer(&mem[off])) }
func u32(mem []byte, off int) *atomic.Uint32 { return (*atomic.Uint32)(unsafe.Pointer(&mem[off])) }

// Send writes one message, the concatenation of hdr and payload (so that an
// envelope and a user buffer go out without being joined first). It copies
// straight from the slices into the ring and returns once the last byte is
// in the ring; a message longer than the ring streams through it, so Send
// then returns only after the receiver has consumed all but the last ring's
// worth.
//
// A Send blocked before any of the message was published returns ctx's
// error and leaves the channel usable; one cancelled or failing half-way
// closes the channel (the peer would otherwise wait for the rest forever).
func (c *Chan) Send(ctx context.Context, hdr, payload []byte) error {
	c.sendMu.Lock()
	err := c.send(ctx, hdr, payload) // does not panic: no defer on this path
	c.sendMu.Unlock()
	return err
}

// SendMany writes n messages, message i being the concatenation of the
// slices frame(i) returns, under one hold of the send lock, and makes
// them visible to the consumer at once (one store of the head, one look
// at its waiting flag) instead of once each: a window of short messages
// (persistent sends started together) then costs the consumer's core one
// cache-line transfer of the head, not one per message. A message that
// does not fit the ring as last seen, or wraps, goes as Send sends it
// (which publishes what is before it first, so a full ring never waits on
// its own unpublished bytes). It returns how many messages were sent; on
// an error the messages before the failed one were sent, as by Send.
func (c *Chan) SendMany(ctx context.Context, n int, frame func(i int) (hdr, payload []byte)) (int, error) {
	c.sendMu.Lock()
	r := &c.tx
	// Checked once: a channel that closes half-way through is found by
	// the next Send, as one closing between two Sends is.
	ok := c.txErr == nil && !c.closing.Load() && c.closedPeer.Load() == 0 && r.pos&7 == 0
	for i := 0; i < n; i++ {
		hdr, payload := frame(i)
		k := uint64(len(hdr)) + uint64(len(payload))
		if need, off := frameBytes+k+(-k&7), r.pos&r.mask; ok && need <= fastFrame &&
			r.size()-(r.pos-r.cache) >= need && off+need <= r.size() {
			f := r.data[off : off+need]
			binary.LittleEndian.PutUint64(f, frameTag<<48|k)
			copy(f[frameBytes+copy(f[frameBytes:], hdr):], payload)
			r.pos += need
			continue
		}
		if err := c.send(ctx, hdr, payload); err != nil {
			c.publishTx()
			c.sendMu.Unlock()
			return i, err
		}
	}
	c.publishTx()
	c.sendMu.Unlock()
	return n, nil
}

// TrySend sends the message only if all of it fits in the ring now, so it
// never waits for the consumer; it reports whether it sent. A goroutine
// that must not block on a full ring (one that is itself draining the
// other direction) tries this first and hands the message to a writer
// otherwise.
func (c *Chan) TrySend(hdr, payload []byte) (bool, error) {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	n := uint64(len(hdr)) + uint64(len(payload))
	need := frameBytes + n + (-n & 7)
	r := &c.tx
	if r.size()-(r.pos-r.cache) < need {
		t := r.tail.Load()
		if r.pos-t > r.size() {
			return false, fmt.Errorf("%w: tail %d is not within a ring of head %d", ErrCorrupt, t, r.pos)
		}
		r.cache = t
		if r.size()-(r.pos-t) < need {
			return false, nil
		}
	}
	return true, c.send(context.Background(), hdr, payload)
}

func (c *Chan) send(ctx context.Context, hdr, payload []byte) error {
	if c.closing.Load() || c.closedPeer.Load() != 0 {
		return ErrClosed
	}
	if c.txErr != nil {
		return c.txErr
	}
	n := uint64(len(hdr)) + uint64(len(payload))
	if n > MaxMessage {
		return ErrTooLarge
	}
	r := &c.tx
	if r.pos&7 != 0 {
		return fmt.Errorf("%w: head at unaligned position %d", ErrCorrupt, r.pos)
	}
	// The common case: a short message that fits, as the cached tail
	// says, without wrapping: three copies, no loop and no checks
	// between them (a quarter of the sender's ring cost at 8 bytes).
	if need, off := frameBytes+n+(-n&7), r.pos&r.mask; need <= fastFrame && r.size()-(r.pos-r.cache) >= need && off+need <= r.size() {
		f := r.data[off : off+need]
		binary.LittleEndian.PutUint64(f, frameTag<<48|n)
		copy(f[frameBytes+copy(f[frameBytes:], hdr):], payload)
		r.pos += need
		c.publishTx()
		return nil
	}
	start := r.pos
	err := c.reserve(ctx, frameBytes)
	if err == nil {
		binary.LittleEndian.PutUint64(r.data[r.pos&r.mask:], frameTag<<48|n)
		r.pos += frameBytes
		if err = c.put(ctx, hdr); err == nil {
			err = c.put(ctx, payload)
		}
		if pad := -n & 7; err == nil && pad != 0 {
			if err = c.reserve(ctx, pad); err == nil {
				r.pos += pad // the pad bytes' content does not matter
			}
		}
	}
	if err != nil {
		if r.published == start && !errors.Is(err, ErrCorrupt) {
			r.pos = start // nothing visible yet: as if never sent
			return err
		}
		c.txErr = fmt.Errorf("shm: send failed mid-message, channel closed: %w", err)
		c.markClosed()
		return err
	}
	c.publishTx()
	return nil
}

// reserve makes sure k bytes are free after r.pos.
func (c *Chan) reserve(ctx context.Context, k uint64) error {
	r := &c.tx
	if r.size()-(r.pos-r.cache) >= k {
		return nil
	}
	return c.refreshTx(ctx, k)
}

// refreshTx rereads the consumer's tail, waiting until k bytes are free.
func (c *Chan) refreshTx(ctx context.Context, k uint64) error {
	r := &c.tx
	t := r.tail.Load()
	if r.pos-t > r.size() {
		return fmt.Errorf("%w: tail %d is not within a ring of head %d", ErrCorrupt, t, r.pos)
	}
	r.cache = t
	if r.size()-(r.pos-t) >= k {
		return nil
	}
	// Publish what we have before sleeping, or the consumer could never
	// free the space we are waiting for.
	c.publishTx()
	t, err := c.await(ctx, r.tail, r.prodWait, r.prodSeq, func(t uint64) bool {
		used := r.pos - t
		return used > r.size() || r.size()-used >= k
	})
	if err != nil {
		return err
	}
	if r.pos-t > r.size() {
		return fmt.Errorf("%w: tail %d is not within a ring of head %d", ErrCorrupt, t, r.pos)
	}
	r.cache = t
	return nil
}

// put copies src into the ring at r.pos, as space frees up.
func (c *Chan) put(ctx context.Context, src []byte) error {
	r := &c.tx
	for len(src) > 0 {
		free := r.size() - (r.pos - r.cache)
		if free < uint64(len(src)) && free < publishChunk {
			if err := c.refreshTx(ctx, 1); err != nil {
				return err
			}
			free = r.size() - (r.pos - r.cache)
		}
		off := r.pos & r.mask
		k := min(free, r.size()-off, uint64(len(src)), publishChunk)
		copy(r.data[off:off+k], src[:k])
		src = src[k:]
		r.pos += k
		if r.pos-r.published >= publishChunk {
			c.publishTx()
		}
	}
	return nil
}

// publishTx makes everything up to r.pos visible to the consumer. The store
// is sequentially consistent, so the data copied before it is visible
// first, and the load of the waiter flag after it cannot be reordered before
// it: either the consumer sees the new head or we see its flag (Dekker).
func (c *Chan) publishTx() {
	r := &c.tx
	if r.pos == r.published {
		return
	}
	r.head.Store(r.pos)
	r.published = r.pos
	if r.consWait.Load() != 0 { // the common case, inline: no call
		wakeFlagged(r.consWait, r.consSeq)
	}
}

func (c *Chan) publishRx() {
	r := &c.rx
	if r.pos == r.published {
		return
	}
	r.tail.Store(r.pos)
	r.published = r.pos
	if r.prodWait.Load() != 0 {
		wakeFlagged(r.prodWait, r.prodSeq)
	}
}

// Recv receives one message. dst is called once with the message length and
// returns the buffer to copy it into, so the bytes go from the ring straight
// into the caller's memory. If the buffer is shorter, the rest of the message
// is discarded and Recv returns ErrTruncated (a nil buffer discards the whole
// message, as does a nil dst). Recv returns the message length. dst runs
// with the receive lock held, so it must not call Recv.
//
// Messages completely sent before the peer closed are still delivered; after
// them Recv returns ErrClosed. A Recv cancelled half-way through a message
// leaves the stream mid-message, so it closes the channel.
func (c *Chan) Recv(ctx context.Context, dst func(n int) []byte) (int, error) {
	return c.recv(ctx, nil, 0, nil, dst)
}

// RecvSplit receives one message whose first len(hdr) bytes are an
// envelope: they are copied into hdr first, then dst is called with the
// length of the rest (so it can look at the envelope to choose where the
// body goes) and the body is copied into the buffer it returns, with
// Recv's truncation rules. It returns the body length. A message shorter
// than hdr is consumed and reported as ErrCorrupt (it is not a message of
// the caller's protocol), without closing the channel.
func (c *Chan) RecvSplit(ctx context.Context, hdr []byte, dst func(n int) []byte) (int, error) {
	return c.RecvSplitIdle(ctx, nil, 0, hdr, dst)
}

// RecvSplitIdle is RecvSplit whose wait for the start of a message ends
// when idle ends (instead of ctx; idle should end when ctx does, or the
// caller must close the channel to stop it). It then returns ErrIdle and
// the channel stays usable: nothing was consumed. Once a message has
// started, only ctx counts. This lets several goroutines take turns
// receiving: one waits, and is told to step aside when another wants to.
//
// spin, if not 0, replaces Options.Spin for that wait: a goroutine that
// only stands in while others are away (the runtime's reader) spins
// briefly, so that it does not hold a core that the goroutine it stands in
// for may need; one waiting for its own message spins long.
func (c *Chan) RecvSplitIdle(ctx, idle context.Context, spin time.Duration, hdr []byte, dst func(n int) []byte) (int, error) {
	if hdr == nil {
		hdr = []byte{} // non-nil: recv splits
	}
	return c.recv(ctx, idle, spin, hdr, dst)
}

// RecvSplitIdleExclusive is RecvSplitIdle without the receive lock, for a
// caller that serialises its receives itself and never lets Close run
// during one: it calls Shutdown instead, and Close once no receive can be
// in progress. (The lock was a sixth of the runtime's cost of an 8-byte
// hop.)
//
// It also frees ring space lazily: every quarter of the ring, and before it
// waits for the producer, instead of after every message (the store is a
// fence, a tenth of a small message's cost). So the caller must keep
// receiving while the producer may be waiting for space, as a reader
// goroutine does; until it does, the producer may see the ring up to a
// quarter fuller than it is.
func (c *Chan) RecvSplitIdleExclusive(ctx, idle context.Context, spin time.Duration, hdr []byte, dst func(n int) []byte) (int, error) {
	if hdr == nil {
		hdr = []byte{}
	}
	return c.recvUnlocked(ctx, idle, spin, hdr, dst, true)
}

// Shutdown marks the channel closed and wakes every waiter on both sides,
// as Close does, but leaves the memory mapped: calls in progress return
// (receives after the messages completely sent before), later ones fail
// with ErrClosed without touching the mapping. Close unmaps it.
func (c *Chan) Shutdown() {
	c.closeMu.Lock() // a concurrent Close must not unmap while this wakes
	c.markClosed()
	c.closeMu.Unlock()
}

func (c *Chan) recv(ctx, idle context.Context, idleSpin time.Duration, hdr []byte, dst func(n int) []byte) (int, error) {
	c.recvMu.Lock()
	defer c.recvMu.Unlock()
	return c.recvUnlocked(ctx, idle, idleSpin, hdr, dst, false)
}

func (c *Chan) recvUnlocked(ctx, idle context.Context, idleSpin time.Duration, hdr []byte, dst func(n int) []byte, lazy bool) (int, error) {
	if c.closing.Load() {
		return 0, ErrClosed
	}
	if c.rxErr != nil {
		return 0, c.rxErr
	}
	r := &c.rx
	if r.cache-r.pos < frameBytes {
		wctx := ctx
		if idle != nil {
			wctx = idle
		}
		spin := c.opt.Spin
		if idle != nil && idleSpin != 0 {
			spin = idleSpin
		}
		if err := c.refreshRxSpin(wctx, frameBytes, spin); err != nil {
			if idle != nil && idle.Err() != nil && ctx.Err() == nil && !errors.Is(err, ErrClosed) && !errors.Is(err, ErrPeerDead) {
				return 0, ErrIdle
			}
			if !c.arrivedLate(err) {
				return 0, c.rxFail(err, false)
			}
			if idle != nil && idle.Err() != nil {
				return 0, ErrIdle // the caller's turn ended; the frame waits
			}
		}
	}
	if r.pos&7 != 0 {
		return 0, c.rxFail(fmt.Errorf("%w: frame at unaligned position %d", ErrCorrupt, r.pos), true)
	}
	n64, err := decodeFrame(binary.LittleEndian.Uint64(r.data[r.pos&r.mask:]))
	if err != nil {
		return 0, c.rxFail(err, true)
	}
	if n64 > uint64(maxInt) {
		return 0, c.rxFail(fmt.Errorf("%w: message of %d bytes", ErrCorrupt, n64), true)
	}
	n := int(n64)
	// The common case: a short frame that is all there, in one piece,
	// and at least as long as hdr: copy out of the ring in place, without
	// take's loops (a third of the receiver's ring cost at 8 bytes).
	if total, off := frameBytes+n64+(-n64&7), r.pos&r.mask; total <= fastFrame && r.cache-r.pos >= total && off+total <= r.size() && n >= len(hdr) {
		f := r.data[off+frameBytes : off+frameBytes+n64]
		copy(hdr, f)
		n -= len(hdr)
		var buf []byte
		if dst != nil {
			buf = dst(n)
		}
		m := copy(buf, f[len(hdr):])
		r.pos += total
		if !lazy || r.pos-r.published >= r.size()/4 {
			c.publishRx()
		}
		if m < n {
			return n, ErrTruncated
		}
		return n, nil
	}
	r.pos += frameBytes
	if hdr != nil {
		if n < len(hdr) {
			if err := c.take(ctx, nil, n64+(-n64&7)); err != nil {
				return 0, c.rxFail(err, true)
			}
			c.publishRx()
			return n, fmt.Errorf("%w: %d-byte message shorter than its %d-byte envelope", ErrCorrupt, n, len(hdr))
		}
		if err := c.take(ctx, hdr, 0); err != nil {
			return 0, c.rxFail(err, true)
		}
		n -= len(hdr)
	}
	var buf []byte
	if dst != nil {
		buf = dst(n)
	}
	m := min(len(buf), n)
	err = c.take(ctx, buf[:m], uint64(n-m)+(-n64&7))
	if err != nil {
		return 0, c.rxFail(err, true)
	}
	if !lazy || r.pos-r.published >= r.size()/4 {
		c.publishRx()
	}
	if m < n {
		return n, ErrTruncated
	}
	return n, nil
}

const maxInt = int(^uint(0) >> 1)

// SetWord stores this side's user word, which the peer reads with
// PeerWord: a cheap way to tell the peer about this side's state without a
// message (the runtime says whether a goroutine is receiving on the ring).
// Each side's word has a cache line to itself; no wake-up is involved.
// After Close it does nothing.
func (c *Chan) SetWord(v uint64) {
	c.wordMu.Lock()
	if c.mem != nil {
		c.wordSelf.Store(v)
	}
	c.wordMu.Unlock()
}

// PeerWord returns the peer's user word (0 until it stores one, and after
// Close).
func (c *Chan) PeerWord() uint64 {
	c.wordMu.Lock()
	defer c.wordMu.Unlock()
	if c.mem == nil {
		return 0
	}
	return c.wordPeer.Load()
}

// Pending reports whether a message has at least started to arrive, so that
// a progress loop polling several transports can call Recv only when it
// would not wait for the first byte. (A Recv with an already cancelled
// context is no substitute: it would break the channel if it had to wait
// for the rest of a long message.)
func (c *Chan) Pending() bool {
	c.recvMu.Lock()
	defer c.recvMu.Unlock()
	if c.closing.Load() || c.rxErr != nil {
		return false
	}
	if c.rx.cache != c.rx.pos {
		return true
	}
	c.rx.cache = c.rx.head.Load()
	if c.rx.cache-c.rx.pos > c.rx.size() {
		c.rx.cache = c.rx.pos // corrupt: Recv rereads the head and reports it
		return true
	}
	return c.rx.cache != c.rx.pos
}

// PendingExclusive is Pending for a caller that serialises its receives
// itself (as with RecvSplitIdleExclusive): it takes no lock, so that a
// receiver may look for a message that has already arrived at the cost of
// one load.
func (c *Chan) PendingExclusive() bool {
	if c.closing.Load() || c.rxErr != nil {
		return false
	}
	r := &c.rx
	if r.cache != r.pos {
		return true
	}
	h := r.head.Load()
	if h-r.pos > r.size() {
		return true // corrupt: Recv rereads the head and reports it
	}
	r.cache = h
	return h != r.pos
}

// RecvBytes receives one message into a new slice.
func (c *Chan) RecvBytes(ctx context.Context) ([]byte, error) {
	var b []byte
	_, err := c.Recv(ctx, func(n int) []byte { b = make([]byte, n); return b })
	return b, err
}

// decodeFrame checks a frame header word and returns the message length.
func decodeFrame(w uint64) (uint64, error) {
	if w>>48 != frameTag {
		return 0, fmt.Errorf("%w: bad frame header %#016x", ErrCorrupt, w)
	}
	return w & (1<<48 - 1), nil
}

// arrivedLate reports whether a frame was published while a wait for one
// ended with err (not corruption), and if so makes it readable. A wait can
// end just as a sender publishes its last frame and dies: its idle
// context ends, or ctx ends when the caller sees the peer gone, after the
// wait's last look but before its caller learns why it ended. Everything
// a dead peer published is visible once its death is, so one more look
// after the wait ended finds it (Recv delivers what was sent before a
// peer closed or died).
func (c *Chan) arrivedLate(err error) bool {
	r := &c.rx
	if c.closing.Load() || errors.Is(err, ErrCorrupt) {
		return false
	}
	h := r.head.Load()
	if h == r.pos || h-r.pos > r.size() {
		return false
	}
	r.cache = h
	return true
}

// rxFail handles a failed receive: mid-message failures and corruption
// close the channel, since the stream can no longer be parsed.
func (c *Chan) rxFail(err error, midMessage bool) error {
	if midMessage || errors.Is(err, ErrCorrupt) {
		c.rxErr = fmt.Errorf("shm: receive failed mid-message, channel closed: %w", err)
		c.markClosed()
	}
	return err
}

// refreshRx rereads the producer's head, waiting until k bytes are readable.
func (c *Chan) refreshRx(ctx context.Context, k uint64) error {
	return c.refreshRxSpin(ctx, k, c.opt.Spin)
}

func (c *Chan) refreshRxSpin(ctx context.Context, k uint64, spin time.Duration) error {
	r := &c.rx
	h := r.head.Load()
	if h-r.pos < k {
		// Free what we consumed before sleeping (the producer may be
		// waiting for exactly that space).
		c.publishRx()
		var err error
		h, err = c.awaitSpin(ctx, spin, &c.rxSpin, r.head, r.consWait, r.consSeq, func(h uint64) bool {
			return h-r.pos >= k
		})
		if err != nil {
			return err
		}
	}
	if h-r.pos > r.size() {
		return fmt.Errorf("%w: head %d is not within a ring of tail %d", ErrCorrupt, h, r.pos)
	}
	r.cache = h
	return nil
}

// take copies len(dst) bytes from the ring into dst, then skips skip more.
func (c *Chan) take(ctx context.Context, dst []byte, skip uint64) error {
	r := &c.rx
	for len(dst) > 0 || skip > 0 {
		avail := r.cache - r.pos
		if avail == 0 {
			if err := c.refreshRx(ctx, 1); err != nil {
				return err
			}
			avail = r.cache - r.pos
		}
		off := r.pos & r.mask
		var k uint64
		if len(dst) > 0 {
			k = min(avail, r.size()-off, uint64(len(dst)), publishChunk)
			copy(dst[:k], r.data[off:off+k])
			dst = dst[k:]
		} else {
			k = min(avail, skip)
			skip -= k
		}
		r.pos += k
		if r.pos-r.published >= publishChunk {
			c.publishRx()
		}
	}
	return nil
}

// markClosed flags this side closed in the header and wakes every waiter,
// on both sides, on every futex word of the channel.
func (c *Chan) markClosed() {
	if c.closing.Swap(true) {
		return
	}
	c.closedSelf.Store(1)
	for _, r := range []*ring{&c.tx, &c.rx} {
		wake(r.consSeq)
		wake(r.prodSeq)
	}
}

// Close marks the channel closed, which wakes a peer blocked in Send or Recv
// (they return ErrClosed, after any fully sent messages are received), waits
// for this side's calls in progress to return and unmaps the memory.
func (c *Chan) Close() error {
	// Concurrent Closes take turns: the second must not unmap while the
	// first is still waking futex words in the mapping.
	c.closeMu.Lock()
	defer c.closeMu.Unlock()
	c.markClosed()
	c.sendMu.Lock()
	c.recvMu.Lock()
	defer c.sendMu.Unlock()
	defer c.recvMu.Unlock()
	if c.mem == nil {
		return nil
	}
	c.wordMu.Lock()
	defer c.wordMu.Unlock()
	err := unix.Munmap(c.mem)
	c.mem = nil
	return err
}
