package mpi

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"
)

// transportMods: shared memory, TCP (GOMPI_SHM=0's setting) and shared
// memory without cross-memory attach (GOMPI_CMA=0's).
var transportMods = []struct {
	name string
	mod  func(*Config)
}{
	{"shm", nil},
	{"tcp", func(c *Config) { c.NoSharedMemory = true }},
	{"nocma", func(c *Config) { c.NoCMA = true }},
}

// forSizesTransports runs f for 1..8 ranks on every transport.
func forSizesTransports(t *testing.T, f func(t *testing.T, comms []*Comm)) {
	for _, tr := range transportMods {
		for _, n := range collSizes {
			t.Run(tr.name+"/"+strconv.Itoa(n), func(t *testing.T) {
				comms, _ := world(t, n, tr.mod)
				f(t, comms)
			})
		}
	}
}

// afterFree checks that every kind of operation on a freed communicator
// ends at once with ErrFreed.
func afterFree(d *Comm) error {
	n := d.Size()
	peer := (d.Rank() + 1) % n
	buf := make([]float64, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, rerr := Irecv(d, buf, peer, 0).Wait(ctx)
	_, perr := Probe[float64](d, AnySource, AnyTag)
	_, serr := Isend(d, buf, peer, 0).Wait(ctx)
	_, rr := Recv(d, buf, peer, 0)
	errs := []error{Send(d, buf, peer, 0), rr, rerr, serr, perr, d.Free()}
	// Every collective, a communicator of one rank's too (those send
	// nothing, so only the communicator's own check can refuse them).
	all, all2 := make([]float64, 4*n), make([]float64, 4*n)
	ones := make([]int, n)
	for i := range ones {
		ones[i] = 1
	}
	_, ierr := d.Ibarrier().Wait(ctx)
	_, iaerr := Iallreduce(d, buf, buf, Sum).Wait(ctx)
	_, dupErr := d.Dup()
	_, splitErr := d.Split(0, 0)
	vErr := BcastValue(d, new(int), 0)
	_, agvErr := AllgatherValue(d, 1)
	_, gvErr := GatherValue(d, 1, 0)
	_, svErr := ScatterValue(d, ones, 0)
	_, avErr := AlltoallValue(d, ones)
	_, rvErr := ReduceValue(d, 1, func(a, b int) int { return a + b }, 0)
	_, arvErr := AllreduceValue(d, 1, func(a, b int) int { return a + b })
	_, igErr := Igather(d, buf, all, 0).Wait(ctx)
	_, ibErr := Ibcast(d, buf, 0).Wait(ctx)
	_, iscErr := Iscan(d, buf, all2[:len(buf)], Sum).Wait(ctx)
	displs := make([]int, n)
	for i := range displs {
		displs[i] = i
	}
	errs = append(errs, gvErr, svErr, avErr, rvErr, arvErr, igErr, ibErr, iscErr,
		Gatherv(d, buf[:1], all, ones, displs, 0), Scatterv(d, all, ones, displs, buf[:1], 0),
		Allgatherv(d, buf[:1], all, ones, displs), Alltoallv(d, all, ones, displs, all2, ones, displs),
		ReduceScatterBlock(d, all[:n], buf[:1], Sum))
	errs = append(errs, d.Barrier(), d.WithContext(ctx).Barrier(), Allreduce(d, buf, buf, Sum),
		Bcast(d, buf, 0), Reduce(d, buf, buf, Sum, 0), Gather(d, buf, all, 0),
		Allgather(d, buf, all), Scatter(d, all, buf, 0), Alltoall(d, all, all2),
		Scan(d, buf, buf, Sum), Exscan(d, buf, buf, Sum),
		ReduceScatter(d, all[:n], buf[:1], ones, Sum), ierr, iaerr, dupErr, splitErr,
		vErr, agvErr)
	var bad []error
	for i, err := range errs {
		if !errors.Is(err, ErrFreed) {
			bad = append(bad, fmt.Errorf("operation %d after Free: %v, want ErrFreed", i, err))
		}
	}
	return errors.Join(bad...)
}

// TestCommFree: a freed communicator refuses every operation; its
// undelivered messages are dropped; its context id is reused by the next
// Split, whose messages do not meet the old ones.
func TestCommFree(t *testing.T) {
	forSizesTransports(t, func(t *testing.T, comms []*Comm) {
		each(t, comms, func(c *Comm) error {
			if err := c.Free(); !errors.Is(err, ErrArg) {
				return fmt.Errorf("Free(world): %v, want ErrArg", err)
			}
			d, err := c.Dup()
			if err != nil {
				return err
			}
			n, r := d.Size(), d.Rank()
			buf := []float64{float64(r)}
			if err := Allreduce(d, buf, buf, Sum); err != nil {
				return err
			}
			// A message nobody receives (eager), and a long one received.
			if err := Send(d, []int64{int64(r)}, (r+1)%n, 7); err != nil {
				return err
			}
			long := make([]byte, 256<<10)
			if n > 1 && r == 0 {
				if err := Send(d, long, 1, 8); err != nil {
					return err
				}
			} else if n > 1 && r == 1 {
				if _, err := Recv(d, long, 0, 8); err != nil {
					return err
				}
			}
			old := d.ctx
			if err := d.Free(); err != nil {
				return err
			}
			if err := afterFree(d); err != nil {
				return err
			}
			e, err := c.Dup()
			if err != nil {
				return err
			}
			if e.ctx != old {
				return fmt.Errorf("Dup after Free got context %d, want the freed %d", e.ctx>>1, old>>1)
			}
			if ok, st, err := Iprobe[int64](e, AnySource, AnyTag); ok || err != nil {
				return fmt.Errorf("the freed communicator's message reached its successor: %+v %v", st, err)
			}
			if err := c.Barrier(); err != nil { // every rank probed before anyone sends on e
				return err
			}
			v := []int64{-1}
			if err := Send(e, []int64{int64(100 + r)}, (r+1)%n, 7); err != nil {
				return err
			}
			if _, err := Recv(e, v, (r-1+n)%n, 7); err != nil || v[0] != int64(100+(r-1+n)%n) {
				return fmt.Errorf("successor got %v %v", v, err)
			}
			return e.Free()
		})
	})
}

// TestCommFreeUneven: ids freed on some ranks only are not reused where
// another member still uses them.
func TestCommFreeUneven(t *testing.T) {
	comms, _ := world(t, 6, nil)
	each(t, comms, func(c *Comm) error {
		half, err := c.Split(c.Rank()%2, 0)
		if err != nil {
			return err
		}
		if c.Rank()%2 == 0 {
			if err := half.Free(); err != nil {
				return err
			}
		}
		d, err := c.Dup()
		if err != nil {
			return err
		}
		if d.ctx == half.ctx {
			return fmt.Errorf("Dup reused context %d, still used by the odd half", d.ctx>>1)
		}
		// Both live communicators work side by side on the odd ranks.
		buf := []int{1}
		if err := Allreduce(d, buf, buf, Sum); err != nil || buf[0] != 6 {
			return fmt.Errorf("dup allreduce %v %v", buf, err)
		}
		if c.Rank()%2 == 1 {
			buf[0] = 1
			if err := Allreduce(half, buf, buf, Sum); err != nil || buf[0] != 3 {
				return fmt.Errorf("half allreduce %v %v", buf, err)
			}
			if err := half.Free(); err != nil {
				return err
			}
		}
		// Now the id is free everywhere: the next Split takes it.
		e, err := c.Split(0, -c.Rank())
		if err != nil {
			return err
		}
		if e.ctx != half.ctx {
			return fmt.Errorf("Split got context %d, want the freed %d", e.ctx>>1, half.ctx>>1)
		}
		return nil
	})
}

// TestCommFreeNodeAware frees a two-level communicator (with host and
// leader sub-communicators) and checks its successor's collectives.
func TestCommFreeNodeAware(t *testing.T) {
	comms := hostsWorld(t, "AABBBC")
	each(t, comms, func(c *Comm) error {
		for i := 0; i < 3; i++ {
			d, err := c.Dup()
			if err != nil {
				return err
			}
			buf := []int{d.Rank()}
			if err := Allreduce(d, buf, buf, Sum); err != nil || buf[0] != 15 {
				return fmt.Errorf("round %d: allreduce %v %v", i, buf, err)
			}
			if d.node == nil || !d.node.twoLevel {
				return fmt.Errorf("round %d: not two-level", i)
			}
			if err := d.Free(); err != nil {
				return err
			}
			if err := afterFree(d); err != nil {
				return err
			}
		}
		return nil
	})
}

// TestSplitType: CommTypeShared gives one communicator per pretend host;
// Undefined takes part and gets nil; other types are refused.
func TestSplitType(t *testing.T) {
	const hosts = "AABBBCAB"
	comms := hostsWorld(t, hosts)
	each(t, comms, func(c *Comm) error {
		if _, err := c.SplitType(7, 0); !errors.Is(err, ErrArg) {
			return fmt.Errorf("SplitType(7): %v, want ErrArg", err)
		}
		typ := CommTypeShared
		if c.Rank() == 7 {
			typ = Undefined
		}
		s, err := c.SplitType(typ, -c.Rank())
		if err != nil {
			return err
		}
		if c.Rank() == 7 {
			if s != nil {
				return fmt.Errorf("Undefined got a communicator")
			}
			return nil
		}
		var want []int // my host's ranks, by descending rank (key)
		for r := len(hosts) - 2; r >= 0; r-- {
			if hosts[r] == hosts[c.Rank()] {
				want = append(want, r)
			}
		}
		got := s.Group().WorldRanks()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("shared communicator %v, want %v", got, want)
		}
		return s.Free()
	})
}

// Free ends by discarding what is still queued on the communicator. A
// member that died after its part of the exchange must not fail that (CI
// saw a member's Free fail with the *PeerError of a rank that had
// completed the same Free and exited): here rank 2 dies with a message
// rank 0 never receives, and rank 0's discarding succeeds and empties the
// queue.
func TestFreeDrainAfterMemberDied(t *testing.T) {
	for _, tr := range transportMods {
		t.Run(tr.name, func(t *testing.T) {
			comms, _ := world(t, 3, tr.mod)
			subs := make([]*Comm, 3)
			each(t, comms, func(c *Comm) error {
				s, err := c.Dup()
				subs[c.Rank()] = s
				return err
			})
			if err := Send(subs[2], []byte("never received"), 0, 9); err != nil {
				t.Fatal(err)
			}
			if _, err := Probe[byte](subs[0], 2, 9); err != nil {
				t.Fatal(err)
			}
			killProc(comms[2].p)
			e := comms[0].p.eng
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(time.Millisecond) {
				e.mu.Lock()
				_, known := e.failed[2]
				e.mu.Unlock()
				if known {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("rank 0 did not learn of rank 2's death")
				}
			}
			if err := subs[0].drain(subs[0].ctx); err != nil {
				t.Fatalf("discarding after a member died: %v", err)
			}
			e.mu.Lock()
			left := e.unexpected.len()
			e.mu.Unlock()
			if left != 0 {
				t.Fatalf("%d messages left after the drain", left)
			}
		})
	}
}

// TestFreeEndsPendingReceives: a receive left pending on a communicator
// when it is freed ends with ErrFreed (it used to stay pending for ever,
// and a blocking Recv in another goroutine with it).
func TestFreeEndsPendingReceives(t *testing.T) {
	kinds := []struct {
		name  string
		start func(d *Comm) *Request
	}{
		{"irecv", func(d *Comm) *Request { return Irecv(d, make([]int, 1), (d.Rank()+1)%d.Size(), 1) }},
		{"irecv any", func(d *Comm) *Request { return Irecv(d, make([]int, 1), AnySource, AnyTag) }},
		{"recv", func(d *Comm) *Request {
			return Go(func() (Status, error) { return Recv(d, make([]int, 1), AnySource, 2) })
		}},
		{"recvvalue", func(d *Comm) *Request {
			return Go(func() (Status, error) { return d.RecvValue(new(int), AnySource, 3) })
		}},
		{"persistent", func(d *Comm) *Request {
			p, err := RecvInit(d, make([]int, 1), AnySource, 4)
			if err != nil {
				return doneRequest(err)
			}
			if err := p.Start(); err != nil {
				return doneRequest(err)
			}
			return p.Request()
		}},
	}
	forSizesTransports(t, func(t *testing.T, comms []*Comm) {
		each(t, comms, func(c *Comm) error {
			d, err := c.Dup()
			if err != nil {
				return err
			}
			reqs := make([]*Request, len(kinds))
			for i, k := range kinds {
				reqs[i] = k.start(d)
			}
			// Let the goroutines' receives be posted before Free.
			for _, r := range reqs {
				if r.isDone() {
					return fmt.Errorf("a receive ended before Free")
				}
			}
			time.Sleep(10 * time.Millisecond)
			if err := d.Free(); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			for i, r := range reqs {
				_, err := r.Wait(ctx)
				if !errors.Is(err, ErrFreed) {
					return fmt.Errorf("%s pending at Free: %v, want ErrFreed", kinds[i].name, err)
				}
			}
			if c.Size() < 2 {
				return nil
			}
			// An intercommunicator between the even and the odd ranks.
			half := c.Rank() % 2
			local, err := c.Split(half, c.Rank())
			if err != nil {
				return err
			}
			ic, err := local.InterCommCreate(0, c, 1-half, 5)
			if err != nil {
				return err
			}
			r := Irecv(ic, make([]int, 1), AnySource, AnyTag)
			if err := ic.Free(); err != nil {
				return err
			}
			if _, err := r.Wait(ctx); !errors.Is(err, ErrFreed) {
				return fmt.Errorf("irecv pending at an intercommunicator's Free: %v, want ErrFreed", err)
			}
			return local.Free()
		})
	})
}

// TestFreeWithPendingCollectives: non-blocking collectives still running
// when their communicator is freed complete normally (MPI_Comm_free: "any
// pending operations that use this communicator will complete
// normally"), on intra- and intercommunicators; they used to fail with
// ErrFreed, or leave a rank waiting.
func TestFreeWithPendingCollectives(t *testing.T) {
	for _, n := range []int{2, 3, 5} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			transports(t, n, nil, func(t *testing.T, comms []*Comm) {
				each(t, comms, func(c *Comm) error {
					for i := 0; i < 10; i++ {
						d, err := c.Dup()
						if err != nil {
							return err
						}
						out, b := make([]int, 1), []int{c.Rank()}
						reqs := []*Request{d.Ibarrier(), Iallreduce(d, []int{1}, out, Sum), Ibcast(d, b, n-1)}
						if err := d.Free(); err != nil {
							return fmt.Errorf("round %d: free: %w", i, err)
						}
						if _, err := WaitAll(bg, reqs...); err != nil || out[0] != n || b[0] != n-1 {
							return fmt.Errorf("round %d: collectives pending at Free: %v %v, %w", i, out, b, err)
						}
					}
					ic, _, _, _, err := makeInter(c)
					if err != nil {
						return err
					}
					r := ic.Ibarrier()
					if err := ic.Free(); err != nil {
						return fmt.Errorf("intercommunicator free: %w", err)
					}
					if _, err := r.Wait(bg); err != nil {
						return fmt.Errorf("intercommunicator Ibarrier pending at Free: %w", err)
					}
					return nil
				})
			})
		})
	}
}

// TestFreeAfterFailedCollective: when a member's non-blocking collective
// failed (its context ended) before Free, the others' copies of it may
// never complete; Free must still return on every member and end them
// (ErrFreed), not wait for them.
func TestFreeAfterFailedCollective(t *testing.T) {
	for _, n := range []int{2, 3, 5} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			transports(t, n, nil, func(t *testing.T, comms []*Comm) {
				each(t, comms, func(c *Comm) error {
					d, err := c.Dup()
					if err != nil {
						return err
					}
					v := d
					if c.Rank() == 0 {
						ctx, cancel := context.WithCancel(context.Background())
						cancel()
						v = d.WithContext(ctx)
					}
					out := make([]int, 1<<10)
					r := Iallreduce(v, make([]int, 1<<10), out, Sum)
					if c.Rank() == 0 {
						// It fails, unless it completed before looking at
						// its context.
						if _, err := r.Wait(bg); err != nil && !errors.Is(err, context.Canceled) {
							return fmt.Errorf("cancelled collective: %v", err)
						}
					}
					if err := d.Free(); err != nil {
						return fmt.Errorf("free: %w", err)
					}
					if _, err := r.Wait(bg); err != nil && !errors.Is(err, ErrFreed) && !errors.Is(err, context.Canceled) {
						return fmt.Errorf("collective left behind: %v, want success or ErrFreed", err)
					}
					return nil
				})
			})
		})
	}
}
