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

// Non-overtaking with several receiving goroutines: every other rank
// sends seqMsg messages to rank 0 from one goroutine, mixed sizes, on
// tags 0..2 of c; rank 0 receives each tag on its own goroutine with a
// named source (blocking, Irecv, RecvContext in turn), so each must see
// its tag's messages in order. Meanwhile every rank also sends to rank 0
// on a Dup'd communicator, where goroutines receive AnySource/AnyTag:
// each message exactly once.
func TestConcurOrderingGoroutines(t *testing.T) {
	const msgs = 60
	for _, tr := range transportMods {
		for _, n := range []int{2, 3, 5} {
			t.Run(fmt.Sprintf("%s/%d", tr.name, n), func(t *testing.T) {
				comms, _ := world(t, n, func(c *Config) {
					c.EagerLimit = concurEager
					if tr.mod != nil {
						tr.mod(c)
					}
				})
				each(t, comms, func(c *Comm) error { return orderingRank(c, msgs) })
			})
		}
	}
}

func orderingRank(c *Comm, msgs int) error {
	d, err := c.Dup()
	if err != nil {
		return err
	}
	defer d.Free()
	n := c.Size()
	var wg sync.WaitGroup
	errs := make(chan error, 3*n+8)
	run := func(f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil {
				errs <- err
			}
		}()
	}
	if c.Rank() != 0 {
		run(func() error {
			for i := 0; i < msgs; i++ {
				if err := Send(c, seqMsg(i), 0, i%3); err != nil {
					return err
				}
			}
			return nil
		})
		run(func() error {
			for i := 0; i < msgs; i++ {
				if err := Send(d, seqMsg(i)[:min(8, len(seqMsg(i)))], 0, 10+i%2); err != nil {
					return err
				}
			}
			return nil
		})
	} else {
		for src := 1; src < n; src++ {
			for tag := 0; tag < 3; tag++ {
				run(func() error {
					buf := make([]byte, 300<<10)
					for i := tag; i < msgs; i += 3 {
						var st Status
						var err error
						switch i / 3 % 3 {
						case 0:
							st, err = Recv(c, buf, src, tag)
						case 1:
							st, err = Irecv(c, buf, src, tag).Wait(context.Background())
						default:
							st, err = RecvContext(context.Background(), c, buf, src, tag)
						}
						if err != nil {
							return err
						}
						if err := checkSeq(i, buf, st); err != nil {
							return fmt.Errorf("from %d: %w", src, err)
						}
					}
					return nil
				})
			}
		}
		var mu sync.Mutex
		seen := map[[2]int]int{}
		total := (n - 1) * msgs
		var left sync.WaitGroup
		left.Add(total)
		for g := 0; g < 3; g++ {
			run(func() error {
				buf := make([]byte, 8)
				for {
					var st Status
					var err error
					if g == 0 {
						st, err = Recv(d, buf, AnySource, AnyTag)
					} else {
						st, err = RecvContext(context.Background(), d, buf, AnySource, AnyTag)
					}
					if err != nil {
						return err
					}
					if st.Tag == 99 {
						return nil
					}
					i := 0
					if st.Bytes == 8 {
						i = int(binary.LittleEndian.Uint64(buf))
					}
					mu.Lock()
					seen[[2]int{st.Source, i}]++
					mu.Unlock()
					left.Done()
				}
			})
		}
		left.Wait()
		for g := 0; g < 3; g++ {
			if err := Send(d, []byte{}, 0, 99); err != nil {
				return err
			}
		}
		wg.Wait()
		for src := 1; src < n; src++ {
			// Messages 0 (empty) and 1.. are told apart by size only
			// when they have 8 bytes; seqMsg(0) is empty.
			for i := 1; i < msgs; i++ {
				if len(seqMsg(i)) >= 8 && seen[[2]int{src, i}] != 1 {
					return fmt.Errorf("AnySource receives got message %d from %d %d times", i, src, seen[[2]int{src, i}])
				}
			}
		}
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// Dup on two different communicators at once, from two goroutines of
// every rank (MPI_THREAD_MULTIPLE allows collectives on different
// communicators concurrently): the two new communicators must be
// separate message spaces. A message sent on one must never be received
// on the other.
func TestConcurDupDisjoint(t *testing.T) {
	rounds := 8
	if testing.Short() {
		rounds = 3
	}
	forSizesTransports(t, func(t *testing.T, comms []*Comm) {
		each(t, comms, func(c *Comm) error {
			a, err := c.Dup()
			if err != nil {
				return err
			}
			b, err := c.Dup()
			if err != nil {
				return err
			}
			n, me := c.Size(), c.Rank()
			to, from := (me+1)%n, (me+n-1)%n
			for round := 0; round < rounds; round++ {
				var a2, b2 *Comm
				var ea, eb error
				var wg sync.WaitGroup
				wg.Add(2)
				go func() { defer wg.Done(); a2, ea = a.Dup() }()
				go func() { defer wg.Done(); b2, eb = b.Dup() }()
				wg.Wait()
				if err := errors.Join(ea, eb); err != nil {
					return err
				}
				// The message on a2 goes first; b2's receive must not
				// take it.
				if err := Send(a2, []byte{'a'}, to, 0); err != nil {
					return err
				}
				if err := Send(b2, []byte{'b'}, to, 0); err != nil {
					return err
				}
				got := make([]byte, 1)
				if _, err := Recv(b2, got, from, 0); err != nil || got[0] != 'b' {
					return fmt.Errorf("round %d: receive on one Dup got %q (%v) sent on another made concurrently", round, got, err)
				}
				if _, err := Recv(a2, got, from, 0); err != nil || got[0] != 'a' {
					return fmt.Errorf("round %d: receive on one Dup got %q (%v) sent on another made concurrently", round, got, err)
				}
				if err := errors.Join(a2.Free(), b2.Free()); err != nil {
					return err
				}
			}
			return errors.Join(a.Free(), b.Free())
		})
	})
}

// As TestConcurDupDisjoint for intercommunicators: Dup of one and Merge
// of another at once, on two goroutines of every rank, with an
// intracommunicator's Dup on a third.
func TestConcurInterDupDisjoint(t *testing.T) {
	for _, tr := range transportMods {
		for _, n := range []int{2, 3, 4, 8} {
			t.Run(fmt.Sprintf("%s/%d", tr.name, n), func(t *testing.T) {
				comms, _ := world(t, n, tr.mod)
				each(t, comms, func(c *Comm) error {
					ia, _, _, _, err := makeInter(c)
					if err != nil {
						return err
					}
					ib, _, _, _, err := makeInter(c)
					if err != nil {
						return err
					}
					var ia2, ib2, wd *Comm
					var e1, e2, e3 error
					var wg sync.WaitGroup
					wg.Add(3)
					go func() { defer wg.Done(); ia2, e1 = ia.Dup() }()
					go func() { defer wg.Done(); ib2, e2 = ib.Dup() }()
					go func() { defer wg.Done(); wd, e3 = c.Dup() }()
					wg.Wait()
					if err := errors.Join(e1, e2, e3); err != nil {
						return err
					}
					// Every member sends to remote rank 0 on ia2, then
					// on ib2, then to world rank 0 on wd; receivers take
					// them in the other order.
					for _, s := range []struct {
						c  *Comm
						b  byte
						to int
					}{{ia2, 'a', 0}, {ib2, 'b', 0}, {wd, 'w', 0}} {
						if err := Send(s.c, []byte{s.b}, s.to, 5); err != nil {
							return err
						}
					}
					got := make([]byte, 1)
					if c.Rank() == 0 {
						for r := 0; r < n; r++ {
							if _, err := Recv(wd, got, r, 5); err != nil || got[0] != 'w' {
								return fmt.Errorf("receive on a Dup got %q (%v), sent on a communicator made concurrently", got, err)
							}
						}
					}
					if ia2.Rank() == 0 {
						for _, s := range []struct {
							c *Comm
							b byte
						}{{ib2, 'b'}, {ia2, 'a'}} {
							for r := 0; r < s.c.RemoteSize(); r++ {
								if _, err := Recv(s.c, got, r, 5); err != nil || got[0] != s.b {
									return fmt.Errorf("receive on an intercommunicator got %q (%v), sent on another made concurrently", got, err)
								}
							}
						}
					}
					return errors.Join(ia2.Free(), ib2.Free(), wd.Free(), ia.Free(), ib.Free())
				})
			})
		}
	}
}
