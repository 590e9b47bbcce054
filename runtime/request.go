package mpi

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
)

// Status describes a received (or probed) message.
type Status struct {
	Source int // sender's rank in the communicator
	Tag    int
	Count  int // elements of the receive type (bytes for values)
	Bytes  int // message bytes delivered (or, for probes, the message length)
}

// ErrCancelled is returned by a receive removed with Request.Cancel.
var ErrCancelled = errors.New("mpi: request cancelled")

// Request is a pending non-blocking operation. It completes once; Wait,
// Test and Done may be used from any goroutine.
type Request struct {
	done   chan struct{}
	once   sync.Once
	status Status
	err    error
	data   []byte // RecvValue's message
	op     *recvOp
	eng    *engine
	link   *shmLink // a rendezvous send's shared-memory link
}

// shmLink returns the shared-memory link a waiter of r may receive on
// itself (see shmLink.help): a send's link, or a receive's from a named
// source.
func (r *Request) shmLink() *shmLink {
	if r.link != nil {
		return r.link
	}
	if op := r.op; op != nil && op.srcWorld >= 0 && op.comm != nil {
		if pe := op.comm.p.peers[op.srcWorld]; pe != nil {
			l, _ := pe.current().(*shmLink)
			return l
		}
	}
	return nil
}

func newRequest() *Request { return &Request{done: make(chan struct{})} }

func doneRequest(err error) *Request {
	r := newRequest()
	r.complete(Status{}, err)
	return r
}

func (r *Request) complete(st Status, err error) {
	r.once.Do(func() {
		r.status, r.err = st, err
		close(r.done)
	})
}

// Done is closed when the request completes; use it in select.
func (r *Request) Done() <-chan struct{} { return r.done }

// Wait blocks until the request completes or ctx ends. When ctx ends first
// it returns an error wrapping ctx.Err(); the request stays pending (Wait
// again, or Cancel a receive).
func (r *Request) Wait(ctx context.Context) (Status, error) {
	select {
	case <-r.done:
		return r.status, r.err
	default:
	}
	if ctx.Done() == nil {
		// An uncancellable wait on a same-host peer receives on this
		// goroutine (no hand-off from the link's reader).
		if l := r.shmLink(); l != nil {
			l.help(r, nil)
		}
	}
	select {
	case <-r.done:
		return r.status, r.err
	case <-ctx.Done():
		return Status{}, fmt.Errorf("mpi: wait: %w", ctx.Err())
	}
}

// Test reports whether the request has completed, and if so its result.
func (r *Request) Test() (bool, Status, error) {
	select {
	case <-r.done:
		return true, r.status, r.err
	default:
		return false, Status{}, nil
	}
}

// Cancel withdraws a receive that has not matched a message yet; the
// request then completes with ErrCancelled. It reports whether it did.
// Sends cannot be cancelled.
func (r *Request) Cancel() bool {
	if r.op == nil || r.eng == nil {
		return false
	}
	if r.eng.cancel(r.op) {
		r.complete(Status{}, ErrCancelled)
		return true
	}
	return false
}

// WaitAll waits for every request (nil ones are skipped) and returns their
// statuses; the error joins every request's error.
func WaitAll(ctx context.Context, reqs ...*Request) ([]Status, error) {
	st := make([]Status, len(reqs))
	var errs []error
	for i, r := range reqs {
		if r == nil {
			continue
		}
		s, err := r.Wait(ctx)
		if ctx.Err() != nil && err != nil && errors.Is(err, ctx.Err()) {
			return st, err
		}
		st[i] = s
		if err != nil {
			errs = append(errs, err)
		}
	}
	return st, errors.Join(errs...)
}

// WaitAny waits until one request completes and returns its index, status
// and error. With no non-nil request it returns -1.
func WaitAny(ctx context.Context, reqs ...*Request) (int, Status, error) {
	cases := make([]reflect.SelectCase, 0, len(reqs)+1)
	idx := make([]int, 0, len(reqs))
	for i, r := range reqs {
		if r == nil {
			continue
		}
		if ok, s, err := r.Test(); ok {
			return i, s, err
		}
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(r.done)})
		idx = append(idx, i)
	}
	if len(idx) == 0 {
		return -1, Status{}, nil
	}
	cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())})
	chosen, _, _ := reflect.Select(cases)
	if chosen == len(idx) {
		return -1, Status{}, fmt.Errorf("mpi: wait: %w", ctx.Err())
	}
	r := reqs[idx[chosen]]
	return idx[chosen], r.status, r.err
}

// WaitSome waits until at least one request completes and returns the
// indices of all completed ones with their statuses; errs joins their
// errors. With no non-nil request it returns nothing.
func WaitSome(ctx context.Context, reqs ...*Request) ([]int, []Status, error) {
	i, _, err := WaitAny(ctx, reqs...)
	if i < 0 {
		return nil, nil, err
	}
	var ids []int
	var sts []Status
	var errs []error
	for j, r := range reqs {
		if r == nil {
			continue
		}
		if ok, s, e := r.Test(); ok {
			ids = append(ids, j)
			sts = append(sts, s)
			if e != nil {
				errs = append(errs, e)
			}
		}
	}
	return ids, sts, errors.Join(errs...)
}
