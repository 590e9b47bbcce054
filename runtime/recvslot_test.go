package mpi

import (
	"bytes"
	"context"
	"errors"
	"math"
	"runtime"
	"testing"
	"time"
)

// Windows of receives into reused slots get every message, in order, with
// its status, eager and rendezvous alike (a rendezvous's operation is not
// reused: its paths may touch it after it completes), on every transport.
func TestRecvSlotWindows(t *testing.T) {
	transports(t, 2, nil, func(t *testing.T, comms []*Comm) {
		const W = 8
		sizes := []int{8, 100, 3 << 10, 200 << 10, 8} // past every eager limit and back
		each(t, comms, func(c *Comm) error {
			ctx := context.Background()
			if c.Rank() == 0 {
				for round, n := range sizes {
					for w := 0; w < W; w++ {
						if err := Send(c, pattern(n, round*W+w), 1, w); err != nil {
							return err
						}
					}
				}
				return nil
			}
			slots := make([]RecvSlot, W)
			reqs := make([]*Request, W)
			st := make([]Status, W)
			bufs := make([][]byte, W)
			for round, n := range sizes {
				for w := range reqs {
					bufs[w] = make([]byte, n)
					reqs[w] = IrecvInto(&slots[w], c, bufs[w], 0, w)
					if reqs[w] != &slots[w].req {
						t.Errorf("round %d: slot %d's request is not the slot's", round, w)
					}
				}
				if err := WaitAllInto(ctx, st, reqs...); err != nil {
					return err
				}
				for w := range reqs {
					if st[w] != (Status{Source: 0, Tag: w, Count: n, Bytes: n}) || !bytes.Equal(bufs[w], pattern(n, round*W+w)) {
						t.Errorf("round %d, slot %d: %+v", round, w, st[w])
					}
					if ok, s, err := reqs[w].Test(); !ok || s != st[w] || err != nil {
						t.Errorf("round %d, slot %d: Test %v %+v %v", round, w, ok, s, err)
					}
				}
			}
			return nil
		})
	})
}

// A slot whose receive is pending is not reused: IrecvInto returns another
// request, failed with ErrArg, and the pending receive still gets its
// message. Errors, ProcNull, Cancel and Done leave the slot reusable.
func TestRecvSlotBusyAndErrors(t *testing.T) {
	transports(t, 2, nil, func(t *testing.T, comms []*Comm) {
		c0, c1 := comms[0], comms[1]
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		var s RecvSlot
		buf := make([]byte, 8)
		r := IrecvInto(&s, c0, buf, 1, 1)
		busy := IrecvInto(&s, c0, make([]byte, 8), 1, 2)
		if busy == r {
			t.Fatal("a pending slot was reused")
		}
		if _, err := busy.Wait(ctx); !errors.Is(err, ErrArg) {
			t.Fatalf("busy slot: %v", err)
		}
		if err := Send(c1, []byte("pending!"), 0, 1); err != nil {
			t.Fatal(err)
		}
		if st, err := r.Wait(ctx); err != nil || st.Tag != 1 || string(buf) != "pending!" {
			t.Fatalf("pending receive: %+v %v %q", st, err, buf)
		}

		cases := []struct {
			name     string
			src, tag int
			want     error
			st       Status
		}{
			{"bad tag", 1, -5, ErrTag, Status{}},
			{"bad rank", 7, 1, ErrRank, Status{}},
			{"ProcNull", ProcNull, 1, nil, procNullStatus},
		}
		for _, tc := range cases {
			r := IrecvInto(&s, c0, buf, tc.src, tc.tag)
			if r != &s.req {
				t.Fatalf("%s: not the slot's request", tc.name)
			}
			if ok, st, err := r.Test(); !ok || !errors.Is(err, tc.want) || (tc.want == nil && err != nil) || st != tc.st {
				t.Errorf("%s: %v %+v %v", tc.name, ok, st, err)
			}
		}

		// Cancel, with a Done channel asked for first.
		r = IrecvInto(&s, c0, buf, 1, 3)
		done := r.Done()
		if !r.Cancel() {
			t.Fatal("cancel failed")
		}
		<-done
		if _, err := r.Wait(ctx); !errors.Is(err, ErrCancelled) {
			t.Fatalf("cancelled: %v", err)
		}
		// Reused after all that: a fresh Done channel, the right message.
		r = IrecvInto(&s, c0, buf, 1, 4)
		if r.isDone() {
			t.Fatal("reused slot already complete")
		}
		done = r.Done()
		go Send(c1, []byte("again..."), 0, 4)
		select {
		case <-done:
		case <-ctx.Done():
			t.Fatal("reused slot never completed")
		}
		if st, err := r.Wait(ctx); err != nil || st.Tag != 4 || string(buf) != "again..." {
			t.Fatalf("reused: %+v %v %q", st, err, buf)
		}
	})
}

// A request Irecv returned is never reused by the runtime: after many
// windows of other receives (into slots, and plain), it still reads as the
// receive it was.
func TestIrecvRequestNotReused(t *testing.T) {
	transports(t, 2, nil, func(t *testing.T, comms []*Comm) {
		c0, c1 := comms[0], comms[1]
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		buf := make([]byte, 8)
		kept := Irecv(c0, buf, 1, 7)
		if err := Send(c1, []byte("kept...."), 0, 7); err != nil {
			t.Fatal(err)
		}
		want, err := kept.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		slots := make([]RecvSlot, 16)
		reqs := make([]*Request, 16)
		for i := 0; i < 50; i++ {
			for w := range reqs {
				if w%2 == 0 {
					reqs[w] = IrecvInto(&slots[w], c0, make([]byte, 4), 1, 8)
				} else {
					reqs[w] = Irecv(c0, make([]byte, 4), 1, 8)
				}
				if reqs[w] == kept {
					t.Fatal("a kept request was handed out again")
				}
			}
			for range reqs {
				if err := Send(c1, []byte("xyz"), 0, 8); err != nil {
					t.Fatal(err)
				}
			}
			if err := WaitAllInto(ctx, nil, reqs...); err != nil {
				t.Fatal(err)
			}
		}
		if st, err := kept.Wait(ctx); st != want || err != nil || st.Tag != 7 {
			t.Fatalf("kept request now reads %+v %v, was %+v", st, err, want)
		}
	})
}

// The message-rate loop (osu_mbw_mr's receiver: windows of IrecvInto into
// reused slots, WaitAllInto with a reused status array) allocates nothing
// per message over shared memory, whether the messages are in the ring
// when the receives start or come after them. (Irecv and WaitAll
// allocated about 260 bytes a message, which kept the garbage collector
// running.) The link's reader is kept away: frames it takes while no one
// receives become unexpected messages, which are allocated (that is not
// this loop's path, and how often it happens depends on the host's load).
func TestRecvSlotNoAllocation(t *testing.T) {
	needShm(t)
	comms, _ := shmWorld(t, 2, nil)
	exchange(t, comms, []int{8})
	c0, c1 := comms[0], comms[1]
	defer keepReaderAway(t, c0.p.peers[1].shmL.Load())()
	ctx := context.Background()
	const W, windows = 64, 400
	slots := make([]RecvSlot, W)
	reqs, sreqs := make([]*Request, W), make([]*Request, W)
	st := make([]Status, W)
	buf, rbuf := make([]byte, 8), make([]byte, 8)
	send := func() {
		for w := range sreqs {
			sreqs[w] = Isend(c1, buf, 0, 2)
		}
		if err := WaitAllInto(ctx, st, sreqs...); err != nil {
			t.Fatal(err)
		}
	}
	recv := func() {
		for w := range reqs {
			reqs[w] = IrecvInto(&slots[w], c0, rbuf, 1, 2)
		}
	}
	wait := func() {
		if err := WaitAllInto(ctx, st, reqs...); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		window func()
	}{
		{"in the ring", func() { send(); recv(); wait() }},
		{"posted", func() { recv(); send(); wait() }},
	} {
		tc.window() // warm up: the slots' first use
		// The count is the process's: the least of three runs leaves out
		// what other goroutines (earlier tests' lingering ones) allocated.
		perMsg := math.Inf(1)
		for range 3 {
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			for range windows {
				tc.window()
			}
			runtime.ReadMemStats(&m1)
			perMsg = min(perMsg, float64(m1.TotalAlloc-m0.TotalAlloc)/(W*windows))
		}
		t.Logf("%s: %.2f bytes allocated per message", tc.name, perMsg)
		if perMsg > 4 {
			t.Errorf("%s: %.1f bytes allocated per message", tc.name, perMsg)
		}
	}
}

// keepReaderAway makes l's reader leave the ring to helpers until the
// returned function is called: it sees a helper waiting (want) for as long
// as the ring's users keep taking it directly.
func keepReaderAway(t *testing.T, l *shmLink) (restore func()) {
	t.Helper()
	if !l.want.CompareAndSwap(0, 1) {
		t.Fatal("a helper is waiting")
	}
	deadline := time.Now().Add(10 * time.Second)
	for !l.tok.CompareAndSwap(tokFree, tokHelper) {
		if c := l.idleCancel.Load(); c != nil {
			(*c)()
		}
		if time.Now().After(deadline) {
			t.Fatal("the reader kept the ring")
		}
		time.Sleep(100 * time.Microsecond)
	}
	l.tok.Store(tokFree)
	return func() {
		l.want.Store(0)
		wakeReader(l)
	}
}

// An IrecvInto whose message is already in the ring takes it at once
// (irecvNow), eager or rendezvous: a rendezvous matched there runs in the
// slot's own request, and the slot is reused after it with a fresh
// operation.
func TestRecvSlotNow(t *testing.T) {
	needShm(t)
	comms, _ := shmWorld(t, 2, nil)
	exchange(t, comms, []int{8})
	c0, c1 := comms[0], comms[1]
	l := c0.p.peers[1].shmL.Load()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var s RecvSlot
	for k, msg := range [][]byte{pattern(1<<20, 1), []byte("eager..."), pattern(1<<20, 2)} {
		sent := make(chan error, 1)
		holdRing(t, l, func() {
			go func() { sent <- Send(c1, msg, 0, k) }()
			if len(msg) > c1.p.cfg.EagerLimit {
				return // the rendezvous completes while the receive runs
			}
			if err := <-sent; err != nil {
				t.Fatal(err)
			}
			sent <- nil
		})
		before := l.xn
		buf := make([]byte, len(msg))
		r := IrecvInto(&s, c0, buf, 1, k)
		if r != &s.req {
			t.Fatalf("message %d: not the slot's request", k)
		}
		if l.xn != before+1 {
			t.Errorf("message %d: not matched on the ring", k)
		}
		wakeReader(l)
		st, err := r.Wait(ctx)
		if err != nil || st.Tag != k || st.Count != len(msg) || !bytes.Equal(buf, msg) {
			t.Errorf("message %d: %+v %v", k, st, err)
		}
		if err := <-sent; err != nil {
			t.Fatal(err)
		}
	}
}

// A slot re-posted with the envelope it was posted with before skips the
// checks it passed then (IrecvInto), but not the ones whose answer can
// change: a freed communicator still fails with ErrFreed, a source that
// died with a *PeerError, a process shut down with its error; and an
// AnySource slot that received a rendezvous (whose operation then names
// the sender) still receives from any source.
func TestRecvSlotRepostChecks(t *testing.T) {
	for _, tr := range transportMods {
		t.Run(tr.name, func(t *testing.T) {
			comms, _ := world(t, 3, tr.mod)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			small, big := []byte("12345678"), pattern(200<<10, 1) // eager, rendezvous
			dups := make([]*Comm, 3)
			each(t, comms, func(c *Comm) error {
				d, err := c.Dup()
				dups[c.Rank()] = d
				return err
			})
			var s, sd, sa RecvSlot
			buf, dbuf, abuf := make([]byte, 8), make([]byte, 4), make([]byte, len(big))
			recv := func(name string, r *Request, from int, want []byte, b []byte) {
				t.Helper()
				if st, err := r.Wait(ctx); err != nil || st.Source != from || !bytes.Equal(b[:st.Bytes], want) {
					t.Fatalf("%s: %+v %v", name, st, err)
				}
			}
			for i := 0; i < 3; i++ { // posted again and again from the same slots
				r, rd := IrecvInto(&s, comms[0], buf, 1, 5), IrecvInto(&sd, dups[0], dbuf, 1, 5)
				ra := IrecvInto(&sa, comms[0], abuf, AnySource, 6)
				if err := Send(comms[1], small, 0, 5); err != nil {
					t.Fatal(err)
				}
				if err := Send(dups[1], small[:4], 0, 5); err != nil {
					t.Fatal(err)
				}
				if err := Send(comms[2], big, 0, 6); err != nil {
					t.Fatal(err)
				}
				recv("slot", r, 1, small, buf)
				recv("dup's slot", rd, 1, small[:4], dbuf)
				recv("AnySource slot, rendezvous", ra, 2, big, abuf)
				ra = IrecvInto(&sa, comms[0], abuf, AnySource, 6)
				if err := Send(comms[1], small, 0, 6); err != nil {
					t.Fatal(err)
				}
				recv("AnySource slot after a rendezvous", ra, 1, small, abuf)
			}

			each(t, dups, func(d *Comm) error { return d.Free() })
			if _, err := IrecvInto(&sd, dups[0], dbuf, 1, 5).Wait(ctx); !errors.Is(err, ErrFreed) {
				t.Fatalf("slot re-posted on a freed communicator: %v", err)
			}

			killProc(comms[1].p)
			var pe *PeerError
			if _, err := IrecvInto(&s, comms[0], buf, 1, 5).Wait(ctx); !errors.As(err, &pe) || pe.Rank != 1 {
				t.Fatalf("slot re-posted for a dead source: %v", err)
			}

			r := IrecvInto(&sa, comms[0], abuf, AnySource, 6) // fails with rank 1, or at the shutdown
			killProc(comms[0].p)
			if _, err := r.Wait(ctx); err == nil {
				t.Fatal("AnySource receive pending at the shutdown: no error")
			}
			if _, err := IrecvInto(&sa, comms[0], abuf, AnySource, 6).Wait(ctx); err == nil {
				t.Fatal("slot re-posted after the shutdown: no error")
			}
		})
	}
}
