package mpi

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// within runs f and fails the test unless it returns in time (the
// operation under test must end, with an error, in bounded time).
func within(t *testing.T, what string, d time.Duration, f func() error) error {
	t.Helper()
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	select {
	case err := <-ch:
		return err
	case <-time.After(d):
		t.Fatalf("%s did not return within %v", what, d)
		return nil
	}
}

// A peer that died before any connection to it was made: receives,
// probes and a Bcast from it must end with its *PeerError, since no
// connection loss will ever be seen (the receiving side dials).
func TestPeerDeadBeforeConnect(t *testing.T) {
	for _, n := range []int{2, 3, 8} {
		comms, _ := world(t, n, nil)
		dead := n - 1
		killProc(comms[dead].p)
		check := func(what string, err error) {
			t.Helper()
			var pe *PeerError
			if !errors.As(err, &pe) || pe.Rank != dead {
				t.Errorf("n=%d %s: %v, want a PeerError for rank %d", n, what, err, dead)
			}
		}
		check("Recv", within(t, "Recv", 20*time.Second, func() error {
			_, err := Recv(comms[0], make([]byte, 8), dead, 1)
			return err
		}))
		if n > 2 {
			check("Irecv", within(t, "Irecv", 20*time.Second, func() error {
				_, err := Irecv(comms[1], make([]byte, 1<<20), dead, 1).Wait(context.Background())
				return err
			}))
			check("Probe", within(t, "Probe", 20*time.Second, func() error {
				_, err := Probe[byte](comms[n-2], dead, AnyTag)
				return err
			}))
		}
	}
}

// Every survivor calls Bcast from a root that died before any connection:
// each must return a *PeerError (naming the root, or a survivor that gave
// up and finalized), none may hang.
func TestPeerDeadBeforeConnectBcast(t *testing.T) {
	for _, n := range []int{2, 3, 5, 8} {
		comms, _ := world(t, n, nil)
		dead := n - 1
		killProc(comms[dead].p)
		errs := make([]error, n-1)
		done := make(chan struct{})
		go func() {
			defer close(done)
			var wg sync.WaitGroup
			for r := 0; r < n-1; r++ {
				wg.Add(1)
				go func(r int) {
					defer wg.Done()
					errs[r] = Bcast(comms[r], make([]byte, 8), dead)
					comms[r].Finalize()
				}(r)
			}
			wg.Wait()
		}()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("n=%d: Bcast from a dead root did not return", n)
		}
		for r, err := range errs {
			var pe *PeerError
			if !errors.As(err, &pe) {
				t.Errorf("n=%d rank %d: %v, want a PeerError", n, r, err)
			}
		}
	}
}

// Messages a peer sent (its Send returned) just before it died can still
// be received afterwards, on every transport (docs/transport.md). Over
// shared memory the test holds rank 0's ring meanwhile, so the frames are
// still in the ring, unread, when the control connection drops.
func TestPeerDeathKeepsSentMessages(t *testing.T) {
	for _, n := range []int{2, 3} {
		comms, _ := world(t, n, nil)
		each(t, comms, func(c *Comm) error { return c.Barrier() }) // connect
		var held *shmLink
		if l := comms[0].p.peers[1].shmL.Load(); l != nil && l.acquire() {
			held = l
		}
		const count = 20
		for i := 0; i < count; i++ {
			if err := Send(comms[1], pattern(100+i*50, i), 0, i); err != nil {
				t.Fatal(err)
			}
		}
		killProc(comms[1].p)
		// Let rank 0 notice the loss before it reads anything.
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if held == nil || held.lost.Load() != nil {
				break
			}
		}
		if held != nil {
			held.release()
		}
		for i := 0; i < count; i++ {
			buf := make([]byte, 100+i*50)
			err := within(t, "Recv", 20*time.Second, func() error {
				_, err := Recv(comms[0], buf, 1, i)
				return err
			})
			if err != nil {
				t.Fatalf("n=%d message %d: %v", n, i, err)
			}
			if string(buf) != string(pattern(len(buf), i)) {
				t.Fatalf("n=%d message %d: wrong data", n, i)
			}
		}
		var pe *PeerError
		err := within(t, "Recv", 20*time.Second, func() error {
			_, err := Recv(comms[0], make([]byte, 8), 1, count)
			return err
		})
		if !errors.As(err, &pe) || pe.Rank != 1 {
			t.Fatalf("n=%d later recv: %v", n, err)
		}
	}
}

// A peer that dials this rank, sends and dies while this rank's own dial
// to it is still on its way: that dial is refused, but the connection the
// peer made carries its message, which must still be received (then the
// peer's *PeerError). Before, the refused dial failed the peer at once and
// the accepted connection was dropped with the message in it.
func TestDialRefusedWhileAccepting(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Config)
	}{
		{"shm", nil},
		{"tcp", func(c *Config) { c.NoSharedMemory = true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			comms, _ := world(t, 2, tc.mod)
			p1 := comms[1].p
			dialGate, acceptGate, accepted := make(chan struct{}), make(chan struct{}), make(chan struct{})
			dialHook := func(p *proc, pe *peer) {
				if p == p1 && pe.rank == 0 {
					<-dialGate
				}
			}
			acceptHook := func(p *proc, pe *peer) {
				if p == p1 && pe.rank == 0 {
					close(accepted)
					<-acceptGate
				}
			}
			testHookDial.Store(&dialHook)
			testHookAccepted.Store(&acceptHook)
			t.Cleanup(func() { testHookDial.Store(nil); testHookAccepted.Store(nil) })

			buf := make([]byte, 5)
			r := Irecv(comms[1], buf, 0, 5) // rank 1 starts dialling rank 0 (held)
			if err := within(t, "Send", 20*time.Second, func() error {
				return Send(comms[0], []byte("hello"), 1, 5) // rank 0 dials rank 1
			}); err != nil {
				t.Fatal(err)
			}
			<-accepted
			killProc(comms[0].p)
			close(dialGate) // rank 1's dial is refused now
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(time.Millisecond) {
				pe := p1.peers[0]
				pe.mu.Lock()
				done := pe.err != nil || pe.dialErr != nil
				pe.mu.Unlock()
				if done {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("rank 1's dial did not end")
				}
			}
			close(acceptGate)
			if err := within(t, "Irecv", 20*time.Second, func() error {
				_, err := r.Wait(context.Background())
				return err
			}); err != nil || string(buf) != "hello" {
				t.Fatalf("message sent before the peer died: %q, %v", buf, err)
			}
			var pe *PeerError
			if err := within(t, "Recv", 20*time.Second, func() error {
				_, err := Recv(comms[1], buf, 0, 6)
				return err
			}); !errors.As(err, &pe) || pe.Rank != 0 {
				t.Fatalf("later receive: %v, want rank 0's PeerError", err)
			}
		})
	}
}
