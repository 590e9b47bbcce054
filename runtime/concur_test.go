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

// onPair runs f on two ranks over every transport, with these tests'
// small eager limit, and msgs messages (short of them under -short).
func onPair(t *testing.T, msgs, short int, f func(t *testing.T, comms []*Comm, msgs int)) {
	if testing.Short() {
		msgs = short
	}
	transports(t, 2, func(c *Config) { c.EagerLimit = concurEager }, func(t *testing.T, comms []*Comm) { f(t, comms, msgs) })
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
	onPair(t, 300, 100, func(t *testing.T, comms []*Comm, msgs int) {
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
	onPair(t, 300, 100, func(t *testing.T, comms []*Comm, msgs int) {
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
	onPair(t, 200, 70, func(t *testing.T, comms []*Comm, msgs int) {
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

// Collectives on several Dup'd communicators at once, one goroutine
// each, beside point-to-point traffic on the parent (AnySource receives
// included) and non-blocking collectives on another Dup: every result
// right, no message crossing between them.
func TestConcurCollectivesOnDups(t *testing.T) {
	rounds := 20
	if testing.Short() {
		rounds = 6
	}
	forSizesTransports(t, func(t *testing.T, comms []*Comm) {
		each(t, comms, func(c *Comm) error {
			const k = 3
			dups := make([]*Comm, k+1)
			for i := range dups {
				d, err := c.Dup()
				if err != nil {
					return err
				}
				dups[i] = d
			}
			n, me := c.Size(), c.Rank()
			var wg sync.WaitGroup
			errs := make(chan error, k+3)
			run := func(f func() error) {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := f(); err != nil {
						errs <- err
					}
				}()
			}
			for g := 0; g < k; g++ {
				d := dups[g]
				run(func() error {
					for r := 0; r < rounds; r++ {
						in := []int64{int64(me + g*1000 + r)}
						out := make([]int64, 1)
						if err := Allreduce(d, in, out, Sum); err != nil {
							return err
						}
						if want := int64(n*(n-1)/2 + n*(g*1000+r)); out[0] != want {
							return fmt.Errorf("dup %d round %d: allreduce %d, want %d", g, r, out[0], want)
						}
						b := make([]int32, 1+r*50) // eager and rendezvous
						if me == r%n {
							for i := range b {
								b[i] = int32(g*100000 + r + i)
							}
						}
						if err := Bcast(d, b, r%n); err != nil {
							return err
						}
						for i := range b {
							if b[i] != int32(g*100000+r+i) {
								return fmt.Errorf("dup %d round %d: bcast[%d] = %d", g, r, i, b[i])
							}
						}
						all, err := AllgatherValue(d, fmt.Sprint(g, me))
						if err != nil {
							return err
						}
						for i, s := range all {
							if s != fmt.Sprint(g, i) {
								return fmt.Errorf("dup %d round %d: allgather[%d] = %q", g, r, i, s)
							}
						}
						if err := d.Barrier(); err != nil {
							return err
						}
					}
					return nil
				})
			}
			run(func() error { // non-blocking collectives on their own Dup
				d := dups[k]
				for r := 0; r < rounds; r++ {
					out := make([]float64, 3)
					r1 := Iallreduce(d, []float64{1, float64(me), float64(r)}, out, Sum)
					r2 := d.Ibarrier()
					if _, err := WaitAll(context.Background(), r2, r1); err != nil {
						return err
					}
					if out[0] != float64(n) || out[1] != float64(n*(n-1)/2) || out[2] != float64(n*r) {
						return fmt.Errorf("iallreduce round %d: %v", r, out)
					}
				}
				return nil
			})
			run(func() error { // point-to-point on the parent
				to := (me + 1) % n
				for r := 0; r < rounds; r++ {
					out := make([]byte, 1+(r%3)*400)
					out[0] = byte(r)
					in := make([]byte, 1300)
					st, err := Sendrecv(c, out, to, 7, in, AnySource, AnyTag)
					if err != nil {
						return err
					}
					if st.Tag != 7 || st.Bytes != len(out) || in[0] != byte(r) {
						return fmt.Errorf("p2p round %d: %+v first byte %d", r, st, in[0])
					}
				}
				return nil
			})
			wg.Wait()
			close(errs)
			if err := <-errs; err != nil {
				return err
			}
			for _, d := range dups {
				if err := d.Free(); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// One request waited for by several goroutines at once (Wait helping on
// the ring, Wait with a context, Test polling, Done in a select) and
// waited for again after: all see the same result. WaitAny and WaitSome
// skip nil and consumed requests.
func TestConcurWaitFromManyGoroutines(t *testing.T) {
	onPair(t, 60, 20, func(t *testing.T, comms []*Comm, msgs int) {
		each(t, comms, func(c *Comm) error {
			if c.Rank() == 0 {
				for i := 0; i < msgs; i++ {
					if err := Send(c, seqMsg(i), 1, i%3); err != nil {
						return err
					}
				}
				return nil
			}
			for i := 0; i < msgs; i++ {
				buf := make([]byte, 300<<10)
				var r *Request
				if i%2 == 0 {
					r = Irecv(c, buf, 0, i%3)
				} else {
					r = Irecv(c, buf, AnySource, AnyTag)
				}
				sts := make([]Status, 4)
				errs := make([]error, 4)
				var wg sync.WaitGroup
				wg.Add(4)
				go func() { defer wg.Done(); sts[0], errs[0] = r.Wait(context.Background()) }()
				go func() {
					defer wg.Done()
					for {
						ctx, cancel := context.WithTimeout(context.Background(), 50*time.Microsecond)
						sts[1], errs[1] = r.Wait(ctx)
						cancel()
						if errs[1] == nil || !errors.Is(errs[1], context.DeadlineExceeded) {
							return
						}
					}
				}()
				go func() {
					defer wg.Done()
					for {
						if ok, st, err := r.Test(); ok {
							sts[2], errs[2] = st, err
							return
						}
						time.Sleep(10 * time.Microsecond)
					}
				}()
				go func() {
					defer wg.Done()
					<-r.Done()
					_, sts[3], errs[3] = r.Test()
				}()
				wg.Wait()
				for g := range sts {
					if errs[g] != nil || sts[g] != sts[0] {
						return fmt.Errorf("message %d: waiter %d saw %+v %v, waiter 0 %+v %v", i, g, sts[g], errs[g], sts[0], errs[0])
					}
				}
				if err := checkSeq(i, buf, sts[0]); err != nil {
					return err
				}
				if st, err := r.Wait(context.Background()); err != nil || st != sts[0] {
					return fmt.Errorf("message %d: second Wait %+v %v", i, st, err)
				}
				reqs := []*Request{nil, r, nil}
				if j, st, err := WaitAny(context.Background(), reqs...); j != 1 || st != sts[0] || err != nil || reqs[1] != nil {
					return fmt.Errorf("message %d: WaitAny of a completed request: %d %+v %v", i, j, st, err)
				}
				if j, _, err := WaitAny(context.Background(), reqs...); j != -1 || err != nil {
					return fmt.Errorf("message %d: WaitAny of consumed requests: %d %v", i, j, err)
				}
				if ids, _, err := WaitSome(context.Background(), reqs...); len(ids) != 0 || err != nil {
					return fmt.Errorf("message %d: WaitSome of consumed requests: %v %v", i, ids, err)
				}
			}
			return nil
		})
	})
}

// Concurrent Dups that ranks make in different orders: even ranks make
// three at once on three goroutines, odd ranks one after the other in
// reverse order. Each must complete (no rank may hold anything across a
// Split that another Split waits for) with separate message spaces.
func TestConcurDupOrders(t *testing.T) {
	for _, tr := range transportMods {
		for _, n := range []int{2, 3, 4} {
			t.Run(fmt.Sprintf("%s/%d", tr.name, n), func(t *testing.T) {
				comms, _ := world(t, n, tr.mod)
				each(t, comms, func(c *Comm) error {
					const k = 3
					par := make([]*Comm, k)
					for i := range par {
						d, err := c.Dup()
						if err != nil {
							return err
						}
						par[i] = d
					}
					kids := make([]*Comm, k)
					errs := make([]error, k)
					if c.Rank()%2 == 0 {
						var wg sync.WaitGroup
						for i := range par {
							wg.Add(1)
							go func() { defer wg.Done(); kids[i], errs[i] = par[i].Dup() }()
						}
						wg.Wait()
					} else {
						for i := k - 1; i >= 0; i-- {
							kids[i], errs[i] = par[i].Dup()
						}
					}
					if err := errors.Join(errs...); err != nil {
						return err
					}
					to, from := (c.Rank()+1)%n, (c.Rank()+n-1)%n
					for i, d := range kids {
						if err := Send(d, []byte{byte(i)}, to, 0); err != nil {
							return err
						}
					}
					for i := k - 1; i >= 0; i-- {
						got := make([]byte, 1)
						if _, err := Recv(kids[i], got, from, 0); err != nil || got[0] != byte(i) {
							return fmt.Errorf("receive on Dup %d got %v (%v), sent on another", i, got, err)
						}
					}
					for _, d := range append(kids, par...) {
						if err := d.Free(); err != nil {
							return err
						}
					}
					return nil
				})
			})
		}
	}
}
