package mpi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Sendrecv with overlapping buffers is an error (it corrupted data);
// SendrecvReplace shifts a ring in place, eager and rendezvous.
func TestSendrecvAliasingAndReplace(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			transports(t, n, func(c *Config) { c.EagerLimit = 1024 }, func(t *testing.T, comms []*Comm) {
				each(t, comms, func(c *Comm) error {
					r, n := c.Rank(), c.Size()
					right, left := (r+1)%n, (r+n-1)%n
					buf := make([]int64, 16)
					for name, rb := range map[string][]int64{"same": buf, "inside": buf[4:8], "tail": buf[15:], "head": buf[:1]} {
						if _, err := Sendrecv(c, buf, right, 1, rb, left, 1); !errors.Is(err, ErrArg) {
							return fmt.Errorf("Sendrecv %s slice: %v, want ErrArg", name, err)
						}
					}
					// Disjoint halves of one array are fine.
					for i := range buf {
						buf[i] = int64(r*100 + i)
					}
					if _, err := Sendrecv(c, buf[:8], right, 2, buf[8:], left, 2); err != nil {
						return fmt.Errorf("Sendrecv disjoint halves: %w", err)
					}
					if buf[8] != int64(left*100) || buf[15] != int64(left*100+7) {
						return fmt.Errorf("Sendrecv disjoint halves: got %v", buf[8:])
					}
					for _, size := range []int{0, 1, 100, 1000} { // 1000 int64s: rendezvous
						b := make([]int64, size)
						for i := range b {
							b[i] = int64(r*1_000_000 + i)
						}
						st, err := SendrecvReplace(c, b, right, 3, left, 3)
						if err != nil {
							return fmt.Errorf("SendrecvReplace %d: %w", size, err)
						}
						if st.Source != left || st.Count != size {
							return fmt.Errorf("SendrecvReplace %d: status %+v", size, st)
						}
						for i := range b {
							if b[i] != int64(left*1_000_000+i) {
								return fmt.Errorf("SendrecvReplace %d: b[%d] = %d", size, i, b[i])
							}
						}
					}
					return nil
				})
			})
		})
	}
}

// ProcNull as a source or destination completes at once.
func TestProcNull(t *testing.T) {
	transports(t, 3, nil, func(t *testing.T, comms []*Comm) {
		each(t, comms, func(c *Comm) error {
			r, n := c.Rank(), c.Size()
			buf := []int32{7, 7}
			if err := Send(c, buf, ProcNull, 1); err != nil {
				return fmt.Errorf("Send: %w", err)
			}
			if err := Ssend(c, buf, ProcNull, 1); err != nil {
				return fmt.Errorf("Ssend: %w", err)
			}
			if err := c.SendValue("x", ProcNull, 1); err != nil {
				return fmt.Errorf("SendValue: %w", err)
			}
			want := Status{Source: ProcNull, Tag: AnyTag}
			st, err := Recv(c, buf, ProcNull, AnyTag)
			if err != nil || st != want || buf[0] != 7 {
				return fmt.Errorf("Recv: %+v %v %v", st, err, buf)
			}
			if st, err := Irecv(c, buf, ProcNull, 3).Wait(bg); err != nil || st != want {
				return fmt.Errorf("Irecv: %+v %v", st, err)
			}
			if _, err := Isend(c, buf, ProcNull, 3).Wait(bg); err != nil {
				return fmt.Errorf("Isend: %w", err)
			}
			var s string
			if st, err := c.RecvValue(&s, ProcNull, 3); err != nil || st != want {
				return fmt.Errorf("RecvValue: %+v %v", st, err)
			}
			if st, err := Probe[int32](c, ProcNull, 3); err != nil || st != want {
				return fmt.Errorf("Probe: %+v %v", st, err)
			}
			if ok, st, err := Iprobe[int32](c, ProcNull, 3); !ok || err != nil || st != want {
				return fmt.Errorf("Iprobe: %v %+v %v", ok, st, err)
			}
			msg, st, err := Mprobe[int32](c, ProcNull, 3)
			if err != nil || st != want {
				return fmt.Errorf("Mprobe: %+v %v", st, err)
			}
			if st, err := Mrecv(msg, buf); err != nil || st != want {
				return fmt.Errorf("Mrecv: %+v %v", st, err)
			}
			// A non-periodic shift: the ends talk to ProcNull.
			right, left := r+1, r-1
			if right == n {
				right = ProcNull
			}
			if left < 0 {
				left = ProcNull
			}
			out, in := []int32{int32(r)}, []int32{-1}
			st, err = Sendrecv(c, out, right, 4, in, left, 4)
			if err != nil {
				return fmt.Errorf("Sendrecv: %w", err)
			}
			if left == ProcNull && (st != want || in[0] != -1) || left != ProcNull && (st.Source != left || in[0] != int32(left)) {
				return fmt.Errorf("Sendrecv shift: %+v %v", st, in)
			}
			return nil
		})
	})
}

// Ssend returns only once the receiver matched the message, whatever
// its size.
func TestSsend(t *testing.T) {
	transports(t, 2, func(c *Config) { c.EagerLimit = 1024 }, func(t *testing.T, comms []*Comm) {
		for _, size := range []int{0, 8, 1 << 16} {
			var posted atomic.Bool
			each(t, comms, func(c *Comm) error {
				if c.Rank() == 0 {
					req := Issend(c, make([]byte, size), 1, 1)
					time.Sleep(20 * time.Millisecond) // room for a wrong early completion
					if ok, _, _ := req.Test(); ok && !posted.Load() {
						return fmt.Errorf("Issend of %d bytes completed before the receive was posted", size)
					}
					if _, err := req.Wait(bg); err != nil {
						return err
					}
					if !posted.Load() {
						return fmt.Errorf("Issend of %d bytes completed before the receive was posted", size)
					}
					return Ssend(c, []int64{int64(size)}, 1, 2)
				}
				time.Sleep(50 * time.Millisecond)
				posted.Store(true)
				st, err := Recv(c, make([]byte, size), 0, 1)
				if err != nil || st.Bytes != size {
					return fmt.Errorf("recv %d: %+v %v", size, st, err)
				}
				got := []int64{0}
				if _, err := Recv(c, got, 0, 2); err != nil || got[0] != int64(size) {
					return fmt.Errorf("recv after Ssend: %v %v", got, err)
				}
				return nil
			})
		}
	})
}

// Many goroutines on one rank receive with Mprobe/Mrecv from AnySource:
// each message is received exactly once, into a buffer of the size its
// probe reported (with Probe then Recv, another goroutine could take the
// probed message first).
func TestMprobeManyGoroutines(t *testing.T) {
	const perSender, workers = 40, 4
	transports(t, 3, func(c *Config) { c.EagerLimit = 256 }, func(t *testing.T, comms []*Comm) {
		each(t, comms, func(c *Comm) error {
			r, n := c.Rank(), c.Size()
			if r != 0 {
				for i := 0; i < perSender; i++ {
					size := 1 + (i*37+r)%200 // eager and rendezvous (256 bytes) sizes
					b := make([]int16, size)
					for j := range b {
						b[j] = int16(r*1000 + i)
					}
					if err := Send(c, b, 0, i); err != nil {
						return err
					}
				}
				return nil
			}
			total := perSender * (n - 1)
			var got sync.Map
			var count atomic.Int64
			errs := make(chan error, workers)
			for w := 0; w < workers; w++ {
				go func() {
					for count.Add(1) <= int64(total) {
						msg, st, err := Mprobe[int16](c, AnySource, AnyTag)
						if err != nil {
							errs <- err
							return
						}
						b := make([]int16, st.Count)
						st2, err := Mrecv(msg, b)
						if err != nil {
							errs <- fmt.Errorf("Mrecv: %w", err)
							return
						}
						if st2.Source != st.Source || st2.Tag != st.Tag || st2.Count != st.Count {
							errs <- fmt.Errorf("Mrecv status %+v, probe said %+v", st2, st)
							return
						}
						if b[0] != int16(st.Source*1000+st.Tag) || b[len(b)-1] != b[0] {
							errs <- fmt.Errorf("message from %d tag %d holds %d", st.Source, st.Tag, b[0])
							return
						}
						if _, dup := got.LoadOrStore([2]int{st.Source, st.Tag}, true); dup {
							errs <- fmt.Errorf("message from %d tag %d received twice", st.Source, st.Tag)
							return
						}
						if _, err := Mrecv(msg, b); !errors.Is(err, ErrArg) {
							errs <- fmt.Errorf("second Mrecv: %v", err)
							return
						}
					}
					errs <- nil
				}()
			}
			for w := 0; w < workers; w++ {
				if err := <-errs; err != nil {
					return err
				}
			}
			if m, _, err := Improbe[int16](c, AnySource, AnyTag); m != nil || err != nil {
				return fmt.Errorf("Improbe with nothing left: %v %v", m, err)
			}
			return nil
		})
	})
}

// RecvContext ends with ctx's error and withdraws its receive: the next
// message goes to the next receive.
func TestRecvContext(t *testing.T) {
	transports(t, 2, nil, func(t *testing.T, comms []*Comm) {
		each(t, comms, func(c *Comm) error {
			if c.Rank() == 1 {
				if _, err := Recv(c, []byte{0}, 0, 9); err != nil { // rank 0's receive has given up
					return err
				}
				return Send(c, []int32{42}, 0, 1)
			}
			ctx, cancel := context.WithTimeout(bg, 20*time.Millisecond)
			defer cancel()
			buf := []int32{0}
			if _, err := RecvContext(ctx, c, buf, 1, 1); !errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("RecvContext: %v, want DeadlineExceeded", err)
			}
			ctx2, cancel2 := context.WithCancel(bg)
			cancel2()
			if _, err := RecvContext(ctx2, c, buf, 1, 1); !errors.Is(err, context.Canceled) {
				return fmt.Errorf("RecvContext cancelled: %v, want Canceled", err)
			}
			if err := Send(c, []byte{1}, 1, 9); err != nil {
				return err
			}
			st, err := RecvContext(context.Background(), c, buf, 1, 1)
			if err != nil || buf[0] != 42 || st.Source != 1 {
				return fmt.Errorf("RecvContext after withdrawn ones: %v %+v %v", buf, st, err)
			}
			return nil
		})
	})
}

// WaitAll names the failed requests; WaitAny, WaitSome and Testany
// consume completed requests; Testall does not block.
func TestRequestSets(t *testing.T) {
	transports(t, 2, nil, func(t *testing.T, comms []*Comm) {
		each(t, comms, func(c *Comm) error {
			const k = 5
			if c.Rank() == 1 {
				for round := 0; round < 3; round++ {
					if _, err := Recv(c, []byte{0}, 0, 99); err != nil {
						return err
					}
					for i := 0; i < k; i++ {
						if err := Send(c, []int32{int32(i), int32(i)}, 0, i); err != nil {
							return err
						}
					}
				}
				return nil
			}
			post := func() []*Request {
				reqs := make([]*Request, k)
				for i := range reqs {
					size := 2
					if i == 1 || i == 3 {
						size = 1 // truncated
					}
					reqs[i] = Irecv(c, make([]int32, size), 1, i)
				}
				return reqs
			}
			go1 := func() error { return Send(c, []byte{1}, 1, 99) }

			reqs := post()
			if ok, _, err := Testall(reqs...); ok || err != nil {
				return fmt.Errorf("Testall before any send: %v %v", ok, err)
			}
			if i, ok, _, _ := Testany(reqs...); ok || i != -1 {
				return fmt.Errorf("Testany before any send: %d %v", i, ok)
			}
			if err := go1(); err != nil {
				return err
			}
			_, err := WaitAll(bg, reqs...)
			var re *RequestError
			if !errors.As(err, &re) || fmt.Sprint(re.Indices) != "[1 3]" || !errors.Is(err, ErrTruncate) {
				return fmt.Errorf("WaitAll: %v, want a RequestError for [1 3] wrapping ErrTruncate", err)
			}
			if ok, st, err := Testall(reqs...); !ok || !errors.As(err, &re) || fmt.Sprint(re.Indices) != "[1 3]" || st[4].Tag != 4 {
				return fmt.Errorf("Testall after completion: %v %+v %v", ok, st, err)
			}

			reqs = post()
			if err := go1(); err != nil {
				return err
			}
			seen := map[int]bool{}
			for range k {
				i, _, _ := WaitAny(bg, reqs...)
				if i < 0 || seen[i] || reqs[i] != nil {
					return fmt.Errorf("WaitAny returned %d again or left it (seen %v)", i, seen)
				}
				seen[i] = true
			}
			if i, _, err := WaitAny(bg, reqs...); i != -1 || err != nil {
				return fmt.Errorf("WaitAny with all consumed: %d %v", i, err)
			}
			if i, ok, _, _ := Testany(reqs...); i != -1 || !ok {
				return fmt.Errorf("Testany with all consumed: %d %v", i, ok)
			}

			reqs = post()
			if err := go1(); err != nil {
				return err
			}
			seen = map[int]bool{}
			for len(seen) < k {
				ids, sts, err := WaitSome(bg, reqs...)
				if err != nil && !errors.As(err, &re) {
					return fmt.Errorf("WaitSome: %v", err)
				}
				for j, i := range ids {
					if seen[i] || reqs[i] != nil || sts[j].Tag != i {
						return fmt.Errorf("WaitSome returned %d again or left it", i)
					}
					seen[i] = true
				}
			}
			return nil
		})
	})
}

// TestTruncateNamesSource: a truncated receive's error names the message's
// source rank and tag on every path (eager, rendezvous, ring, cross-memory
// attach; blocking and non-blocking), so a user can tell which send was
// too long.
func TestTruncateNamesSource(t *testing.T) {
	for _, tr := range transportMods {
		for _, size := range []int{8, 1 << 18} {
			for _, nb := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%d/nonblocking=%v", tr.name, size, nb), func(t *testing.T) {
					comms, _ := world(t, 3, tr.mod)
					each(t, comms, func(c *Comm) error {
						switch c.Rank() {
						case 2:
							return Send(c, make([]int64, size), 1, 5)
						case 1:
							buf := make([]int64, size/2)
							var err error
							if nb {
								_, err = Irecv(c, buf, 2, 5).Wait(context.Background())
							} else {
								_, err = Recv(c, buf, 2, 5)
							}
							if !errors.Is(err, ErrTruncate) || !strings.Contains(fmt.Sprint(err), "from rank 2 (tag 5)") {
								return fmt.Errorf("truncated receive: %v, want ErrTruncate naming rank 2 and tag 5", err)
							}
						}
						return nil
					})
				})
			}
		}
	}
}
