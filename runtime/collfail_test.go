package mpi

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// collFailOps are collectives every survivor enters after a member died;
// each runs on its own communicator (a Dup made while all were alive), so
// each meets the failure afresh. Sizes reach both the small-message
// algorithms and the large ones (rings, rendezvous).
var collFailOps = []struct {
	name string
	f    func(c *Comm) error
}{
	{"barrier", func(c *Comm) error { return c.Barrier() }},
	{"bcast", func(c *Comm) error { return Bcast(c, make([]byte, 64), 0) }},
	{"bcast-large", func(c *Comm) error { return Bcast(c, make([]byte, 256<<10), 0) }},
	{"allreduce", func(c *Comm) error { v := []int64{1}; return Allreduce(c, v, v, Sum) }},
	{"allreduce-large", func(c *Comm) error { v := make([]float64, 32<<10); return Allreduce(c, v, v, Sum) }},
	{"allgather", func(c *Comm) error { return Allgather(c, []int32{1}, make([]int32, c.Size())) }},
	{"allgather-large", func(c *Comm) error {
		return Allgather(c, make([]byte, 64<<10), make([]byte, 64<<10*c.Size()))
	}},
	{"alltoall", func(c *Comm) error { return Alltoall(c, make([]int32, c.Size()), make([]int32, c.Size())) }},
	{"alltoall-large", func(c *Comm) error {
		return Alltoall(c, make([]byte, 40<<10*c.Size()), make([]byte, 40<<10*c.Size()))
	}},
	{"iallreduce", func(c *Comm) error {
		v := []int64{1}
		_, err := Iallreduce(c, v, v, Sum).Wait(context.Background())
		return err
	}},
}

// collFailDeadline bounds every survivor's call: a failure must end it in
// seconds, not never.
const collFailDeadline = 20 * time.Second

// shortGrace shortens famGrace for the test: every collective of these
// tests waits it out on the members that did not meet the dead rank.
func shortGrace(t *testing.T) {
	old := famGrace.Swap(int64(50 * time.Millisecond))
	t.Cleanup(func() { famGrace.Store(old) })
}

// survivorsRun runs f on every rank but dead, concurrently, and returns
// their errors; it fails the test if one has not returned in time.
func survivorsRun(t *testing.T, comms []*Comm, dead int, what string, f func(r int) error) []error {
	t.Helper()
	errs := make([]error, len(comms))
	left := make(chan int, len(comms))
	var wg sync.WaitGroup
	for r := range comms {
		if r == dead {
			continue
		}
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			errs[r] = f(r)
			left <- r
		}(r)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(collFailDeadline):
		back := map[int]bool{}
		for len(left) > 0 {
			back[<-left] = true
		}
		var hung []int
		for r := range comms {
			if r != dead && !back[r] {
				hung = append(hung, r)
			}
		}
		t.Fatalf("%s: ranks %v did not return within %v (rank %d not taking part)", what, hung, collFailDeadline, dead)
	}
	return errs
}

// wantPeerError checks that every survivor's error names the dead rank.
func wantPeerError(t *testing.T, what string, errs []error, dead int) {
	t.Helper()
	for r, err := range errs {
		if r == dead {
			continue
		}
		var pe *PeerError
		if !errors.As(err, &pe) || pe.Rank != dead {
			t.Errorf("%s: rank %d: %v, want a *PeerError naming rank %d", what, r, err, dead)
		}
	}
}

// A member dies before the others enter a collective: every survivor's
// call returns its *PeerError, also those that exchange no message with it
// (they used to wait forever for members that had returned the error).
// With the links made first (warm) and without (cold: the first contact
// with the dead rank is during the collective), on every transport.
func TestCollMemberDiesEverySurvivorFails(t *testing.T) {
	shortGrace(t)
	for _, n := range []int{3, 4, 8} {
		for _, warm := range []bool{true, false} {
			t.Run(fmt.Sprintf("n=%d/warm=%v", n, warm), func(t *testing.T) {
				transports(t, n, nil, func(t *testing.T, comms []*Comm) {
					dead := n / 2
					dups := dupPerOp(t, comms, warm)
					killProc(comms[dead].p)
					for i, op := range collFailOps {
						errs := survivorsRun(t, comms, dead, op.name, func(r int) error { return op.f(dups[i][r]) })
						wantPeerError(t, op.name, errs, dead)
					}
					// A later collective on a communicator that saw the
					// failure fails at once, on every survivor.
					errs := survivorsRun(t, comms, dead, "later allreduce", func(r int) error {
						v := []int64{1}
						return Allreduce(dups[3][r], v, v, Sum)
					})
					wantPeerError(t, "later allreduce", errs, dead)
				})
			})
		}
	}
}

// A member dies while the others are inside a collective (they entered it
// first, and wait for it).
func TestCollMemberDiesDuring(t *testing.T) {
	shortGrace(t)
	transports(t, 8, nil, func(t *testing.T, comms []*Comm) {
		dead := 5
		each(t, comms, func(c *Comm) error { return c.Barrier() })
		go func() {
			time.Sleep(200 * time.Millisecond)
			killProc(comms[dead].p)
		}()
		errs := survivorsRun(t, comms, dead, "allreduce", func(r int) error {
			v := make([]float64, 1<<10)
			return Allreduce(comms[r], v, v, Sum)
		})
		wantPeerError(t, "allreduce", errs, dead)
	})
}

// Non-blocking collectives still running when the members enter Free, and
// a member that dies after the others' Free exchange: the survivors'
// requests and their Free end (the requests with the dead rank's
// *PeerError) instead of Free waiting for collectives that cannot
// complete.
func TestCollMemberDiesDuringFree(t *testing.T) {
	shortGrace(t)
	transports(t, 4, nil, func(t *testing.T, comms []*Comm) {
		dead := 2
		dups := make([]*Comm, 4)
		each(t, comms, func(c *Comm) error {
			d, err := c.Dup()
			dups[c.Rank()] = d
			return err
		})
		reqs := make([]*Request, 4)
		for r, d := range dups {
			if r != dead {
				v := []int64{1}
				reqs[r] = Iallreduce(d, v, v, Sum)
			}
		}
		freeErrs := make([]error, 4)
		var wg sync.WaitGroup
		for r, d := range dups {
			if r != dead {
				wg.Add(1)
				go func(r int, d *Comm) { defer wg.Done(); freeErrs[r] = d.Free() }(r, d)
			}
		}
		// The dead rank takes part in Free's exchange (so the others
		// see no failure there and wait for their collectives), then dies
		// without starting its collective.
		time.Sleep(100 * time.Millisecond)
		go func() {
			failed, err := dups[dead].flagExchange(0)
			if err == nil && !failed {
				killProc(comms[dead].p)
			}
		}()
		errs := survivorsRun(t, comms, dead, "Iallreduce", func(r int) error {
			_, err := reqs[r].Wait(context.Background())
			return err
		})
		wantPeerError(t, "Iallreduce", errs, dead)
		survivorsRun(t, comms, dead, "Free", func(r int) error { wg.Wait(); return nil })
	})
}

// Survivors run every collective in turn, without waiting for each other,
// and finalize as soon as they are done: a survivor that finalized early
// must not make another's collective fail naming it instead of the dead
// rank (the notices reach that one before the finalize does).
func TestCollMemberDiesSurvivorsFinalize(t *testing.T) {
	shortGrace(t)
	for _, n := range []int{3, 8} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			transports(t, n, nil, func(t *testing.T, comms []*Comm) {
				dead := n / 2
				dups := dupPerOp(t, comms, false)
				killProc(comms[dead].p)
				errs := survivorsRun(t, comms, dead, "collectives", func(r int) error {
					defer comms[r].Finalize()
					for i, op := range collFailOps {
						err := op.f(dups[i][r])
						var pe *PeerError
						if !errors.As(err, &pe) || pe.Rank != dead {
							return fmt.Errorf("%s: %w", op.name, err)
						}
					}
					return &PeerError{Rank: dead}
				})
				wantPeerError(t, "collectives", errs, dead)
			})
		})
	}
}

// A non-blocking collective that fails on one member (its context ends)
// after every member entered Free: the others' copies, which Free waits
// for, end with a *PeerError naming that member (ErrMemberFailed) and
// their Free returns. Rank 1 never starts the collective, standing in for
// a member whose part is slow, so the others' copies cannot complete on
// their own; the context ends once every member is past Free's exchange.
func TestCollFailsAfterFreeEntered(t *testing.T) {
	shortGrace(t)
	transports(t, 4, nil, func(t *testing.T, comms []*Comm) {
		const leaver, slow = 0, 1
		dups := make([]*Comm, 4)
		each(t, comms, func(c *Comm) error {
			d, err := c.Dup()
			dups[c.Rank()] = d
			return err
		})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		reqs := make([]*Request, 4)
		for r, d := range dups {
			if r == leaver {
				d = d.WithContext(ctx)
			}
			if r != slow {
				v := []int64{1}
				reqs[r] = Iallreduce(d, v, v, Sum)
			}
		}
		freeErrs := make([]error, 4)
		var wg sync.WaitGroup
		for r, d := range dups {
			wg.Add(1)
			go func(r int, d *Comm) { defer wg.Done(); freeErrs[r] = d.Free() }(r, d)
		}
		// The slow member's Free returns once every flag was exchanged.
		survivorsRun(t, comms, -1, "slow member's Free", func(r int) error {
			if r == slow {
				for !dups[slow].freed.Load() {
					time.Sleep(time.Millisecond)
				}
			}
			return nil
		})
		cancel()
		errs := survivorsRun(t, comms, slow, "Iallreduce", func(r int) error {
			_, err := reqs[r].Wait(context.Background())
			return err
		})
		if !errors.Is(errs[leaver], context.Canceled) {
			t.Errorf("rank %d: %v, want context.Canceled", leaver, errs[leaver])
		}
		for r := 2; r < 4; r++ {
			var pe *PeerError
			if !errors.As(errs[r], &pe) || pe.Rank != leaver || !errors.Is(errs[r], ErrMemberFailed) {
				t.Errorf("rank %d: %v, want a *PeerError naming rank %d (ErrMemberFailed)", r, errs[r], leaver)
			}
		}
		survivorsRun(t, comms, -1, "Free", func(int) error { wg.Wait(); return nil })
		for r, err := range freeErrs {
			if err != nil {
				t.Errorf("rank %d: Free: %v", r, err)
			}
		}
	})
}

// dupPerOp gives each of collFailOps a communicator of its own (dups[op][rank]),
// after a barrier that links the ranks first when warm.
func dupPerOp(t *testing.T, comms []*Comm, warm bool) [][]*Comm {
	t.Helper()
	dups := make([][]*Comm, len(collFailOps))
	for i := range collFailOps {
		dups[i] = make([]*Comm, len(comms))
	}
	each(t, comms, func(c *Comm) error {
		if warm {
			if err := c.Barrier(); err != nil {
				return err
			}
		}
		for i := range collFailOps {
			d, err := c.Dup()
			if err != nil {
				return err
			}
			dups[i][c.Rank()] = d
		}
		return nil
	})
	return dups
}
