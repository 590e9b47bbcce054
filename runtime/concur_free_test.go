package mpi

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// Free of a communicator while another goroutine keeps posting receives
// on it (against MPI's rule): each of them ends with ErrFreed, none waits
// forever, also one posted just as Free marked the communicator freed.
func TestConcurFreeWhilePosting(t *testing.T) {
	for _, tr := range transportMods {
		t.Run(tr.name, func(t *testing.T) {
			comms, _ := world(t, 2, tr.mod)
			rounds := 30
			if testing.Short() {
				rounds = 10
			}
			for round := 0; round < rounds; round++ {
				each(t, comms, func(c *Comm) error {
					d, err := c.Dup()
					if err != nil {
						return err
					}
					stop := make(chan struct{})
					got := make(chan []*Request)
					go func() {
						var reqs []*Request
						for {
							r := Irecv(d, make([]byte, 1), AnySource, 5)
							reqs = append(reqs, r)
							if ok, _, err := r.Test(); ok && errors.Is(err, ErrFreed) {
								break
							}
							select {
							case <-stop:
							default:
								continue
							}
							break
						}
						got <- reqs
					}()
					time.Sleep(time.Millisecond)
					if err := d.Free(); err != nil {
						return err
					}
					close(stop)
					reqs := <-got
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					defer cancel()
					for i, r := range reqs {
						if _, err := r.Wait(ctx); !errors.Is(err, ErrFreed) {
							return fmt.Errorf("receive %d of %d posted while another goroutine freed the communicator: %v, want ErrFreed", i, len(reqs), err)
						}
					}
					return nil
				})
			}
		})
	}
}

// A receive on a freed communicator fails with ErrFreed, even when a
// later communicator took over its context id and a message for that one
// waits in the ring: it must not take the message.
func TestConcurRecvOnFreedCommSpareSuccessor(t *testing.T) {
	for _, tr := range transportMods {
		t.Run(tr.name, func(t *testing.T) {
			comms, _ := world(t, 2, tr.mod)
			each(t, comms, func(c *Comm) error {
				for round := 0; round < 20; round++ {
					old, err := c.Dup()
					if err != nil {
						return err
					}
					if err := old.Free(); err != nil {
						return err
					}
					d, err := c.Dup() // takes old's id back
					if err != nil {
						return err
					}
					if c.Rank() == 1 {
						for i, err := range []error{Ssend(old, []byte{3}, 0, 0), Send(old, []byte{3}, 0, 0)} {
							if !errors.Is(err, ErrFreed) {
								return fmt.Errorf("round %d: send %d on a freed communicator: %v, want ErrFreed", round, i, err)
							}
						}
						if err := Send(c, []byte{1}, 0, 1); err != nil {
							return err
						}
						if err := Send(d, []byte{2}, 0, 0); err != nil {
							return err
						}
					} else {
						// The blocking receive takes the ring; the next
						// message is then likely still in it when the
						// receives on old are made.
						if _, err := Recv(c, make([]byte, 1), 1, 0+1); err != nil {
							return err
						}
						var slot RecvSlot
						for i, r := range []*Request{
							Irecv(old, make([]byte, 1), 1, 0),
							IrecvInto(&slot, old, make([]byte, 1), 1, 0),
						} {
							if _, err := r.Wait(context.Background()); !errors.Is(err, ErrFreed) {
								return fmt.Errorf("round %d: receive %d on a freed communicator: %v, want ErrFreed", round, i, err)
							}
						}
						got := make([]byte, 1)
						ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
						_, err := RecvContext(ctx, d, got, 1, 0)
						cancel()
						if err != nil || got[0] != 2 {
							return fmt.Errorf("round %d: the new communicator's message: %v %v", round, got, err)
						}
					}
					if err := d.Free(); err != nil {
						return err
					}
				}
				return nil
			})
		})
	}
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
