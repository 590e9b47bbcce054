package mpi

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"
)

// Concurrency and cancellation promises as an application meets them:
// many goroutines on one communicator, contexts ending blocking calls.

// concurEager is the eager limit of these tests: sizes on both sides of
// it take both the eager and the rendezvous path.
const concurEager = 512

// seqSizes are the message sizes of the cancellation races: empty, eager,
// and rendezvous (also above the CMA split of the shm transport).
var seqSizes = []int{0, 8, 64, concurEager, concurEager + 1, 4096, 300 << 10}

// seqMsg is message i: its size from seqSizes, its first 8 bytes (when it
// has them) i, the rest a pattern of i.
func seqMsg(i int) []byte {
	b := pattern(seqSizes[i%len(seqSizes)], i)
	if len(b) >= 8 {
		binary.LittleEndian.PutUint64(b, uint64(i))
	}
	return b
}

// checkSeq says whether got (st) is message i.
func checkSeq(i int, got []byte, st Status) error {
	want := seqMsg(i)
	if st.Bytes != len(want) || st.Tag != i%3 {
		return fmt.Errorf("message %d: got %d bytes tag %d, want %d bytes tag %d (lost, duplicated or overtaken)", i, st.Bytes, st.Tag, len(want), i%3)
	}
	if string(got[:st.Bytes]) != string(want) {
		return fmt.Errorf("message %d: wrong contents (lost, duplicated or overtaken)", i)
	}
	return nil
}

// cancelRace sends msgs messages from rank 0 to rank 1 (tags 0..2, mixed
// sizes) while rank 1 receives them with recv, which may give up (ok
// false) at any moment, as a cancelled context makes it. Every message
// must arrive exactly once and in order: a receive withdrawn by its
// context must not have taken a message.
func cancelRace(t *testing.T, comms []*Comm, msgs int, recv func(c *Comm, buf []byte, i int) (Status, bool, error)) {
	t.Helper()
	each(t, comms[:2], func(c *Comm) error {
		if c.Rank() == 0 {
			for i := 0; i < msgs; i++ {
				if err := Send(c, seqMsg(i), 1, i%3); err != nil {
					return err
				}
			}
			return nil
		}
		buf := make([]byte, 300<<10)
		gaveUp := 0
		for i := 0; i < msgs; {
			st, ok, err := recv(c, buf, i)
			if err != nil {
				return fmt.Errorf("message %d: %w", i, err)
			}
			if !ok {
				gaveUp++
				continue
			}
			if err := checkSeq(i, buf, st); err != nil {
				return err
			}
			i++
		}
		// Nothing may be left over (a message both cancelled and kept).
		if ok, st, err := Iprobe[byte](c, AnySource, AnyTag); ok || err != nil {
			return fmt.Errorf("after %d messages: another one is waiting: %+v %v", msgs, st, err)
		}
		t.Logf("%d receives gave up", gaveUp)
		return nil
	})
}

// jitter is a short random wait, from nothing to ~200µs.
func jitter(rng *rand.Rand) time.Duration {
	return time.Duration(rng.Intn(200)) * time.Microsecond
}

// RecvContext cancelled while the matching message is in flight or just
// arrived: each message is received exactly once, in order.
func TestConcurRecvContextCancelRace(t *testing.T) {
	msgs := 300
	if testing.Short() {
		msgs = 100
	}
	transports(t, 2, func(c *Config) { c.EagerLimit = concurEager }, func(t *testing.T, comms []*Comm) {
		rng := rand.New(rand.NewSource(1))
		cancelRace(t, comms, msgs, func(c *Comm, buf []byte, i int) (Status, bool, error) {
			ctx, cancel := context.WithTimeout(context.Background(), jitter(rng))
			defer cancel()
			st, err := RecvContext(ctx, c, buf, 1-c.Rank(), i%3)
			if err != nil && errors.Is(err, ctx.Err()) {
				return st, false, nil
			}
			return st, true, err
		})
	})
}

// Irecv then Cancel at a random moment, from another goroutine than the
// one that waits.
func TestConcurIrecvCancelRace(t *testing.T) {
	msgs := 300
	if testing.Short() {
		msgs = 100
	}
	transports(t, 2, func(c *Config) { c.EagerLimit = concurEager }, func(t *testing.T, comms []*Comm) {
		rng := rand.New(rand.NewSource(2))
		cancelRace(t, comms, msgs, func(c *Comm, buf []byte, i int) (Status, bool, error) {
			var r *Request
			if i%2 == 0 {
				r = Irecv(c, buf, 0, AnyTag)
			} else {
				r = Irecv(c, buf, AnySource, i%3)
			}
			d := jitter(rng)
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(d)
				r.Cancel()
			}()
			st, err := r.Wait(context.Background())
			wg.Wait()
			if errors.Is(err, ErrCancelled) {
				return st, false, nil
			}
			return st, true, err
		})
	})
}

// MprobeContext and ProbeContext cancelled at random moments beside the
// receives: a probe never takes a message it gave up on.
func TestConcurProbeContextCancelRace(t *testing.T) {
	msgs := 200
	if testing.Short() {
		msgs = 70
	}
	transports(t, 2, func(c *Config) { c.EagerLimit = concurEager }, func(t *testing.T, comms []*Comm) {
		rng := rand.New(rand.NewSource(3))
		cancelRace(t, comms, msgs, func(c *Comm, buf []byte, i int) (Status, bool, error) {
			ctx, cancel := context.WithTimeout(context.Background(), jitter(rng))
			defer cancel()
			if i%2 == 0 {
				if _, err := ProbeContext[byte](ctx, c, 0, i%3); err != nil {
					if errors.Is(err, ctx.Err()) {
						return Status{}, false, nil
					}
					return Status{}, false, err
				}
				st, err := Recv(c, buf, 0, i%3)
				return st, true, err
			}
			m, _, err := MprobeContext[byte](ctx, c, 0, i%3)
			if err != nil {
				if errors.Is(err, ctx.Err()) {
					return Status{}, false, nil
				}
				return Status{}, false, err
			}
			st, err := Mrecv(m, buf)
			return st, true, err
		})
	})
}

// Free of a communicator while another goroutine of the rank blocks in a
// receive on it (against MPI's rule, but promised by Free's doc): the
// receive ends with ErrFreed instead of never. Sources of every kind: a
// named peer (same-host peers receive straight from the ring), AnySource,
// and a posted Irecv being waited for.
func TestConcurFreeWhileBlocked(t *testing.T) {
	forSizesTransports(t, func(t *testing.T, comms []*Comm) {
		each(t, comms, func(c *Comm) error {
			d, err := c.Dup()
			if err != nil {
				return err
			}
			n, me := d.Size(), d.Rank()
			srcs := []int{(me + 1) % n, AnySource}
			errs := make(chan error, 2*len(srcs))
			for _, src := range srcs {
				go func() {
					_, err := Recv(d, make([]byte, 8), src, 99)
					errs <- err
				}()
				// The first Recv (named source) alone with the ring:
				// it takes the direct path when it can.
				time.Sleep(20 * time.Millisecond)
				go func() {
					_, err := Irecv(d, make([]byte, 8), src, 98).Wait(context.Background())
					errs <- err
				}()
			}
			time.Sleep(50 * time.Millisecond) // the receives are blocked
			if err := d.Free(); err != nil {
				return err
			}
			// Blocked receives look at the ring's liveness every 100ms
			// (shm.DefaultPoll).
			timeout := time.After(3 * time.Second)
			for range 2 * len(srcs) {
				select {
				case err := <-errs:
					if !errors.Is(err, ErrFreed) {
						return fmt.Errorf("receive blocked on a freed communicator returned %v, want ErrFreed", err)
					}
				case <-timeout:
					return fmt.Errorf("a receive blocked on a communicator still waits 3s after Free")
				}
			}
			return nil
		})
	})
}
