package mpi

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
)

// Status describes a received (or probed) message.
type Status struct {
	Source int // sender's rank in the communicator
	Tag    int
	Count  int // elements of the receive type (bytes for values); Undefined if the message is not a whole number of them
	Bytes  int // message bytes delivered (or, for probes, the message length)
}

// ErrCancelled is returned by a receive removed with Request.Cancel.
var ErrCancelled = errors.New("mpi: request cancelled")

// Request is a pending non-blocking operation. It completes once; Wait,
// Test and Done may be used from any goroutine.
//
// Fields are ordered so that little is padded (4 bytes after mu: the size
// is 112 bytes, as with a separate Done flag): a posted receive allocates
// one (with its recvOp) per message, and at millions of messages a second
// the garbage collector's work is their bytes.
type Request struct {
	// state is reqPending, reqCompleting or reqComplete, plus reqAsked
	// once Done was called (complete must then take mu and close done).
	// One word, so that completing a request no one asked a channel of is
	// one atomic operation. It is accessed atomically, except by the owner
	// of a request no one else can see yet (setLocal).
	state  uint32
	mu     sync.Mutex    // guards done
	done   chan struct{} // made on demand by Done (most waits never need it)
	status Status
	err    error
	data   []byte   // RecvValue's message
	op     *recvOp  // a receive's operation (its comm's engine can cancel it)
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
			return pe.shmL.Load()
		}
	}
	return nil
}

const (
	reqPending    = iota
	reqCompleting     // status and err being written
	reqComplete       // status and err final
	reqAsked      = 4 // flag: Done was called
	reqPhase      = 3 // the mask of the states above
)

// closedChan is the Done channel of requests completed before anyone
// asked for one.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

func newRequest() *Request { return &Request{} }

func doneRequest(err error) *Request {
	r := newRequest()
	r.complete(Status{}, err)
	return r
}

// setLocal sets the state with a plain store: only for a request that no
// other goroutine can see (not yet returned, or a slot being reused after
// its owner saw it complete). The request's publication (the engine's
// lock, or returning it) orders the store before any other access.
func (r *Request) setLocal(state uint32) { r.state = state }

// complete records the result; only the first call counts.
func (r *Request) complete(st Status, err error) {
	for {
		s := atomic.LoadUint32(&r.state)
		if s&reqPhase != reqPending {
			return
		}
		if atomic.CompareAndSwapUint32(&r.state, s, s|reqCompleting) {
			break
		}
	}
	r.status, r.err = st, err
	r.publish()
}

// completeOwned is complete for a receive that only the caller can
// complete: an eager message's, whose operation the caller took out of the
// posted queue under the engine's lock (which is what Cancel and peer
// failures complete from). A request no one asked a channel of completes
// with one compare-and-swap, its last touch.
func (r *Request) completeOwned(st Status, err error) {
	r.status, r.err = st, err
	if !atomic.CompareAndSwapUint32(&r.state, reqPending, reqComplete) {
		r.publishAsked()
	}
}

// publish ends complete once status and err are written.
func (r *Request) publish() {
	// Done adds reqAsked to the state before it looks at the phase, so if
	// Done saw the request pending or completing, this CAS fails and we
	// close its channel under mu. Without it the CAS is our last touch:
	// Recv recycles requests it sees complete without reqAsked.
	if !atomic.CompareAndSwapUint32(&r.state, reqCompleting, reqComplete) {
		r.publishAsked()
	}
}

// wokeWaiters counts completions of requests whose Done channel someone
// may be blocked on (publishAsked). A link's reader goroutine that made one
// runnable yields at once (readFrames): with GOMAXPROCS 1, the usual share
// of a rank on a host it shares, the waiter would otherwise wait for the
// reader's next scheduling point, tens of µs into its spin.
var wokeWaiters atomic.Uint64

// publishAsked completes a request Done was called on.
func (r *Request) publishAsked() {
	wokeWaiters.Add(1)
	r.mu.Lock()
	atomic.StoreUint32(&r.state, reqComplete|reqAsked)
	if r.done != nil {
		close(r.done)
	}
	r.mu.Unlock()
}

// rearm makes a completed request pending again for its owner's next
// operation (a RecvSlot's, a Persistent's): the owner saw it complete, so
// no one else looks. Only what is set is cleared: every pointer store
// costs a write barrier while the garbage collector runs.
func (r *Request) rearm() {
	if r.asked() {
		// complete still holds mu while it closes done.
		r.mu.Lock()
		r.mu.Unlock() //lint:ignore SA2001 waiting for complete to leave is the point
	}
	r.setLocal(reqPending)
	if r.done != nil {
		r.done = nil
	}
	r.status = Status{}
	if r.err != nil {
		r.err = nil
	}
	if r.data != nil {
		r.data = nil
	}
	if r.link != nil {
		r.link = nil
	}
	if r.op != nil {
		r.op = nil
	}
}

// isDone reports whether r completed (its status and err are final).
func (r *Request) isDone() bool { return atomic.LoadUint32(&r.state)&reqPhase == reqComplete }

// asked reports whether Done was called on r.
func (r *Request) asked() bool { return atomic.LoadUint32(&r.state)&reqAsked != 0 }

// Done is closed when the request completes; use it in select. The
// channel is made on the first call (a request that completes before
// anyone waits on a channel never needs one).
func (r *Request) Done() <-chan struct{} {
	if r.isDone() {
		return closedChan
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		s := atomic.LoadUint32(&r.state)
		if s&reqAsked == 0 && !atomic.CompareAndSwapUint32(&r.state, s, s|reqAsked) {
			continue
		}
		switch s & reqPhase {
		case reqComplete:
			return closedChan
		case reqPending:
			if r.done == nil {
				r.done = make(chan struct{})
			}
			return r.done
		}
		// Completing: the completer's CAS will fail on reqAsked and
		// it waits for mu to close the channel.
		r.mu.Unlock()
		runtime.Gosched()
		r.mu.Lock()
	}
}

// Wait blocks until the request completes or ctx ends. When ctx ends first
// it returns an error wrapping ctx.Err(); the request stays pending (Wait
// again, or Cancel a receive).
func (r *Request) Wait(ctx context.Context) (Status, error) {
	if r.isDone() {
		return r.status, r.err
	}
	if ctx.Done() == nil {
		// An uncancellable wait on a same-host peer receives on this
		// goroutine (no hand-off from the link's reader).
		if l := r.shmLink(); l != nil {
			l.help(r, nil)
			if r.isDone() {
				return r.status, r.err
			}
		}
	}
	select {
	case <-r.Done():
		return r.status, r.err
	case <-ctx.Done():
		return Status{}, fmt.Errorf("mpi: wait: %w", ctx.Err())
	}
}

// Test reports whether the request has completed, and if so its result.
func (r *Request) Test() (bool, Status, error) {
	if r.isDone() {
		return true, r.status, r.err
	}
	return false, Status{}, nil
}

// Cancel withdraws a receive that has not matched a message yet; the
// request then completes with ErrCancelled. It reports whether it did.
// Sends cannot be cancelled.
func (r *Request) Cancel() bool {
	if r.op == nil || r.op.comm == nil {
		return false
	}
	if r.op.comm.p.eng.cancel(r.op) {
		r.complete(Status{}, ErrCancelled)
		return true
	}
	return false
}

// WaitAll waits for every request (nil ones are skipped) and returns their
// statuses; when any failed, the error is a *RequestError naming them.
func WaitAll(ctx context.Context, reqs ...*Request) ([]Status, error) {
	st := make([]Status, len(reqs))
	return st, waitAll(ctx, st, reqs)
}

// WaitAny waits until one request completes and returns its index, status
// and error, and sets that element of reqs to nil (as MPI sets a completed
// request to MPI_REQUEST_NULL), so that calling WaitAny again on the same
// slice waits for another. With no non-nil request it returns -1.
func WaitAny(ctx context.Context, reqs ...*Request) (int, Status, error) {
	cases := make([]reflect.SelectCase, 0, len(reqs)+1)
	idx := make([]int, 0, len(reqs))
	for i, r := range reqs {
		if r == nil {
			continue
		}
		if ok, s, err := r.Test(); ok {
			reqs[i] = nil
			return i, s, err
		}
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(r.Done())})
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
	reqs[idx[chosen]] = nil
	return idx[chosen], r.status, r.err
}

// WaitSome waits until at least one request completes and returns the
// indices of all completed ones with their statuses, setting those
// elements of reqs to nil (see WaitAny); when any of them failed, the
// error is a *RequestError naming them. With no non-nil request it
// returns nothing.
func WaitSome(ctx context.Context, reqs ...*Request) ([]int, []Status, error) {
	i, s, err := WaitAny(ctx, reqs...)
	if i < 0 {
		return nil, nil, err
	}
	ids, sts := []int{i}, []Status{s}
	var fail *RequestError
	addFailure(&fail, i, err)
	for j, r := range reqs {
		if r == nil {
			continue
		}
		if ok, s, e := r.Test(); ok {
			reqs[j] = nil
			ids = append(ids, j)
			sts = append(sts, s)
			addFailure(&fail, j, e)
		}
	}
	return ids, sts, failures(fail)
}
