package mpi

import (
	"slices"
	"sync"
	"sync/atomic"
)

// recvOp is a posted receive (or a probe's view of one).
type recvOp struct {
	ctx      uint32
	alloc    bool // take the message as a new slice (RecvValue)
	shared   bool // entered peer.rdv: a peer failure may still complete it
	src      int  // rank in the communicator, or AnySource
	tag      int  // or AnyTag
	srcWorld int  // world rank of src, -1 for AnySource
	elem     int  // element size, for Status.Count
	comm     *Comm
	buf      []byte
	req      *Request
	split    *splitRecv // a CMA rendezvous both sides copy (shared memory)
}

// message is an unexpected message: eager data, or a rendezvous RTS.
type message struct {
	ctx      uint32
	src, tag int
	srcWorld int
	data     []byte
	rts      bool
	length   int
	id       uint64
	pe       *peer
	cma      bool   // rts: the sender offers its buffer for process_vm_readv
	pid      int    // cma: sender's pid
	addr     uint64 // cma: sender's buffer address
	waits    bool   // cma: the sender is blocked on this send (flagWait)
}

func (r *recvOp) matches(ctx uint32, src, tag int) bool {
	return r.ctx == ctx && (r.src == AnySource || r.src == src) && (r.tag == AnyTag || r.tag == tag)
}

// engine holds the posted-receive and unexpected-message queues of one
// process. Both are FIFO lists searched in order, which gives MPI's
// non-overtaking rule: between one sender and one receiver, messages
// matching the same receive are received in the order sent.
type engine struct {
	mu         sync.Mutex
	posted     fifo[recvOp]
	unexpected fifo[message]
	failed     map[int]failure // world rank -> why
	anyFailed  bool            // len(failed) > 0, without reaching the map on every post
	// anyFreed: a communicator was freed (failContexts), so a receive
	// being queued may be on it (freedErr).
	anyFreed bool
	closed   error
	changed  chan struct{} // closed and replaced when unexpected grows or peers fail
	// fams are the collective families that failed (failnotice.go);
	// notice handles the notices that say so (set by the process).
	fams   famSet
	notice func(m *message)

	// queued says a receive is posted or a message waits, for recvDirect
	// to read without the lock; stored only when it changes (rarely, in a
	// loop of blocking receives: never), so that it costs the queues'
	// users nothing. queuedNow is its value, read under mu.
	queued    atomic.Bool
	queuedNow bool
}

// trackLocked updates queued after the queues changed. Caller holds mu.
func (e *engine) trackLocked() {
	if q := e.posted.len()+e.unexpected.len() > 0; q != e.queuedNow {
		e.queuedNow = q
		e.queued.Store(q)
	}
}

type failure struct {
	err     error
	orderly bool // the peer finalized
}

func newEngine() *engine {
	return &engine{failed: map[int]failure{}, changed: make(chan struct{})}
}

func (e *engine) notifyLocked() {
	close(e.changed)
	e.changed = make(chan struct{})
}

// post matches r against the unexpected queue. It returns the matched
// message (removed), or nil after queueing r, or an error when r can never
// match (its source failed, or the runtime is closed).
func (e *engine) post(r *recvOp) (*message, error) {
	e.mu.Lock() // unlocked by hand: this is every receive's path
	for i, m := range e.unexpected.items() {
		if r.matches(m.ctx, m.src, m.tag) {
			e.unexpected.removeAt(i)
			e.trackLocked()
			e.mu.Unlock()
			return m, nil
		}
	}
	err := e.closed
	if err == nil {
		err = e.deadSourceLocked(r)
	}
	if err == nil && e.anyFreed {
		err = freedErr(r)
	}
	if err == nil {
		e.posted.push(r)
		e.trackLocked()
	}
	e.mu.Unlock()
	return nil, err
}

// freedErr is ErrFreed's error if r's communicator was freed, else nil.
// Posting checks it under the engine's lock: a receive that passed
// initRecvOp's check just before another goroutine's Free marked the
// communicator freed, and is queued after Free's failContexts, would
// otherwise wait forever (Free promises ErrFreed).
func freedErr(r *recvOp) error {
	if c := r.comm; c != nil && c.freed != nil && c.freed.Load() {
		return c.errUsable()
	}
	return nil
}

// empty says whether no receive is posted and no message waits (as of
// some recent moment: see recvDirect for why that is enough).
func (e *engine) empty() bool { return !e.queued.Load() }

// deadSourceLocked says whether r waits on a failed peer: its own source,
// or for AnySource any member that failed without finalizing.
func (e *engine) deadSourceLocked(r *recvOp) error {
	if !e.anyFailed {
		return nil
	}
	if err := e.fams.err(r.ctx); err != nil && r.tag != tagFree {
		return err
	}
	if r.srcWorld >= 0 {
		if f, ok := e.failed[r.srcWorld]; ok {
			return f.err
		}
		return nil
	}
	for w, f := range e.failed {
		if !f.orderly && r.comm != nil && r.comm.hasWorld(w) {
			return f.err
		}
	}
	return nil
}

// takePosted removes and returns the first posted receive matching the
// envelope, or nil.
func (e *engine) takePosted(ctx uint32, src, tag int) *recvOp {
	e.mu.Lock()
	r := e.takePostedLocked(ctx, src, tag)
	if r != nil {
		e.trackLocked()
	}
	e.mu.Unlock()
	return r
}

func (e *engine) takePostedLocked(ctx uint32, src, tag int) *recvOp {
	for i, r := range e.posted.items() {
		if r.matches(ctx, src, tag) {
			e.posted.removeAt(i)
			return r
		}
	}
	return nil
}

// fifo is a queue of the engine: items in order, searched from the head.
// The head, which is what matching in order removes nearly always, goes by
// advancing an index: with a window of receives posted, shifting the rest
// down for each message cost more than the match. The array is reused from
// its start whenever the queue empties (a window of receives posted and
// matched, over and over, allocates nothing), and compacted when it is
// full with a gap at the start.
type fifo[T any] struct {
	buf  []*T // buf[head:] are the items
	head int
}

func (f *fifo[T]) len() int    { return len(f.buf) - f.head }
func (f *fifo[T]) items() []*T { return f.buf[f.head:] }

func (f *fifo[T]) push(x *T) {
	if f.head > 0 && len(f.buf) == cap(f.buf) {
		n := copy(f.buf, f.buf[f.head:])
		clear(f.buf[n:])
		f.buf, f.head = f.buf[:n], 0
	}
	f.buf = append(f.buf, x)
}

// removeAt deletes items()[i], keeping order.
func (f *fifo[T]) removeAt(i int) {
	if i == 0 {
		f.buf[f.head] = nil // do not keep it reachable through the array
		f.head++
		if f.head == len(f.buf) {
			f.buf, f.head = f.buf[:0], 0
		}
		return
	}
	j := f.head + i
	copy(f.buf[j:], f.buf[j+1:])
	f.buf[len(f.buf)-1] = nil
	f.buf = f.buf[:len(f.buf)-1]
}

// take empties the queue and returns its items (the array is not reused).
func (f *fifo[T]) take() []*T {
	q := f.items()
	*f = fifo[T]{}
	return q
}

// arrive matches m against the posted receives; without a match m joins
// the unexpected queue and nil is returned.
func (e *engine) arrive(m *message) *recvOp {
	e.mu.Lock()
	r := e.takePostedLocked(m.ctx, m.src, m.tag)
	if r == nil {
		if m.ctx == ctxNotice && !m.rts && e.notice != nil {
			// Never posted for: a member-failure notice (failnotice.go).
			e.mu.Unlock()
			e.notice(m)
			return nil
		}
		e.unexpected.push(m)
		e.notifyLocked()
	}
	e.trackLocked()
	e.mu.Unlock()
	return r
}

// cancel removes r if it is still posted.
func (e *engine) cancel(r *recvOp) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, q := range e.posted.items() {
		if q == r {
			e.posted.removeAt(i)
			e.trackLocked()
			return true
		}
	}
	return false
}

// probe finds the first unexpected message matching (ctx, src, tag)
// without removing it. When there is none it returns a channel that is
// closed at the next change, and an error if none can ever come.
func (e *engine) probe(r *recvOp) (*message, <-chan struct{}, error) {
	return e.findUnexpected(r, false)
}

// findUnexpected is probe; take also removes the message it finds.
func (e *engine) findUnexpected(r *recvOp, take bool) (*message, <-chan struct{}, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, m := range e.unexpected.items() {
		if r.matches(m.ctx, m.src, m.tag) {
			if take {
				e.unexpected.removeAt(i)
				e.trackLocked()
			}
			return m, nil, nil
		}
	}
	if e.closed != nil {
		return nil, nil, e.closed
	}
	if err := e.deadSourceLocked(r); err != nil {
		return nil, nil, err
	}
	return nil, e.changed, nil
}

// failSource records that world rank w failed (or finalized, orderly) and
// fails every posted receive that can no longer be satisfied.
func (e *engine) failSource(w int, err error, orderly bool) {
	e.mu.Lock()
	if _, ok := e.failed[w]; !ok {
		e.failed[w] = failure{err: err, orderly: orderly}
		e.anyFailed = true
	}
	e.failPostedLocked(err, func(r *recvOp) bool {
		return r.srcWorld == w || (r.srcWorld < 0 && !orderly && r.comm != nil && r.comm.hasWorld(w))
	})
}

// failContexts ends with err every posted receive on one of ctxs (Free:
// a receive left pending on a freed communicator would never complete,
// or match a message of a later communicator given the same id).
func (e *engine) failContexts(ctxs []uint32, err error) {
	e.mu.Lock()
	e.anyFreed = true
	e.failPostedLocked(err, func(r *recvOp) bool { return slices.Contains(ctxs, r.ctx) })
}

// failPostedLocked removes the posted receives dead says can no longer
// complete, unlocks e and ends them with err (outside the lock: completion
// wakes their waiters).
func (e *engine) failPostedLocked(err error, dead func(*recvOp) bool) {
	var gone []*recvOp
	all := e.posted.items()
	kept := all[:0]
	for _, r := range all {
		if dead(r) {
			gone = append(gone, r)
		} else {
			kept = append(kept, r)
		}
	}
	clear(all[len(kept):])
	e.posted.buf = e.posted.buf[:e.posted.head+len(kept)]
	if len(kept) == 0 {
		e.posted.buf, e.posted.head = e.posted.buf[:0], 0
	}
	e.trackLocked()
	e.notifyLocked()
	e.mu.Unlock()
	for _, r := range gone {
		r.req.complete(Status{}, err)
	}
}

// failAll ends every posted receive with err; later posts fail too.
func (e *engine) failAll(err error) {
	e.mu.Lock()
	if e.closed == nil {
		e.closed = err
	}
	dead := e.posted.take()
	e.trackLocked()
	e.notifyLocked()
	e.mu.Unlock()
	for _, r := range dead {
		r.req.complete(Status{}, err)
	}
}
