package mpi

import (
	"runtime"
	"testing"
)

// An AnySource receive waits on its request's channel (no one helps a
// ring for it), so the link's reader goroutine completes it. The reader
// then yields at once: the waiting goroutine runs before the reader takes
// the next frame. With GOMAXPROCS 1 (a rank's share of a host it shares
// with another rank) the waiter otherwise ran only at the reader's next
// scheduling point, tens of µs into its spin; a task farm's master paid
// that on every request (gompi-bench farm: 140-230 ms against MPICH's 92).
// Schedulers are not bound to an order, so the test asks for most trials,
// not all: without the yield the waiter ran first in none.
func TestShmReaderYieldsToWaiter(t *testing.T) {
	needShm(t)
	comms, _ := shmWorld(t, 2, nil)
	exchange(t, comms, []int{8})
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	e := comms[0].p.eng
	unexpected := func() int {
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.unexpected.len()
	}
	const trials = 10
	first := 0
	buf := make([]byte, 8)
	for i := 0; i < trials; i++ {
		got := make(chan bool)
		go func() {
			b := make([]byte, 8)
			_, err := Recv(comms[0], b, AnySource, 1)
			if err != nil {
				t.Error(err)
			}
			got <- unexpected() == 0 // the second message is still in the ring
		}()
		for !e.queued.Load() { // the receive is posted
			runtime.Gosched()
		}
		for tag := 1; tag <= 2; tag++ {
			if err := Send(comms[1], []byte("12345678"), 0, tag); err != nil {
				t.Fatal(err)
			}
		}
		if <-got {
			first++
		}
		if _, err := Recv(comms[0], buf, 1, 2); err != nil {
			t.Fatal(err)
		}
	}
	if first < trials*7/10 {
		t.Errorf("the woken receiver ran before the reader's next frame in %d of %d trials", first, trials)
	}
}
