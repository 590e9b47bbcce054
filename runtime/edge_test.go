package mpi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestProcNullTypedAndPersistent: ProcNull completes at once with
// ProcNull's status on the calls TestProcNull leaves out: derived-datatype
// sends and receives, SendrecvReplace, RecvContext, Issend, Improbe, and
// persistent requests (Start, StartAll), leaving the buffer untouched.
func TestProcNullTypedAndPersistent(t *testing.T) {
	comms, _ := world(t, 2, nil)
	each(t, comms, func(c *Comm) error {
		want := Status{Source: ProcNull, Tag: AnyTag}
		buf := []int32{7, 7, 7, 7}
		var errs []error
		chk := func(name string, st Status, err error) {
			if err != nil || st != want || buf[0] != 7 {
				errs = append(errs, fmt.Errorf("%s: %+v %v %v", name, st, err, buf))
			}
		}
		vec, _ := Vector(2, 1, 2, TypeOf[int32]())
		chk("SendType", Status{Source: ProcNull, Tag: AnyTag}, SendType(c, buf, 1, vec, ProcNull, 1))
		st, err := RecvType(c, buf, 1, vec, ProcNull, 1)
		chk("RecvType", st, err)
		st, err = IrecvType(c, buf, 1, vec, ProcNull, 1).Wait(bg)
		chk("IrecvType", st, err)
		st, err = SendrecvType(c, buf, 1, vec, ProcNull, 1, buf, 1, vec, ProcNull, 1)
		chk("SendrecvType", st, err)
		st, err = SendrecvReplace(c, buf, ProcNull, 1, ProcNull, 1)
		chk("SendrecvReplace", st, err)
		st, err = RecvContext(context.Background(), c, buf, ProcNull, 1)
		chk("RecvContext", st, err)
		_, err = Issend(c, buf, ProcNull, 1).Wait(bg)
		chk("Issend", want, err)
		m, st, err := Improbe[int32](c, ProcNull, 1)
		chk("Improbe", st, err)
		if m == nil {
			errs = append(errs, errors.New("Improbe: nil message for ProcNull"))
		} else {
			st, err = Mrecv(m, buf)
			chk("Mrecv(Improbe)", st, err)
		}
		p, err := RecvInit(c, buf, ProcNull, 1)
		if err != nil {
			errs = append(errs, fmt.Errorf("RecvInit: %w", err))
		} else {
			for i := 0; i < 2; i++ {
				if err := p.Start(); err != nil {
					errs = append(errs, err)
				}
				st, err = p.Request().Wait(bg)
				chk("RecvInit", st, err)
			}
		}
		s, err := SendInit(c, buf, ProcNull, 1)
		if err != nil {
			errs = append(errs, fmt.Errorf("SendInit: %w", err))
		} else if err := s.Start(); err != nil {
			errs = append(errs, err)
		} else if _, err := s.Request().Wait(bg); err != nil {
			errs = append(errs, err)
		}
		if err := StartAll(p, s); err != nil {
			errs = append(errs, fmt.Errorf("StartAll: %w", err))
		}
		sts, err := WaitAll(bg, p.Request(), s.Request())
		if err != nil || sts[0] != want {
			errs = append(errs, fmt.Errorf("StartAll wait: %v %v", sts, err))
		}
		return errors.Join(errs...)
	})
}

// TestZeroLengthCollectives: every collective takes empty buffers (nil
// too) on every transport, and an empty message is received with Count 0.
func TestZeroLengthCollectives(t *testing.T) {
	for _, tr := range transportMods {
		t.Run(tr.name, func(t *testing.T) {
			comms, _ := world(t, 3, tr.mod)
			each(t, comms, func(c *Comm) error {
				r, n := c.Rank(), c.Size()
				next, prev := (r+1)%n, (r+n-1)%n
				var errs []error
				st, err := Sendrecv(c, []float64{}, next, 1, nil, prev, 1)
				if err != nil || st.Count != 0 || st.Source != prev {
					errs = append(errs, fmt.Errorf("Sendrecv empty: %+v %v", st, err))
				}
				st, err = Sendrecv(c, nil, next, 1, []float64{1}, prev, 1)
				if err != nil || st.Count != 0 || st.Bytes != 0 {
					errs = append(errs, fmt.Errorf("Sendrecv nil into 1: %+v %v", st, err))
				}
				if err := Bcast(c, []int{}, 0); err != nil {
					errs = append(errs, fmt.Errorf("Bcast: %w", err))
				}
				if err := Allreduce(c, []int{}, []int{}, Sum); err != nil {
					errs = append(errs, fmt.Errorf("Allreduce: %w", err))
				}
				if err := Reduce(c, []int{}, nil, Sum, 1); err != nil {
					errs = append(errs, fmt.Errorf("Reduce: %w", err))
				}
				if err := Allgather(c, []int{}, nil); err != nil {
					errs = append(errs, fmt.Errorf("Allgather: %w", err))
				}
				if err := Alltoall(c, []int{}, nil); err != nil {
					errs = append(errs, fmt.Errorf("Alltoall: %w", err))
				}
				if err := Gather(c, []int{}, nil, 2); err != nil {
					errs = append(errs, fmt.Errorf("Gather: %w", err))
				}
				if err := Scatter(c, nil, []int{}, 2); err != nil {
					errs = append(errs, fmt.Errorf("Scatter: %w", err))
				}
				if err := Scan(c, []int{}, []int{}, Sum); err != nil {
					errs = append(errs, fmt.Errorf("Scan: %w", err))
				}
				if err := Exscan(c, []int{}, []int{}, Sum); err != nil {
					errs = append(errs, fmt.Errorf("Exscan: %w", err))
				}
				zero := make([]int, n)
				if err := Alltoallv[int](c, nil, zero, nil, nil, zero, nil); err != nil {
					errs = append(errs, fmt.Errorf("Alltoallv: %w", err))
				}
				if err := Allgatherv[int](c, nil, nil, zero, nil); err != nil {
					errs = append(errs, fmt.Errorf("Allgatherv: %w", err))
				}
				if err := ReduceScatter[int](c, nil, nil, zero, Sum); err != nil {
					errs = append(errs, fmt.Errorf("ReduceScatter: %w", err))
				}
				if err := ReduceScatterBlock(c, []int{}, nil, Sum); err != nil {
					errs = append(errs, fmt.Errorf("ReduceScatterBlock: %w", err))
				}
				return errors.Join(errs...)
			})
		})
	}
}

// TestSizeOneCommunicators: every collective, its non-blocking form, the
// value collectives, Sendrecv to itself and a 1x1 Cart work on
// communicators of one rank (Split by rank).
func TestSizeOneCommunicators(t *testing.T) {
	comms, _ := world(t, 3, nil)
	each(t, comms, func(c *Comm) error {
		s, err := c.Split(c.Rank(), 0)
		if err != nil {
			return err
		}
		var errs []error
		add := func(name string, err error) {
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			}
		}
		in, out := []int{c.Rank() + 1, 2}, []int{0, 0}
		add("Barrier", s.Barrier())
		add("Bcast", Bcast(s, in, 0))
		add("Reduce", Reduce(s, in, out, Sum, 0))
		add("Allreduce", Allreduce(s, in, out, Sum))
		add("Allreduce in place", Allreduce(s, out, out, Sum))
		add("Gather", Gather(s, in, out, 0))
		add("Scatter", Scatter(s, in, out, 0))
		add("Allgather", Allgather(s, in, out))
		add("Alltoall", Alltoall(s, in, out))
		add("Alltoallv", Alltoallv(s, in, []int{2}, nil, out, []int{2}, nil))
		add("Gatherv", Gatherv(s, in, out, []int{2}, nil, 0))
		add("Scatterv", Scatterv(s, in, []int{2}, nil, out, 0))
		add("Allgatherv", Allgatherv(s, in, out, []int{2}, nil))
		add("Scan", Scan(s, in, out, Sum))
		add("Exscan", Exscan(s, in, out, Sum))
		add("ReduceScatter", ReduceScatter(s, in, out, []int{2}, Sum))
		add("ReduceScatterBlock", ReduceScatterBlock(s, in, out, Sum))
		if !slices.Equal(out, in) {
			errs = append(errs, fmt.Errorf("ReduceScatterBlock: %v want %v", out, in))
		}
		_, err = Sendrecv(s, in, 0, 1, out, 0, 1)
		add("Sendrecv self", err)
		v, err := AllgatherValue(s, "x")
		add("AllgatherValue", err)
		if len(v) != 1 {
			errs = append(errs, fmt.Errorf("AllgatherValue %v", v))
		}
		x, err := AllreduceValue(s, 3, func(a, b int) int { return a + b })
		add("AllreduceValue", err)
		if x != 3 {
			errs = append(errs, fmt.Errorf("AllreduceValue %d", x))
		}
		o := func() []int { return make([]int, 2) } // each request its own buffer
		reqs := []*Request{s.Ibarrier(), Iallreduce(s, in, o(), Max), Ialltoall(s, in, o()), Iscan(s, in, o(), Sum), Iexscan(s, in, o(), Sum)}
		_, err = WaitAll(bg, reqs...)
		add("non-blocking", err)
		ct, err := s.CartCreate([]int{1, 1}, []bool{true, false})
		add("CartCreate", err)
		if ct != nil {
			src, dst, err := ct.Shift(0, 1)
			if err != nil || src != 0 || dst != 0 {
				errs = append(errs, fmt.Errorf("Shift periodic %d %d %v", src, dst, err))
			}
			src, dst, err = ct.Shift(1, 1)
			if err != nil || src != ProcNull || dst != ProcNull {
				errs = append(errs, fmt.Errorf("Shift %d %d %v", src, dst, err))
			}
			sub, err := ct.Sub([]bool{false, false})
			add("Sub none", err)
			if sub != nil {
				add("sub barrier", sub.Barrier())
			}
		}
		add("Free", s.Free())
		return errors.Join(errs...)
	})
}

// TestCollNonblockingCancelledContext: non-blocking collectives started
// on a view whose context has ended complete with context.Canceled on
// every rank (none waits for a peer).
func TestCollNonblockingCancelledContext(t *testing.T) {
	comms, _ := world(t, 3, nil)
	each(t, comms, func(c *Comm) error {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		v := c.WithContext(ctx)
		var errs []error
		in, out := make([]float64, 100000), make([]float64, 100000)
		for i, r := range []*Request{v.Ibarrier(), Iallreduce(v, in, out, Sum), Ibcast(v, in, 0)} {
			wctx, wc := context.WithTimeout(context.Background(), 20*time.Second)
			_, err := r.Wait(wctx)
			wc()
			if !errors.Is(err, context.Canceled) {
				errs = append(errs, fmt.Errorf("request %d: %v, want context.Canceled", i, err))
			}
		}
		if err := v.Barrier(); !errors.Is(err, context.Canceled) {
			errs = append(errs, fmt.Errorf("Barrier: %v", err))
		}
		return errors.Join(errs...)
	})
}

// TestTestallWaitAnyFailed: Testall polled in a loop completes receives
// (eager and rendezvous) without Wait's help; WaitAny returns a failed
// request's error and clears its slot; WaitSome reports a cancelled one.
func TestTestallWaitAnyFailed(t *testing.T) {
	for _, tr := range transportMods {
		t.Run(tr.name, func(t *testing.T) {
			comms, _ := world(t, 2, tr.mod)
			each(t, comms, func(c *Comm) error {
				if c.Rank() == 0 {
					time.Sleep(10 * time.Millisecond)
					if err := Send(c, make([]byte, 1<<18), 1, 1); err != nil {
						return err
					}
					return Send(c, []int{1}, 1, 2)
				}
				r1 := Irecv(c, make([]byte, 1<<18), 0, 1)
				r2 := Irecv(c, []int{0}, 0, 2)
				bad := Irecv(c, []int{0}, 5, 2)
				deadline := time.Now().Add(20 * time.Second)
				for {
					ok, _, err := Testall(r1, r2)
					if ok {
						if err != nil {
							return err
						}
						break
					}
					if time.Now().After(deadline) {
						return errors.New("Testall spun 20s")
					}
				}
				reqs := []*Request{bad, Irecv(c, []int{0}, 0, 3), nil}
				i, _, err := WaitAny(bg, reqs...)
				if i != 0 || !errors.Is(err, ErrRank) || reqs[0] != nil {
					return fmt.Errorf("WaitAny: %d %v", i, err)
				}
				reqs[1].Cancel()
				ids, _, err := WaitSome(bg, reqs...)
				if len(ids) != 1 || !errors.Is(err, ErrCancelled) {
					return fmt.Errorf("WaitSome: %v %v", ids, err)
				}
				return nil
			})
		})
	}
}

// TestDatatypeLayouts: a 3-D Subarray in C and Fortran order sent twice
// arrives as its elements in the order MPI defines, and a vector with an
// odd stride is received through another vector of the same signature.
func TestDatatypeLayouts(t *testing.T) {
	for _, tr := range transportMods {
		t.Run(tr.name, func(t *testing.T) {
			comms, _ := world(t, 2, tr.mod)
			each(t, comms, func(c *Comm) error {
				sizes, sub, starts := []int{4, 5, 3}, []int{2, 3, 2}, []int{1, 2, 1}
				var errs []error
				for _, order := range []Order{OrderC, OrderFortran} {
					sa, err := Subarray(sizes, sub, starts, order, TypeOf[int32]())
					if err != nil {
						return err
					}
					total := 4 * 5 * 3
					// Two copies: each array's sub-array elements, in order.
					var want []int32
					for cp := 0; cp < 2; cp++ {
						if order == OrderC {
							for i := starts[0]; i < starts[0]+sub[0]; i++ {
								for j := starts[1]; j < starts[1]+sub[1]; j++ {
									for k := starts[2]; k < starts[2]+sub[2]; k++ {
										want = append(want, int32(cp*total+(i*5+j)*3+k))
									}
								}
							}
						} else {
							for k := starts[2]; k < starts[2]+sub[2]; k++ {
								for j := starts[1]; j < starts[1]+sub[1]; j++ {
									for i := starts[0]; i < starts[0]+sub[0]; i++ {
										want = append(want, int32(cp*total+i+4*(j+5*k)))
									}
								}
							}
						}
					}
					if c.Rank() == 0 {
						buf := make([]int32, 2*total)
						for i := range buf {
							buf[i] = int32(i)
						}
						if err := SendType(c, buf, 2, sa, 1, int(order)); err != nil {
							return err
						}
						continue
					}
					got := make([]int32, len(want))
					st, err := Recv(c, got, 0, int(order))
					if err != nil || st.Count != len(want) || !slices.Equal(got, want) {
						errs = append(errs, fmt.Errorf("order %d: %v %+v\n got %v\nwant %v", order, err, st, got, want))
					}
				}
				// Odd strides at both ends, the same 10 elements.
				v1, _ := Vector(5, 2, 3, TypeOf[float64]())
				v2, _ := Vector(2, 5, 7, TypeOf[float64]())
				if c.Rank() == 0 {
					buf := make([]float64, 20)
					for i := range buf {
						buf[i] = float64(i)
					}
					return errors.Join(append(errs, SendType(c, buf, 1, v1, 1, 9))...)
				}
				got := slices.Repeat([]float64{-1}, 14)
				st, err := RecvType(c, got, 1, v2, 0, 9)
				want := []float64{0, 1, 3, 4, 6, -1, -1, 7, 9, 10, 12, 13, -1, -1}
				if err != nil || st.Count != 10 || !slices.Equal(got, want) {
					errs = append(errs, fmt.Errorf("vector: %v %+v %v", err, st, got))
				}
				return errors.Join(errs...)
			})
		})
	}
}

// TestSelfMessages: messages to the calling rank itself, rendezvous-sized
// ones included, need no receive posted first (Send, Ssend), and are
// probed and Mprobe'd from AnySource.
func TestSelfMessages(t *testing.T) {
	for _, tr := range transportMods {
		t.Run(tr.name, func(t *testing.T) {
			comms, _ := world(t, 2, tr.mod)
			each(t, comms, func(c *Comm) error {
				me := c.Rank()
				big := make([]byte, 1<<20)
				big[5] = 9
				if err := Send(c, big, me, 1); err != nil {
					return err
				}
				if err := Ssend(c, []int{4}, me, 2); err != nil {
					return err
				}
				st, err := Probe[int](c, me, AnyTag)
				if err != nil || st.Tag != 1 {
					return fmt.Errorf("probe self %+v %v", st, err)
				}
				got := make([]byte, 1<<20)
				if _, err := Recv(c, got, me, 1); err != nil || got[5] != 9 {
					return fmt.Errorf("recv self %v", err)
				}
				x := []int{0}
				if _, err := Recv(c, x, me, 2); err != nil || x[0] != 4 {
					return fmt.Errorf("recv self 2 %v", err)
				}
				// Mprobe and Mrecv of a rendezvous-sized message.
				if err := Send(c, big, me, 3); err != nil {
					return err
				}
				m, st, err := Mprobe[byte](c, AnySource, 3)
				if err != nil || st.Bytes != 1<<20 || st.Source != me {
					return fmt.Errorf("mprobe self %+v %v", st, err)
				}
				if _, err := Mrecv(m, got); err != nil {
					return err
				}
				return nil
			})
		})
	}
}

// TestFreeAfterCancelledCollectives: after non-blocking collectives
// abandoned by a context (one rank never joined them), Free succeeds on
// every rank and the next communicator sees none of their messages.
func TestFreeAfterCancelledCollectives(t *testing.T) {
	for _, tr := range transportMods {
		t.Run(tr.name, func(t *testing.T) {
			comms, _ := world(t, 3, tr.mod)
			each(t, comms, func(c *Comm) error {
				d, err := c.Dup()
				if err != nil {
					return err
				}
				buf := make([]float64, 50000)
				if c.Rank() != 2 {
					ctx, cancel := context.WithCancel(context.Background())
					r := Iallreduce(d.WithContext(ctx), buf, buf, Sum)
					r2 := Ibcast(d.WithContext(ctx), buf, 2)
					time.Sleep(20 * time.Millisecond)
					cancel()
					if _, err := WaitAll(bg, r, r2); !errors.Is(err, context.Canceled) {
						return fmt.Errorf("cancelled: %v", err)
					}
				}
				if err := d.Free(); err != nil {
					return fmt.Errorf("free: %w", err)
				}
				e, err := c.Dup()
				if err != nil {
					return err
				}
				x := []int{c.Rank()}
				if err := Allreduce(e, x, x, Sum); err != nil || x[0] != 3 {
					return fmt.Errorf("after: %v %v", x, err)
				}
				return e.Free()
			})
		})
	}
}
