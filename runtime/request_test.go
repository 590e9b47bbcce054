package mpi

import (
	"errors"
	"testing"
	"time"
)

// TestRequestDoneRacesComplete: Done called while the request completes,
// from another goroutine, returns a channel that is closed, with the
// completer's result, whichever of the two runs first (request.go keeps
// the Done flag and the phase in one word); only the first completion
// counts; and a slot reused after a Done keeps its new result.
func TestRequestDoneRacesComplete(t *testing.T) {
	errFirst := errors.New("first")
	tests := []struct {
		name     string
		complete func(r *Request, err error)
	}{
		{"complete", func(r *Request, err error) { r.complete(Status{Tag: 7}, err) }},
		{"completeOwned", func(r *Request, err error) { r.completeOwned(Status{Tag: 7}, err) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var s RecvSlot
			for i := 0; i < 2000; i++ {
				var r *Request
				if i%2 == 0 {
					r = newRequest()
				} else { // a reused slot's request: reset by a plain store
					if !s.reset() {
						t.Fatal("slot busy after its request completed")
					}
					r = &s.req
					if r.isDone() || r.asked() {
						t.Fatalf("reset left state %d", r.state)
					}
				}
				start := make(chan struct{})
				go func() {
					<-start
					tc.complete(r, errFirst)
				}()
				close(start)
				select {
				case <-r.Done():
				case <-time.After(10 * time.Second):
					t.Fatalf("round %d: Done never closed (state %d)", i, r.state)
				}
				r.complete(Status{}, errors.New("second")) // ignored
				if !r.isDone() || r.status.Tag != 7 || r.err != errFirst {
					t.Fatalf("round %d: done %v status %+v err %v", i, r.isDone(), r.status, r.err)
				}
			}
		})
	}
}

// TestRequestCompleteOwnedLastTouch: a request no one asked a channel of
// is complete without the Done flag, which is what lets Recv recycle it
// as soon as it sees it complete.
func TestRequestCompleteOwnedLastTouch(t *testing.T) {
	for _, owned := range []bool{false, true} {
		r := newRequest()
		if owned {
			r.completeOwned(Status{Count: 1}, nil)
		} else {
			r.complete(Status{Count: 1}, nil)
		}
		if r.state != reqComplete || r.status.Count != 1 {
			t.Fatalf("owned %v: state %d status %+v", owned, r.state, r.status)
		}
		if r.Done() != closedChan {
			t.Fatalf("owned %v: Done of a complete request is not closedChan", owned)
		}
	}
}
