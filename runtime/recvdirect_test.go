package mpi

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"
)

// Blocking receives from a same-host peer match on the ring (recvDirect):
// eager and rendezvous messages, a later tag first (the earlier message
// then waits in the engine), truncation. The sender waits until the
// receiver is in Recv, so that each receive finds the engine empty.
func TestShmDirectRecv(t *testing.T) {
	needShm(t)
	comms, _ := shmWorld(t, 2, nil)
	exchange(t, comms, []int{8})
	big := pattern(1<<20, 3)
	cases := []struct {
		msgs [][]byte
		tag  int // of the receive; messages have tags 1, 2, ...
		buf  int
		want []byte
		err  error
	}{
		{[][]byte{[]byte("one"), []byte("two")}, 2, 8, []byte("two"), nil},
		{[][]byte{big}, 1, len(big), big, nil},
		{[][]byte{pattern(16, 4)}, 1, 8, pattern(16, 4)[:8], ErrTruncate},
	}
	ready := make(chan int)
	go func() {
		for k := range ready {
			time.Sleep(20 * time.Millisecond) // rank 0 waits on the ring
			for i, m := range cases[k].msgs {
				if err := Send(comms[1], m, 0, i+1); err != nil {
					t.Error(err)
				}
			}
		}
	}()
	defer close(ready)
	c := comms[0]
	l := c.p.peers[1].shmL.Load() // its direct receives are counted by the receiving goroutine
	for k, tc := range cases {
		before := l.xn
		ready <- k
		buf := make([]byte, tc.buf)
		st, err := Recv(c, buf, 1, tc.tag)
		if !errors.Is(err, tc.err) || st.Source != 1 || st.Tag != tc.tag || !bytes.Equal(buf[:st.Count], tc.want) {
			t.Errorf("case %d: %d bytes, %+v, %v", k, st.Count, st, err)
		}
		if l.xn != before+1 {
			t.Errorf("case %d: not matched on the ring", k)
		}
		for i := range tc.msgs[:len(tc.msgs)-1] { // the earlier tags wait in the engine
			if st, err := Recv(c, buf, 1, i+1); err != nil || !bytes.Equal(buf[:st.Count], tc.msgs[i]) {
				t.Errorf("case %d, tag %d: %+v %v", k, i+1, st, err)
			}
		}
	}
}

// A receive another goroutine posts while a direct receive waits is the
// later one: the first message matching both goes to the direct receive.
func TestShmDirectRecvOrder(t *testing.T) {
	needShm(t)
	comms, _ := shmWorld(t, 2, nil)
	exchange(t, comms, []int{8})
	c0, c1 := comms[0], comms[1]
	first := make(chan string, 1)
	go func() {
		buf := make([]byte, 8)
		st, err := Recv(c0, buf, 1, 7)
		if err != nil {
			first <- err.Error()
			return
		}
		first <- string(buf[:st.Count])
	}()
	time.Sleep(20 * time.Millisecond) // the direct receive is waiting on the ring
	buf := make([]byte, 8)
	later := Irecv(c0, buf, AnySource, 7)
	for _, m := range []string{"first", "second"} {
		if err := Send(c1, []byte(m), 0, 7); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := later.Wait(ctx)
	if err != nil || string(buf[:st.Count]) != "second" {
		t.Errorf("posted later: %q %v", buf[:st.Count], err)
	}
	select {
	case got := <-first:
		if got != "first" {
			t.Errorf("direct receive got %q", got)
		}
	case <-ctx.Done():
		t.Fatal("direct receive did not return")
	}
}

// A peer that dies while a direct receive waits for it ends the receive
// with a PeerError, promptly.
func TestShmDirectRecvPeerDeath(t *testing.T) {
	needShm(t)
	comms, _ := shmWorld(t, 2, nil)
	exchange(t, comms, []int{8})
	errc := make(chan error, 1)
	go func() {
		_, err := Recv(comms[0], make([]byte, 8), 1, 7)
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond)
	p1 := comms[1].p
	start := time.Now()
	killProc(p1)
	select {
	case err := <-errc:
		var pe *PeerError
		if !errors.As(err, &pe) || pe.Rank != 1 {
			t.Fatalf("recv: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("direct receive did not return")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("peer death noticed after %v", d)
	}
}
