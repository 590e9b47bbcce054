package mpi

import (
	"context"
	"fmt"
	"sync"
	"testing"
)

// Zero-length data from several goroutines at once: empty and nil
// slices through every point-to-point call and the collectives, and
// empty values, all complete with zero counts and the right envelopes.
func TestConcurZeroLength(t *testing.T) {
	forSizesTransports(t, func(t *testing.T, comms []*Comm) {
		each(t, comms, func(c *Comm) error {
			d, err := c.Dup()
			if err != nil {
				return err
			}
			defer d.Free()
			n, me := c.Size(), c.Rank()
			to, from := (me+1)%n, (me+n-1)%n
			var wg sync.WaitGroup
			errs := make(chan error, 4)
			run := func(f func() error) {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := f(); err != nil {
						errs <- err
					}
				}()
			}
			for g := 0; g < 3; g++ {
				run(func() error { // point-to-point on c, tag per goroutine
					for i := 0; i < 10; i++ {
						tag := 10*g + i%5
						var st Status
						var err error
						switch i % 5 {
						case 0:
							st, err = Sendrecv(c, []float64{}, to, tag, []float64(nil), from, tag)
						case 1:
							r := Irecv(c, []int32(nil), from, tag)
							if err := Send(c, []int32(nil), to, tag); err != nil {
								return err
							}
							st, err = r.Wait(context.Background())
						case 2:
							s := Issend(c, []byte{}, to, tag)
							st, err = Recv(c, []byte{}, from, tag)
							if _, serr := s.Wait(context.Background()); err == nil {
								err = serr
							}
						case 3:
							var slot RecvSlot
							r := IrecvInto(&slot, c, []uint16(nil), AnySource, tag)
							if err := Send(c, []uint16{}, to, tag); err != nil {
								return err
							}
							st, err = r.Wait(context.Background())
						case 4:
							if err := c.SendValue([]string{}, to, tag); err != nil {
								return err
							}
							var v []string
							st, err = c.RecvValue(&v, from, tag)
							if err == nil && len(v) != 0 {
								err = fmt.Errorf("value %v", v)
							}
						}
						if err != nil {
							return fmt.Errorf("goroutine %d call %d: %w", g, i, err)
						}
						if st.Source != from || st.Tag != tag || (i%5 != 4 && (st.Count != 0 || st.Bytes != 0)) {
							return fmt.Errorf("goroutine %d call %d: status %+v", g, i, st)
						}
					}
					return nil
				})
			}
			run(func() error { // collectives with nothing to move, on d
				for i := 0; i < 5; i++ {
					if err := Bcast(d, []int64{}, i%n); err != nil {
						return err
					}
					if err := Allreduce(d, []float32{}, []float32{}, Sum); err != nil {
						return err
					}
					if err := Allgather(d, []int{}, []int{}); err != nil {
						return err
					}
					zeros := make([]int, n)
					if err := Alltoallv(d, []byte{}, zeros, nil, []byte{}, zeros, nil); err != nil {
						return err
					}
					if err := Gatherv(d, []int16{}, []int16{}, zeros, nil, 0); err != nil {
						return err
					}
					var s struct{}
					if err := BcastValue(d, &s, 0); err != nil {
						return err
					}
					all, err := AllgatherValue(d, []byte{})
					if err != nil {
						return err
					}
					if len(all) != n {
						return fmt.Errorf("allgather of empty values: %d values", len(all))
					}
					if _, err := WaitAll(context.Background(), Ibcast(d, []int{}, 0), d.Ibarrier()); err != nil {
						return err
					}
				}
				return nil
			})
			wg.Wait()
			close(errs)
			return <-errs
		})
	})
}
