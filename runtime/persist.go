package mpi

import "fmt"

// Persistent requests (MPI_Send_init, MPI_Recv_init, MPI_Start,
// MPI_Startall, MPI_Request_free). A loop that sends or receives the same
// envelope over and over describes it once: the arguments are checked
// once, the request is the Persistent's own (no allocation per start),
// a send's frame header is encoded once, and StartAll starts a whole
// window at once: its receives are posted under one hold of the matching
// engine's lock, and its eager sends to one same-host peer are written
// into the ring under one hold of the ring's send lock and made visible
// to the peer at once (docs/transport.md, "Persistent requests").

// Persistent is a persistent send or receive made by SendInit or
// RecvInit. It is inactive until started; Start (or StartAll) starts its
// operation, whose request is Request(): Wait, Test, WaitAll, WaitAllInto
// and WaitAny wait for it as for any other. Once that request completed,
// the Persistent is inactive again and may be started again; Wait on an
// inactive Persistent's request returns at once (with an empty status
// before the first start, as MPI's does). A Persistent is started by one
// goroutine at a time; any goroutine may wait for its request.
type Persistent struct {
	recv  bool // a receive (RecvInit), else a send
	freed bool
	mark  bool // StartAll's duplicate check
	// posting: StartAll is posting this receive (postAll)
	posting bool
	c       *Comm
	buf     []byte
	elem    int
	peer    int // destination or source (or AnySource, ProcNull)
	tag     int
	world   int // peer's world rank, -1 for AnySource and ProcNull

	hb [headerSize]byte // a send's eager frame header
	// A receive's storage; its envelope is checked (slot.vc and so on
	// are set) once, by RecvInit. A send uses its request only (one
	// Persistent of each kind is then the same size: a window's
	// footprint in the caches counts at millions of messages a second).
	slot RecvSlot

	// StartAll's result of posting a receive under the engine's lock,
	// finished after it is released.
	pm   *message
	perr error
}

// errPersistent is ErrArg for a start of an active or freed Persistent.
func errPersistent(p *Persistent, what string) error {
	kind := "send to"
	if p.recv {
		kind = "receive from"
	}
	return fmt.Errorf("%w: %s persistent %s rank %d, tag %d", ErrArg, what, kind, p.peer, p.tag)
}

// SendInit makes a persistent send of buf to rank dest of c (or ProcNull)
// with tag. The arguments are checked now (an error wrapping ErrTag or
// ErrRank, or the communicator's ErrFreed); buf must not change while the
// send is active. Each Start sends buf's contents at that moment, as Isend
// does.
func SendInit[T Number](c *Comm, buf []T, dest, tag int) (*Persistent, error) {
	if err := checkTag(tag, false); err != nil {
		return nil, err
	}
	p := &Persistent{c: c, buf: asBytes(buf), elem: sizeOf[T](), peer: dest, tag: tag, world: -1}
	if err := p.initPeer(dest, false); err != nil {
		return nil, err
	}
	h := header{Type: frameEager, Ctx: c.ctx, Src: int32(c.rank), Tag: int32(tag), Len: uint64(len(p.buf))}
	h.encode(p.hb[:])
	p.slot.req.setLocal(reqComplete) // inactive
	return p, nil
}

// RecvInit makes a persistent receive into buf from rank src of c (or
// AnySource, or ProcNull) with tag (or AnyTag), checking the arguments now
// as SendInit does. Each Start receives one message, as Irecv does.
func RecvInit[T Number](c *Comm, buf []T, src, tag int) (*Persistent, error) {
	if err := checkTag(tag, true); err != nil {
		return nil, err
	}
	p := &Persistent{recv: true, c: c, buf: asBytes(buf), elem: sizeOf[T](), peer: src, tag: tag, world: -1}
	if err := p.initPeer(src, true); err != nil {
		return nil, err
	}
	s := &p.slot
	// The slot's checks are the ones just made: IrecvInto-style re-posts
	// skip them (a freed comm and a dead peer are still found).
	s.vc, s.vsrc, s.vtag, s.velem, s.vworld = c, src, tag, p.elem, p.world
	s.started = true
	s.req.setLocal(reqComplete) // inactive
	return p, nil
}

// initPeer checks the peer rank and finds its world rank; a receive's
// source is watched from now on (see proc.watch).
func (p *Persistent) initPeer(r int, recv bool) error {
	c := p.c
	if err := c.errUsable(); err != nil {
		return err
	}
	switch {
	case r == ProcNull, recv && r == AnySource:
		return nil
	case r < 0 || r >= len(c.group):
		what := "destination"
		if recv {
			what = "source"
		}
		return fmt.Errorf("%w: %s %d (communicator of %d)", ErrRank, what, r, len(c.group))
	}
	p.world = c.group[r]
	if recv {
		c.p.watch(p.world)
	}
	return nil
}

// Request is the request of p's operation: the same one for every start.
func (p *Persistent) Request() *Request { return &p.slot.req }

// Active reports whether p was started and its request has not completed.
func (p *Persistent) Active() bool { return !p.Request().isDone() }

// Free makes p unusable: a later Start fails with an error wrapping
// ErrArg. An active operation still completes (its request can be waited
// for), as with MPI_Request_free; a receive's buffer may be written until
// then.
func (p *Persistent) Free() { p.freed = true }

// Start starts p's operation. Starting a freed Persistent, or one whose
// request has not completed yet, starts nothing and returns an error
// wrapping ErrArg. Every other error (a failed peer, a freed
// communicator, the process shut down) is the request's, as Isend's and
// Irecv's are.
func (p *Persistent) Start() error {
	if err := p.reset(); err != nil {
		return err
	}
	if p.recv {
		p.startRecv()
	} else {
		p.startSend()
	}
	return nil
}

// reset makes p's request pending for a new start.
func (p *Persistent) reset() error {
	if p.freed {
		return errPersistent(p, "start of a freed")
	}
	if p.recv {
		if !p.slot.reset() {
			return errPersistent(p, "start of an active")
		}
		return nil
	}
	r := &p.slot.req
	if !r.isDone() {
		return errPersistent(p, "start of an active")
	}
	r.rearm()
	return nil
}

func (p *Persistent) startRecv() {
	s, c := &p.slot, p.c
	r := &s.req
	if p.peer == ProcNull {
		r.complete(procNullStatus, nil)
		return
	}
	if c.irecvNowInto(s, c.ctx, p.buf, p.elem, p.peer, p.tag) {
		return // the message was there already (irecvnow.go)
	}
	c.repostOp(r, s.cur, p.buf, p.elem, p.peer, p.tag, p.world)
}

func (p *Persistent) startSend() {
	if l := p.shmEager(); l != nil {
		// isendShm's eager path with the header encoded once.
		err := l.ch.Send(l.lctx, p.hb[:], p.buf)
		if err != nil {
			err = l.failure(err)
		}
		p.slot.req.completeOwned(Status{}, err)
		return
	}
	c := p.c
	c.isendInto(&p.slot.req, c.ctx, p.buf, p.peer, p.tag, false)
}

// StartAll starts every Persistent in ps. When any of them is nil, freed,
// active or listed twice, it starts none and returns an error wrapping
// ErrArg. The receives are posted in the order of ps (so that of two
// matching the same message, the earlier in ps gets it) before the sends
// start; sends to one peer leave in the order of ps.
func StartAll(ps ...*Persistent) error {
	if err := checkStartAll(ps); err != nil {
		return err
	}
	for _, p := range ps {
		if err := p.reset(); err != nil {
			return err // only a concurrent Start of p can do this
		}
	}
	startRecvs(ps)
	startSends(ps)
	return nil
}

// checkStartAll is StartAll's check before it starts anything.
func checkStartAll(ps []*Persistent) error {
	n := 0 // ps[:n] are marked
	defer func() {
		for _, p := range ps[:n] {
			p.mark = false
		}
	}()
	for i, p := range ps {
		switch {
		case p == nil:
			return fmt.Errorf("%w: StartAll: request %d is nil", ErrArg, i)
		case p.mark:
			return fmt.Errorf("%w: StartAll: request %d is listed twice", ErrArg, i)
		case p.freed:
			return errPersistent(p, fmt.Sprintf("StartAll (request %d): start of a freed", i))
		case !p.Request().isDone():
			return errPersistent(p, fmt.Sprintf("StartAll (request %d): start of an active", i))
		}
		p.mark = true
		n = i + 1
	}
	return nil
}

// startRecvs posts ps's receives. Runs of receives of one process go
// under one hold of its engine's lock, each matched against the
// unexpected messages first and queued otherwise, exactly as post does
// one at a time; what matched is finished after the lock is released.
func startRecvs(ps []*Persistent) {
	for i := 0; i < len(ps); {
		p := ps[i]
		if !p.recv {
			i++
			continue
		}
		e := p.c.p.eng
		j := i + 1
		for j < len(ps) && (!ps[j].recv || ps[j].c.p.eng == e) {
			j++
		}
		postAll(e, ps[i:j])
		i = j
	}
}

// postAll posts the receives among ps, all of engine e.
func postAll(e *engine, ps []*Persistent) {
	posting := 0
	var ok *Comm // the last communicator errUsable passed
	for _, p := range ps {
		if !p.recv {
			continue
		}
		s, c := &p.slot, p.c
		r := &s.req
		if p.peer == ProcNull {
			r.complete(procNullStatus, nil)
			continue
		}
		if c != ok {
			if err := c.errUsable(); err != nil {
				r.complete(Status{}, err)
				continue
			}
			ok = c
		}
		op := s.cur
		op.ctx, op.src, op.tag, op.srcWorld, op.elem = c.ctx, p.peer, p.tag, p.world, p.elem
		if op.comm != c {
			op.comm = c
		}
		op.buf = p.buf
		if op.req != r {
			op.req = r
		}
		r.op = op
		p.posting = true
		posting++
	}
	if posting == 0 {
		return
	}
	e.mu.Lock()
	for _, p := range ps {
		if !p.posting {
			continue
		}
		op := p.slot.cur
		if e.unexpected.len() > 0 {
			for k, m := range e.unexpected.items() {
				if op.matches(m.ctx, m.src, m.tag) {
					e.unexpected.removeAt(k)
					p.pm = m
					break
				}
			}
			if p.pm != nil {
				continue
			}
		}
		err := e.closed
		if err == nil {
			err = e.deadSourceLocked(op)
		}
		if err == nil && e.anyFreed {
			err = freedErr(op)
		}
		if err != nil {
			p.perr = err
			continue
		}
		e.posted.push(op)
	}
	e.trackLocked()
	e.mu.Unlock()
	// pm and perr are nil again after this (stored only when set).
	for _, p := range ps {
		if !p.posting {
			continue
		}
		p.posting = false
		switch {
		case p.pm != nil:
			m := p.pm
			p.pm = nil
			p.c.p.matched(p.slot.cur, m)
		case p.perr != nil:
			err := p.perr
			p.perr = nil
			p.slot.req.complete(Status{}, err)
		}
	}
}

// startSends starts ps's sends in order. Runs of eager sends to one
// same-host peer are written into its ring at once (shm.Chan.SendMany);
// every other send starts as Isend does.
func startSends(ps []*Persistent) {
	for i := 0; i < len(ps); {
		p := ps[i]
		if p.recv {
			i++
			continue
		}
		l := p.shmEager()
		if l == nil {
			p.startSend()
			i++
			continue
		}
		// The run: what shmEager would say of each, from what differs.
		limit, n, j := l.eagerLimit(), 1, i+1
		for ; j < len(ps); j++ {
			q := ps[j]
			if q.recv {
				continue
			}
			if q.world != p.world || q.c.p != p.c.p || len(q.buf) > limit || (q.c != p.c && q.c.errUsable() != nil) {
				break
			}
			n++
		}
		sendAll(l, ps[i:j], n)
		i = j
	}
}

// shmEager returns the shared-memory link a send goes out on as one eager
// frame, or nil when it does not (another transport, a rendezvous,
// ProcNull, itself, a freed comm: those take the plain path).
func (p *Persistent) shmEager() *shmLink {
	c := p.c
	if p.world < 0 || p.world == c.p.rank {
		return nil
	}
	pe := c.p.peers[p.world]
	l := pe.shmL.Load()
	if l == nil || pe.dead.Load() || len(p.buf) > l.eagerLimit() || c.errUsable() != nil {
		return nil
	}
	return l
}

// sendAll writes the n sends among ps, eager frames for l, in order.
func sendAll(l *shmLink, ps []*Persistent, n int) {
	if n == 1 {
		for _, p := range ps {
			if !p.recv {
				p.startSend()
			}
		}
		return
	}
	// The frames are the sends of ps in order, skipping its receives.
	k, at := 0, 0
	next := func(int) (hdr, payload []byte) {
		for ps[at].recv {
			at++
		}
		p := ps[at]
		at++
		return p.hb[:], p.buf
	}
	sent, err := l.ch.SendMany(l.lctx, n, next)
	for _, p := range ps {
		if p.recv {
			continue
		}
		switch {
		case k < sent:
			p.slot.req.completeOwned(Status{}, nil)
		case k == sent && err != nil:
			p.slot.req.completeOwned(Status{}, l.failure(err))
		default:
			p.startSend() // after a failure: as Isend would
		}
		k++
	}
}
