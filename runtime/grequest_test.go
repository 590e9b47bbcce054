package mpi

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestGeneralizedRequests(t *testing.T) {
	ctx := context.Background()
	boom := errors.New("boom")
	release := make(chan struct{})
	slow := Go(func() (Status, error) { <-release; return Status{Bytes: 1}, nil })
	req, complete := StartRequest()
	if ok, _, _ := req.Test(); ok {
		t.Fatal("StartRequest: request complete before complete was called")
	}
	if req.Cancel() {
		t.Fatal("Cancel of a generalized request reported true")
	}
	go func() { time.Sleep(10 * time.Millisecond); complete(Status{Bytes: 7}, boom) }()
	i, st, err := WaitAny(ctx, slow, req)
	if i != 1 || st.Bytes != 7 || !errors.Is(err, boom) {
		t.Fatalf("WaitAny = %d, %+v, %v; want 1, Bytes 7, boom", i, st, err)
	}
	complete(Status{Bytes: 9}, nil) // ignored: first call wins
	if _, st, err := req.Test(); st.Bytes != 7 || !errors.Is(err, boom) {
		t.Fatalf("second complete changed the result: %+v, %v", st, err)
	}
	close(release)
	if st, err := slow.Wait(ctx); err != nil || st.Bytes != 1 {
		t.Fatalf("Go request: %+v, %v", st, err)
	}
}
