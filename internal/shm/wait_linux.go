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
	return c.awaitSpin(ctx, c.opt.Spin, nil, w, flag, seq, ok)
}

// spinAdapt tunes a waiter's spin to how its recent waits ended, so that
// one default serves idle and busy hosts (docs/shm.md, "Adaptive spin"). A
// wait whose message came early in the spin doubles the spin (up to the
// configured one); a spin that ran out, or caught its message only late
// (in its second half), shrinks it, a quarter or a half, down to
// minAdaptiveSpin. On dedicated
// cores waits end early and the spin stays long (a waiting rank keeps its
// core, as MPICH's polling does); when the peer is often off its core (a
// busy host, or a peer computing between messages), spinning only burns
// the core the peer or other work needs, and the waiter soon sleeps after
// a short spin instead; a sleep as short as a wake-up brings the spin back
// (woke). Owned by the side's one receiver (no locking).
type spinAdapt struct {
	limit time.Duration // current spin; 0: not yet set
}

// minAdaptiveSpin is the shortest adaptive spin: a message answered at
// once (a ping-pong whose peer is running) still arrives within it.
const minAdaptiveSpin = 10 * time.Microsecond

// spin returns the spin for the next wait, at most max.
func (a *spinAdapt) spin(max time.Duration) time.Duration {
	if a == nil || max <= minAdaptiveSpin {
		return max
	}
	if a.limit == 0 || a.limit > max {
		a.limit = max
	}
	return a.limit
}

// woke records a sleep after the spin ran out that ended with the
// message after d: a sleep about as short as a wake-up means the peer
// answered at once and only the wake-up made it late (two waiters on a
// busy host that both sleep would otherwise never spin again), so the spin
// grows back.
func (a *spinAdapt) woke(max, d time.Duration) {
	if a == nil || max <= minAdaptiveSpin || d >= wakeUpBound {
		return
	}
	a.limit = min(max, 4*a.limit)
}

// wakeUpBound: a sleep shorter than this was a wake-up's cost, not a wait.
const wakeUpBound = 100 * time.Microsecond

// ended records how a wait of the spin given by spin(max) ended: after
// elapsed (a negative elapsed: early, before the clock was read), or, if
// ran out, not within the spin.
func (a *spinAdapt) ended(max, elapsed time.Duration, ranOut bool) {
	if a == nil || max <= minAdaptiveSpin {
		return
	}
	switch {
	case ranOut:
		a.limit /= 4
	case elapsed < a.limit/2:
		a.limit *= 2
	default:
		a.limit /= 2
	}
	a.limit = min(max, a.limit)
	if a.limit < minAdaptiveSpin {
		a.limit = minAdaptiveSpin
	}
}

// awaitSpin is await with its own spin (at most spin; ad, if not nil,
// adapts it).
func (c *Chan) awaitSpin(ctx context.Context, maxSpin time.Duration, ad *spinAdapt, w *atomic.Uint64, flag, seq *atomic.Uint32, ok func(uint64) bool) (uint64, error) {
	spin := ad.spin(maxSpin)
	var t0 time.Time
	// A short spin (ranks outnumber cores) must end on time, so it reads
	// the clock often; a long one has µs to spare. A round, with its
	// PAUSE, takes about 30 ns here: 16 rounds are 0.5 µs, 256 are 8 µs.
	clock := 255
	if spin < 100*time.Microsecond {
		clock = 15
	}
	ranOut := false
	for i := 1; spin > 0; i++ {
		if v := w.Load(); ok(v) {
			if ad != nil {
				elapsed := time.Duration(-1)
				if !t0.IsZero() {
					elapsed = time.Since(t0)
				}
				ad.ended(maxSpin, elapsed, false)
			}
			return v, nil
		}
		cpuPause()
		if i&15 == 0 {
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
					ranOut = true
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
	if ranOut {
		ad.ended(maxSpin, 0, true)
	}
	if done := ctx.Done(); done != nil {
		// The wake-up runs in its own goroutine, which this call waits
		// for, so it never touches the mapping after Close (which waits
		// for this call) has unmapped it. Not context.AfterFunc: on a
		// context type of another package it calls the context's Err from
		// its own goroutine, and the runtime's link contexts answer Err
		// from state only their caller's goroutine may read.
		woken, quit := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(woken)
			select {
			case <-done:
				wake(seq)
			case <-quit:
			}
		}()
		defer func() {
			close(quit)
			<-woken
		}()
	}
	defer flag.Store(0)
	last := time.Now()
	slept := last
	for {
		// Raised before every look: a publisher clears it when it wakes
		// us (wakeFlagged), and a sleep that did not end with our
		// condition must ask again.
		flag.Store(1)
		s := seq.Load()
		v := w.Load()
		if ok(v) {
			if ranOut {
				ad.woke(maxSpin, time.Since(slept))
			}
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

// wakeFlagged wakes the other side, whose flag the caller saw raised, if
// the flag still asks for it, and clears the flag, so that a sleeper costs its publisher one wake-up, not one per
// message published until its thread runs again: on a busy host that can be
// many µs, and a sender pouring a window of messages into the ring made a
// system call for each of them. The sleeper raises the flag again before
// each look at its condition (awaitSpin).
func wakeFlagged(flag, seq *atomic.Uint32) {
	if flag.Swap(0) != 0 {
		wake(seq)
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
