package mpi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// world starts n runtime instances in this process over loopback TCP.
func world(t *testing.T, n int, mod func(*Config)) ([]*Comm, *MemJob) {
	t.Helper()
	job := NewMemJob(n)
	comms := make([]*Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			cfg := Config{Bootstrap: job.Rank(i), Host: "127.0.0.1", Linger: 500 * time.Millisecond}
			if mod != nil {
				mod(&cfg)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			comms[i], errs[i] = InitConfig(ctx, cfg)
		}(i)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, c := range comms {
			c.Finalize()
		}
	})
	return comms, job
}

// each runs f on every rank concurrently and fails on any error.
var eachTimeout = 60 * time.Second

func each(t *testing.T, comms []*Comm, f func(c *Comm) error) {
	t.Helper()
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for i, c := range comms {
		wg.Add(1)
		go func(i int, c *Comm) {
			defer wg.Done()
			errs[i] = f(c)
			if errs[i] != nil {
				t.Errorf("rank %d: %v", i, errs[i])
			}
		}(i, c)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(eachTimeout):
		t.Fatalf("ranks did not finish within %s", eachTimeout)
	}
}

func TestInprocPingPongSizes(t *testing.T) {
	comms, _ := world(t, 2, func(c *Config) { c.EagerLimit = 1024 })
	for _, n := range []int{0, 1, 1024 / 8, 1024/8 + 1, 100000} {
		each(t, comms, func(c *Comm) error {
			buf := make([]float64, n)
			if c.Rank() == 0 {
				for i := range buf {
					buf[i] = float64(i)
				}
				if err := Send(c, buf, 1, 7); err != nil {
					return err
				}
				st, err := Recv(c, buf, 1, 8)
				if err != nil {
					return err
				}
				if st.Count != n || st.Source != 1 || st.Tag != 8 {
					return fmt.Errorf("status %+v", st)
				}
				for i := range buf {
					if buf[i] != float64(2*i) {
						return fmt.Errorf("n=%d: buf[%d]=%v", n, i, buf[i])
					}
				}
				return nil
			}
			if _, err := Recv(c, buf, 0, 7); err != nil {
				return err
			}
			for i := range buf {
				buf[i] *= 2
			}
			return Send(c, buf, 0, 8)
		})
	}
}

func TestInprocOrderingAnySourceTruncate(t *testing.T) {
	comms, _ := world(t, 4, func(c *Config) { c.EagerLimit = 64 })
	each(t, comms, func(c *Comm) error {
		const m = 50
		if c.Rank() != 0 {
			for i := 0; i < m; i++ {
				// alternate eager and rendezvous sizes: order must hold across both
				buf := make([]int32, 1+(i%2)*100)
				buf[0] = int32(i)
				if err := Send(c, buf, 0, 3+i%2); err != nil {
					return err
				}
			}
			if err := c.Barrier(); err != nil {
				return err
			}
			return Send(c, []int64{1, 2, 3}, 0, 9)
		}
		next := map[int]int32{}
		buf := make([]int32, 101)
		for i := 0; i < 3*m; i++ {
			st, err := Recv(c, buf, AnySource, AnyTag)
			if err != nil {
				return err
			}
			if st.Tag != 3+int(buf[0]%2) {
				return fmt.Errorf("message %d has tag %d", buf[0], st.Tag)
			}
			if buf[0] != next[st.Source] {
				return fmt.Errorf("from %d got %d want %d", st.Source, buf[0], next[st.Source])
			}
			next[st.Source]++
		}
		if err := c.Barrier(); err != nil {
			return err
		}
		small := make([]int64, 2)
		for i := 0; i < 3; i++ {
			st, err := Recv(c, small, AnySource, 9)
			if !errors.Is(err, ErrTruncate) || st.Count != 2 || small[1] != 2 {
				return fmt.Errorf("want truncation, got %v %+v %v", err, st, small)
			}
		}
		return nil
	})
}

func TestInprocNonblockingProbeValues(t *testing.T) {
	comms, _ := world(t, 3, nil)
	type point struct {
		X, Y int
		Name string
	}
	each(t, comms, func(c *Comm) error {
		ctx := context.Background()
		r, n := c.Rank(), c.Size()
		right, left := (r+1)%n, (r+n-1)%n
		out := []uint16{uint16(r), 42}
		in := make([]uint16, 2)
		rr := Irecv(c, in, left, 1)
		sr := Isend(c, out, right, 1)
		if _, err := WaitAll(ctx, rr, sr); err != nil {
			return err
		}
		if in[0] != uint16(left) {
			return fmt.Errorf("ring got %v", in)
		}
		st, err := Sendrecv(c, []float32{float32(r)}, left, 2, make([]float32, 1), right, 2)
		if err != nil || st.Source != right {
			return fmt.Errorf("sendrecv %+v %v", st, err)
		}
		if err := c.SendValue(point{r, r * r, "p"}, right, 3); err != nil {
			return err
		}
		st, err = Probe[byte](c, AnySource, 3)
		if err != nil || st.Source != left || st.Bytes == 0 {
			return fmt.Errorf("probe %+v %v", st, err)
		}
		var p point
		if _, err := c.RecvValue(&p, left, 3); err != nil || p.X != left || p.Name != "p" {
			return fmt.Errorf("value %+v %v", p, err)
		}
		ok, _, err := Iprobe[byte](c, AnySource, AnyTag)
		if ok || err != nil {
			return fmt.Errorf("iprobe on empty queue: %v %v", ok, err)
		}
		// self send
		if err := Send(c, []int{5}, r, 4); err != nil {
			return err
		}
		got := []int{0}
		if _, err := Recv(c, got, r, 4); err != nil || got[0] != 5 {
			return fmt.Errorf("self %v %v", got, err)
		}
		return c.Barrier()
	})
}

func TestInprocCancelAndErrors(t *testing.T) {
	comms, _ := world(t, 2, nil)
	c := comms[0]
	req := Irecv(c, make([]byte, 1), 1, 5)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := req.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait: %v", err)
	}
	if !req.Cancel() {
		t.Fatal("cancel failed")
	}
	if _, err := req.Wait(context.Background()); !errors.Is(err, ErrCancelled) {
		t.Fatalf("after cancel: %v", err)
	}
	if err := Send(c, []byte{1}, 5, 0); !errors.Is(err, ErrRank) {
		t.Fatalf("bad rank: %v", err)
	}
	if err := Send(c, []byte{1}, 1, -3); !errors.Is(err, ErrTag) {
		t.Fatalf("bad tag: %v", err)
	}
	if _, err := Recv(c, []byte{1}, -7, 0); !errors.Is(err, ErrRank) {
		t.Fatalf("bad source: %v", err)
	}
	// Select on Done.
	r2 := Irecv(c, make([]byte, 1), 1, 6)
	go Send(comms[1], []byte{9}, 0, 6)
	select {
	case <-r2.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("done never closed")
	}
	i, _, err := WaitAny(context.Background(), nil, r2)
	if i != 1 || err != nil {
		t.Fatalf("waitany %d %v", i, err)
	}
}

func TestInprocDupSplitCollectives(t *testing.T) {
	comms, _ := world(t, 5, nil)
	each(t, comms, func(c *Comm) error {
		d, err := c.Dup()
		if err != nil {
			return err
		}
		// Same tag and peers on two communicators: no crossing.
		if c.Rank() == 0 {
			if err := Send(d, []int{100}, 1, 0); err != nil {
				return err
			}
			if err := Send(c, []int{200}, 1, 0); err != nil {
				return err
			}
		} else if c.Rank() == 1 {
			v := []int{0}
			if _, err := Recv(c, v, 0, 0); err != nil || v[0] != 200 {
				return fmt.Errorf("world got %v %v", v, err)
			}
			if _, err := Recv(d, v, 0, 0); err != nil || v[0] != 100 {
				return fmt.Errorf("dup got %v %v", v, err)
			}
		}
		s, err := c.Split(c.Rank()%2, -c.Rank())
		if err != nil {
			return err
		}
		wantSize := 3 - c.Rank()%2
		if s.Size() != wantSize {
			return fmt.Errorf("split size %d", s.Size())
		}
		sum := []int{0}
		if err := Allreduce(s, []int{c.Rank()}, sum, Sum); err != nil {
			return err
		}
		want := 0 + 2 + 4
		if c.Rank()%2 == 1 {
			want = 1 + 3
		}
		if sum[0] != want {
			return fmt.Errorf("split allreduce %d want %d", sum[0], want)
		}
		// key -rank reverses the order
		wantFirst := 4 - c.Rank()%2 // key -rank reverses the order: {4,2,0} and {3,1}
		if w, _ := s.WorldRank(0); w != wantFirst {
			return fmt.Errorf("split order: rank 0 is world %d, want %d", w, wantFirst)
		}
		mx := []float64{0, 0}
		if err := Allreduce(c, []float64{float64(c.Rank()), -float64(c.Rank())}, mx, Max); err != nil {
			return err
		}
		if mx[0] != 4 || mx[1] != 0 {
			return fmt.Errorf("max %v", mx)
		}
		b := []int8{0, 0}
		if c.Rank() == 3 {
			b = []int8{7, 8}
		}
		if err := Bcast(c, b, 3); err != nil || b[1] != 8 {
			return fmt.Errorf("bcast %v %v", b, err)
		}
		u, err := c.Split(Undefined, 0)
		if u != nil || err != nil {
			return fmt.Errorf("undefined split %v %v", u, err)
		}
		return d.Barrier()
	})
}

// killProc makes p look crashed to its peers: its connections drop without
// BYE.
func killProc(p *proc) {
	p.shut(errors.New("killed"))
	p.ln.Close()
	for _, pe := range p.peers {
		if l := pe.current(); l != nil {
			l.close()
		}
	}
}

func TestInprocPeerDeath(t *testing.T) {
	comms, _ := world(t, 3, nil)
	// Connect 0-1 and 0-2 first.
	each(t, comms, func(c *Comm) error { return c.Barrier() })
	pending := Irecv(comms[0], make([]byte, 4), 1, 77)
	anyReq := Irecv(comms[0], make([]byte, 4), AnySource, 78)
	// Rank 1 "dies": its connections drop without BYE.
	p1 := comms[1].p
	killProc(p1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var pe *PeerError
	if _, err := pending.Wait(ctx); !errors.As(err, &pe) || pe.Rank != 1 {
		t.Fatalf("pending recv: %v", err)
	}
	if _, err := anyReq.Wait(ctx); !errors.As(err, &pe) {
		t.Fatalf("AnySource recv: %v", err)
	}
	if err := Send(comms[0], []byte{1}, 1, 0); !errors.As(err, &pe) {
		t.Fatalf("later send: %v", err)
	}
	if _, err := Recv(comms[0], []byte{1}, 1, 0); !errors.As(err, &pe) {
		t.Fatalf("later recv: %v", err)
	}
	// Rank 2 is unaffected.
	each(t, []*Comm{comms[0], comms[2]}, func(c *Comm) error {
		if c.Rank() == 0 {
			return Send(c, []byte{1}, 2, 0)
		}
		_, err := Recv(c, []byte{0}, 0, 0)
		return err
	})
}

func TestInprocStranger(t *testing.T) {
	comms, _ := world(t, 2, func(c *Config) { c.HandshakeTimeout = 2 * time.Second })
	addr := comms[1].p.ln.Addr().String()
	// A stranger that knows nothing, one that sends garbage, one that
	// claims to be rank 0 with a wrong MAC, and one that stays silent.
	for _, payload := range [][]byte{nil, []byte("GET / HTTP/1.0\r\n\r\n"), append([]byte(hsMagic), make([]byte, 56)...)} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conn.Write(payload)
		if payload == nil {
			defer conn.Close()
			continue
		}
		conn.SetReadDeadline(time.Now().Add(20 * time.Second))
		buf := make([]byte, 100)
		n := 0
		for {
			k, err := conn.Read(buf[n:])
			n += k
			if err != nil {
				break
			}
		}
		if n > len(hsMagic)+16 {
			t.Fatalf("stranger got %d bytes", n)
		}
		conn.Close()
	}
	// The job is undisturbed.
	each(t, comms, func(c *Comm) error {
		if c.Rank() == 0 {
			return Send(c, []byte("hi"), 1, 0)
		}
		b := make([]byte, 2)
		_, err := Recv(c, b, 0, 0)
		if err == nil && string(b) != "hi" {
			err = fmt.Errorf("got %q", b)
		}
		return err
	})
	// A wrong secret cannot connect either.
	bad, _ := world(t, 2, func(c *Config) { c.Secret = []byte("a"); c.ConnectTimeout = 5 * time.Second })
	bad[1].p.secret = []byte("b")
	if err := Send(bad[0], []byte{1}, 1, 0); err == nil {
		t.Fatal("send with mismatched secrets succeeded")
	}
}

func TestInprocSimultaneousConnect(t *testing.T) {
	for round := 0; round < 5; round++ {
		comms, _ := world(t, 4, nil)
		each(t, comms, func(c *Comm) error {
			// everyone sends to everyone at once
			var reqs []*Request
			for d := 0; d < c.Size(); d++ {
				reqs = append(reqs, Isend(c, []int{c.Rank()}, d, 1))
			}
			for s := 0; s < c.Size(); s++ {
				v := []int{-1}
				if _, err := Recv(c, v, s, 1); err != nil || v[0] != s {
					return fmt.Errorf("from %d: %v %v", s, v, err)
				}
			}
			_, err := WaitAll(context.Background(), reqs...)
			return err
		})
	}
}

func TestInprocFinalizeNoLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	job := NewMemJob(3)
	comms := make([]*Comm, 3)
	var wg sync.WaitGroup
	for i := range comms {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			var err error
			comms[i], err = InitConfig(context.Background(), Config{Bootstrap: job.Rank(i), Host: "127.0.0.1", Linger: time.Second})
			if err != nil {
				t.Error(err)
			}
		}(i)
	}
	wg.Wait()
	each(t, comms, func(c *Comm) error { return c.Barrier() })
	each(t, comms, func(c *Comm) error { return c.Finalize() })
	if err := Send(comms[0], []byte{1}, 1, 0); !errors.Is(err, ErrFinalized) {
		t.Fatalf("send after finalize: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines before, %d after:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}

func TestInprocAbort(t *testing.T) {
	comms, job := world(t, 2, nil)
	req := Irecv(comms[0], make([]byte, 1), 1, 0)
	comms[0].Abort(3)
	select {
	case <-job.Aborted():
	case <-time.After(10 * time.Second):
		t.Fatal("abort not seen by the process manager")
	}
	if job.AbortCode() != 3 {
		t.Fatalf("code %d", job.AbortCode())
	}
	if _, err := req.Wait(context.Background()); !errors.Is(err, ErrAborted) {
		t.Fatalf("pending: %v", err)
	}
}

func TestSingleton(t *testing.T) {
	c, err := InitConfig(context.Background(), Config{Bootstrap: NewMemJob(1).Rank(0)})
	if err != nil {
		t.Fatal(err)
	}
	if c.Rank() != 0 || c.Size() != 1 || c.ProcessorName() == "" {
		t.Fatalf("rank %d size %d", c.Rank(), c.Size())
	}
	out := []int{0}
	if err := Allreduce(c, []int{5}, out, Sum); err != nil || out[0] != 5 {
		t.Fatalf("allreduce %v %v", out, err)
	}
	if _, err := Sendrecv(c, []int{7}, 0, 1, out, 0, 1); err != nil || out[0] != 7 {
		t.Fatalf("sendrecv to self %v %v", out, err)
	}
	d, err := c.Dup()
	if err != nil || d.Size() != 1 {
		t.Fatalf("dup %v", err)
	}
	if err := c.Barrier(); err != nil {
		t.Fatal(err)
	}
	if err := c.Finalize(); err != nil {
		t.Fatal(err)
	}
	if err := c.Barrier(); !errors.Is(err, ErrFinalized) {
		t.Fatalf("barrier after finalize: %v", err)
	}
}

// Several goroutines per rank use one communicator at once, each on its
// own tag, with sizes on both sides of the eager limit.
func TestInprocConcurrentGoroutines(t *testing.T) {
	comms, _ := world(t, 3, func(c *Config) { c.EagerLimit = 256 })
	each(t, comms, func(c *Comm) error {
		const workers, rounds = 4, 20
		errs := make(chan error, workers)
		for w := 0; w < workers; w++ {
			go func(w int) {
				errs <- func() error {
					n := c.Size()
					right, left := (c.Rank()+1)%n, (c.Rank()+n-1)%n
					for i := 0; i < rounds; i++ {
						size := 1 + (i*37+w*101)%200 // 8..1600 bytes
						out := make([]int64, size)
						out[0], out[size-1] = int64(i), int64(w)
						in := make([]int64, 200)
						st, err := Sendrecv(c, out, right, w, in, left, w)
						if err != nil {
							return err
						}
						if st.Count != size || in[0] != int64(i) || in[size-1] != int64(w) {
							return fmt.Errorf("worker %d round %d: %+v %v", w, i, st, in[:2])
						}
					}
					return nil
				}()
			}(w)
		}
		for w := 0; w < workers; w++ {
			if err := <-errs; err != nil {
				return err
			}
		}
		return nil
	})
}

func TestInprocProbeBlocksAndWaitSome(t *testing.T) {
	comms, _ := world(t, 2, nil)
	each(t, comms, func(c *Comm) error {
		if c.Rank() == 1 {
			time.Sleep(20 * time.Millisecond) // rank 0 is already blocked in Probe
			if err := Send(c, make([]float32, 100000), 0, 4); err != nil {
				return err
			}
			return Send(c, []float32{1}, 0, 5)
		}
		st, err := Probe[float32](c, 1, AnyTag)
		if err != nil || st.Count != 100000 || st.Tag != 4 {
			return fmt.Errorf("probe of a rendezvous message: %+v %v", st, err)
		}
		big := Irecv(c, make([]float32, st.Count), 1, 4)
		small := Irecv(c, make([]float32, 1), 1, 5)
		reqs := []*Request{big, small}
		seen := 0
		for seen < 2 {
			idx, _, err := WaitSome(context.Background(), reqs...)
			if err != nil {
				return err
			}
			for _, i := range idx {
				reqs[i] = nil
				seen++
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		if _, err := ProbeContext[byte](ctx, c, 1, 6); !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("probe with a deadline: %v", err)
		}
		return nil
	})
}

func TestSendrecvBadDestDoesNotHang(t *testing.T) {
	comms, _ := world(t, 2, nil)
	done := make(chan error, 1)
	go func() {
		_, err := Sendrecv(comms[0], []int{1}, 9, 0, []int{0}, 1, 0)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrRank) {
			t.Fatalf("got %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Sendrecv with a bad destination hung")
	}
}

// Truncation and values on the rendezvous path; the stream stays in step.
func TestInprocRendezvousTruncateAndBigValue(t *testing.T) {
	comms, _ := world(t, 2, func(c *Config) { c.EagerLimit = 64 })
	big := strings.Repeat("gompi", 50000)
	each(t, comms, func(c *Comm) error {
		if c.Rank() == 0 {
			long := make([]int32, 1000)
			for i := range long {
				long[i] = int32(i)
			}
			if err := Send(c, long, 1, 1); err != nil {
				return err
			}
			if err := c.SendValue(big, 1, 2); err != nil {
				return err
			}
			return Send(c, []int32{77}, 1, 3)
		}
		short := make([]int32, 10)
		st, err := Recv(c, short, 0, 1)
		if !errors.Is(err, ErrTruncate) || st.Count != 10 || short[9] != 9 {
			return fmt.Errorf("rendezvous truncation: %+v %v %v", st, err, short)
		}
		var s string
		if _, err := c.RecvValue(&s, 0, 2); err != nil || s != big {
			return fmt.Errorf("big value: %d bytes, %v", len(s), err)
		}
		v := []int32{0}
		if _, err := Recv(c, v, 0, 3); err != nil || v[0] != 77 {
			return fmt.Errorf("after: %v %v", v, err)
		}
		return nil
	})
}
