//go:build linux

package shm

// Waiting for the other side: spin, then sleep on a futex word the other
// side bumps, checking the peer's liveness now and then (docs/shm.md, "Wait
// and wake").

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"
)

// await waits until ok(w.Load()). It spins for opt.Spin (yielding to other
// goroutines now and then), then raises flag, which asks the other side to
// wake it through seq, and sleeps on the futex seq. Every opt.Poll it checks
// that the peer is alive.
//
// No wake-up is lost: every waker (the other side publishing, either side
// closing, ctx's cancellation) changes seq before the futex call, and the
// waiter reads seq before its last look at the condition, so a wake-up
// after that look makes FUTEX_WAIT return at once.
func (c *Chan) await(ctx context.Context, w *atomic.Uint64, flag, seq *atomic.Uint32, ok func(uint64) bool) (uint64, error) {
	return c.awaitSpin(ctx, c.opt.Spin, w, flag, seq, ok)
}

func (c *Chan) awaitSpin(ctx context.Context, spin time.Duration, w *atomic.Uint64, flag, seq *atomic.Uint32, ok func(uint64) bool) (uint64, error) {
	var t0 time.Time
	// A short spin (ranks outnumber cores) must end on time, so it reads
	// the clock often; a long one has µs to spare.
	clock := 4095
	if spin < 100*time.Microsecond {
		clock = 255
	}
	for i := 1; spin > 0; i++ {
		if v := w.Load(); ok(v) {
			return v, nil
		}
		if i&255 == 0 {
			if c.stopped(ctx) {
				break
			}
			// The clock is read rarely: on this VM a read cost a sizeable
			// part of an 8-byte hand-off, and a message that arrives
			// during it is noticed that much later. In a long spin the
			// first read comes after µs, when an answer would have come.
			if i&clock == 0 {
				if i == clock+1 {
					t0 = time.Now()
				} else if time.Since(t0) > spin {
					break
				}
				// Let other goroutines have this P now and then; a
				// Gosched goes through the scheduler's global queue (a
				// lock, ~0.1 µs), so doing it at every check delayed
				// noticing a message.
				runtime.Gosched()
			}
		}
	}
	if ctx.Done() != nil {
		// The wake-up runs in its own goroutine; if it has started, wait
		// for it, so it never touches the mapping after Close (which waits
		// for this call) has unmapped it.
		woken := make(chan struct{})
		stop := context.AfterFunc(ctx, func() { wake(seq); close(woken) })
		defer func() {
			if !stop() {
				<-woken
			}
		}()
	}
	flag.Store(1)
	defer flag.Store(0)
	last := time.Now()
	for {
		s := seq.Load()
		v := w.Load()
		if ok(v) {
			return v, nil
		}
		if err := c.stopErr(ctx); err != nil {
			if v = w.Load(); ok(v) { // published just before closing
				return v, nil
			}
			return 0, err
		}
		futexWait(unsafe.Pointer(seq), s, c.opt.Poll)
		if time.Since(last) >= c.opt.Poll {
			last = time.Now()
			if err := c.peerAlive(); err != nil {
				if v = w.Load(); ok(v) {
					return v, nil
				}
				return 0, err
			}
		}
	}
}

// wake bumps a futex word and wakes its sleepers.
func wake(seq *atomic.Uint32) {
	seq.Add(1)
	futexWake(unsafe.Pointer(seq))
}

func (c *Chan) stopped(ctx context.Context) bool {
	return c.closing.Load() || c.closedPeer.Load() != 0 || ctx.Err() != nil
}

func (c *Chan) stopErr(ctx context.Context) error {
	if c.closing.Load() || c.closedPeer.Load() != 0 {
		return ErrClosed
	}
	return ctx.Err()
}

func (c *Chan) peerAlive() error {
	if c.checkPid && !pidAlive(c.peerPid, c.peerStart) {
		return fmt.Errorf("%w: process %d exited", ErrPeerDead, c.peerPid)
	}
	if c.opt.Alive != nil {
		if err := c.opt.Alive(); err != nil {
			return fmt.Errorf("%w: %w", ErrPeerDead, err)
		}
	}
	return nil
}
