package mpi

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"
)

// holdRing makes rank 0's ring from rank 1 hold exactly what send put in
// it, unread: rank 0 takes the ring as a helper (so its reader stays
// away), send runs, and once a frame is there the ring is left free
// without waking the reader (which waits for a helper's release), so that
// the next receive finds the frames in the ring and the ring free.
func holdRing(t *testing.T, l *shmLink, send func()) {
	t.Helper()
	for !l.acquire() {
		time.Sleep(time.Millisecond)
	}
	send()
	deadline := time.Now().Add(10 * time.Second)
	for !l.ch.PendingExclusive() {
		if time.Now().After(deadline) {
			l.release()
			t.Fatal("no frame arrived")
		}
		time.Sleep(100 * time.Microsecond)
	}
	// Let the rest of send's frames arrive, and a reader that was woken
	// before acquire finish its pause, see the ring held and wait for the
	// next release; then take back any wake-up meant for it.
	time.Sleep(20 * time.Millisecond)
	select {
	case <-l.resume:
	default:
	}
	l.tok.Store(tokFree)
}

// wakeReader undoes holdRing's hold on the reader, as a helper's release
// would: waits with a deadline rely on the reader.
func wakeReader(l *shmLink) {
	select {
	case l.resume <- struct{}{}:
	default:
	}
}

// An Irecv whose message is already in the ring completes at once, without
// the engine (irecvNow): eager messages, one behind a message of another
// tag (which then waits in the engine, and the next Irecv is posted),
// rendezvous, truncation; data, status and error are those of the ordinary
// path.
func TestShmIrecvNow(t *testing.T) {
	needShm(t)
	comms, _ := shmWorld(t, 2, nil)
	exchange(t, comms, []int{8})
	c0, c1 := comms[0], comms[1]
	l := c0.p.peers[1].shmL.Load()
	big := pattern(1<<20, 5)
	cases := []struct {
		msgs [][]byte // sent with tags 1, 2, ...
		tag  int      // of the Irecv
		buf  int
		want []byte
		err  error
		now  bool // completed inside Irecv
	}{
		{[][]byte{[]byte("eight by")}, 1, 8, []byte("eight by"), nil, true},
		{[][]byte{[]byte("one"), []byte("two")}, 2, 8, []byte("two"), nil, true},
		{[][]byte{pattern(16, 4)}, 1, 8, pattern(16, 4)[:8], ErrTruncate, true},
		{[][]byte{big}, 1, len(big), big, nil, false},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for k, tc := range cases {
		sent := make(chan error, 1)
		holdRing(t, l, func() {
			go func() {
				for i, m := range tc.msgs {
					if err := Send(c1, m, 0, i+1); err != nil {
						sent <- err
						return
					}
				}
				sent <- nil
			}()
			if len(tc.msgs) > 1 || len(tc.msgs[0]) > c1.p.cfg.EagerLimit {
				return // the rest follows while Irecv runs (or later)
			}
			if err := <-sent; err != nil {
				t.Fatal(err)
			}
			sent <- nil
		})
		before := l.xn
		buf := make([]byte, tc.buf)
		r := Irecv(c0, buf, 1, tc.tag)
		if tc.now && !r.isDone() {
			t.Errorf("case %d: Irecv did not complete at once", k)
		}
		if l.xn != before+1 {
			t.Errorf("case %d: not matched on the ring", k)
		}
		wakeReader(l)
		st, err := r.Wait(ctx)
		if !errors.Is(err, tc.err) || st.Source != 1 || st.Tag != tc.tag || !bytes.Equal(buf[:st.Count], tc.want) {
			t.Errorf("case %d: %d bytes, %+v, %v", k, st.Count, st, err)
		}
		for i := range tc.msgs[:len(tc.msgs)-1] { // the earlier tags wait in the engine
			r := Irecv(c0, buf, 1, i+1)
			st, err := r.Wait(ctx)
			if err != nil || !bytes.Equal(buf[:st.Count], tc.msgs[i]) {
				t.Errorf("case %d, tag %d: %+v %v", k, i+1, st, err)
			}
		}
		if err := <-sent; err != nil {
			t.Fatal(err)
		}
	}
	// With a receive posted, a later Irecv must not overtake it.
	first, second := make([]byte, 8), make([]byte, 8)
	r1 := Irecv(c0, first, AnySource, 9)
	holdRing(t, l, func() {
		for _, m := range []string{"first", "second"} {
			if err := Send(c1, []byte(m), 0, 9); err != nil {
				t.Fatal(err)
			}
		}
	})
	r2 := Irecv(c0, second, 1, 9)
	wakeReader(l)
	if _, err := WaitAll(ctx, r1, r2); err != nil || string(first[:5]) != "first" || string(second[:6]) != "second" {
		t.Errorf("order: %q %q %v", first, second, err)
	}
}

// BenchmarkShmMsgRate8 is osu_mbw_mr between two in-process ranks over
// shared memory: windows of 64 8-byte Isends and Irecvs, each window
// acknowledged. One op is one message.
func BenchmarkShmMsgRate8(b *testing.B) {
	const W = 64
	comms := benchWorld(b)
	ctx := context.Background()
	windows := (b.N + W - 1) / W
	done := make(chan error, 1)
	go func() {
		reqs := make([]*Request, W)
		buf := make([]byte, 8)
		for i := 0; i < windows; i++ {
			for w := range reqs {
				reqs[w] = Irecv(comms[1], buf, 0, 2)
			}
			if _, err := WaitAll(ctx, reqs...); err != nil {
				done <- err
				return
			}
			if err := Send(comms[1], buf[:4], 0, 3); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	reqs := make([]*Request, W)
	buf, ack := make([]byte, 8), make([]byte, 4)
	best := time.Hour
	b.ResetTimer()
	for i := 0; i < windows; i++ {
		t0 := time.Now()
		for w := range reqs {
			reqs[w] = Isend(comms[0], buf, 1, 2)
		}
		if _, err := WaitAll(ctx, reqs...); err != nil {
			b.Fatal(err)
		}
		if _, err := Recv(comms[0], ack, 1, 3); err != nil {
			b.Fatal(err)
		}
		best = min(best, time.Since(t0))
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	// The fastest window, which unlike the mean stays put on a busy
	// host: both ranks running, the receiver draining as the sender
	// fills (gompi-bench mr's overlap).
	b.ReportMetric(float64(best.Nanoseconds())/W, "min-window-ns/msg")
}
