package mpi

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// Freeing communicators and reusing their context ids.
//
// A context id (a communicator's message space) is in use on a process
// from the Split that made it until Free. Split agrees on a new id that
// is unused on every member: each member offers its next never-used id
// and the lowest ids it freed, and the lowest id that every member has
// either freed or never used wins (else the largest next-free id, as
// before any Free). Every member applies the same choice, so the offers
// stay consistent.

// ErrFreed: the communicator was freed (Comm.Free).
var ErrFreed = errors.New("mpi: communicator freed")

// ctxOffers is how many freed ids a rank offers to a Split.
const ctxOffers = 4

// splitEntry is one rank's contribution to Split: color, key, a check
// word (Create's group hash), next never-used id and ctxOffers freed ids
// (0: none), as 8-byte words.
const (
	splitOffers = 24
	splitEntry  = splitOffers + 8 + 8*ctxOffers
)

// putCtxOffer writes this process's next never-used id and lowest freed
// ids into b.
func (p *proc) putCtxOffer(b []byte) {
	p.ctxMu.Lock()
	defer p.ctxMu.Unlock()
	binary.LittleEndian.PutUint64(b, uint64(p.nextCtx))
	for i := 0; i < ctxOffers; i++ {
		var id uint32
		if i < len(p.freeCtx) {
			id = p.freeCtx[i]
		}
		binary.LittleEndian.PutUint64(b[8+8*i:], uint64(id))
	}
}

// pickCtx picks the id every member can use from their offers.
func pickCtx(offers [][]byte) uint32 {
	free := func(o []byte, id uint32) bool {
		if id >= uint32(binary.LittleEndian.Uint64(o)) {
			return true // never used there
		}
		for i := 0; i < ctxOffers; i++ {
			if uint32(binary.LittleEndian.Uint64(o[8+8*i:])) == id {
				return true
			}
		}
		return false
	}
	var best uint32
	for _, o := range offers {
		best = max(best, uint32(binary.LittleEndian.Uint64(o)))
	}
	for _, o := range offers {
		for i := 0; i < ctxOffers; i++ {
			id := uint32(binary.LittleEndian.Uint64(o[8+8*i:]))
			if id == 0 || id >= best {
				continue
			}
			ok := true
			for _, q := range offers {
				ok = ok && free(q, id)
			}
			if ok {
				best = id
			}
		}
	}
	return best
}

// claimCtx marks id used on this process if it still is free here. It is
// not when another Split on this process (another goroutine's, on another
// communicator) claimed it since this one's offer: then false.
func (p *proc) claimCtx(id uint32) bool {
	p.ctxMu.Lock()
	defer p.ctxMu.Unlock()
	if id >= p.nextCtx {
		p.nextCtx = id + 1
		return true
	}
	if i, ok := slices.BinarySearch(p.freeCtx, id); ok {
		p.freeCtx = slices.Delete(p.freeCtx, i, i+1)
		return true
	}
	return false
}

// agreeCtx claims id on every member of c: it says whether every member
// could (see claimCtx). Offers are made without holding anything, so that
// Splits on different communicators can run at once on different
// goroutines (MPI_THREAD_MULTIPLE) without waiting for each other; two of
// them can then pick the same id on a process they share, which this
// round finds. When it does, the members that claimed the id give it back
// and the Split offers again.
func (c *Comm) agreeCtx(id uint32, tag int) (bool, error) {
	mine := []byte{0}
	if c.p.claimCtx(id) {
		mine[0] = 1
	}
	all, err := c.allgatherBytes(mine, tag)
	if err != nil {
		return false, err // the id stays claimed: unused, never reused
	}
	if !slices.Contains(all, 0) {
		return true, nil
	}
	if mine[0] == 1 {
		c.p.releaseCtx(id)
	}
	return false, nil
}

// ctxRetryWait is a Split's pause before it offers again after a
// collision with another Split (agreeCtx), random so that two colliding
// Splits do not collide again in step.
func ctxRetryWait(attempt int) {
	time.Sleep(time.Duration(rand.Int64N(int64(min(attempt, 10))*100+1)) * time.Microsecond)
}

// errUsable is why c cannot be used (the process shut down, or c was
// freed), or nil.
func (c *Comm) errUsable() error {
	if err := c.p.errClosed(); err != nil {
		return err
	}
	if c.freed != nil && c.freed.Load() {
		return fmt.Errorf("%w (context %d)", ErrFreed, c.ctx>>1)
	}
	return nil
}

// Tags of Free on the collective context.
const tagFree = 41

// freeDrainTimeout bounds waiting for a message that was still arriving
// when Free discards it.
var freeDrainTimeout = 10 * time.Second

// Free releases c (MPI_Comm_free): every later operation on c, its views
// (WithContext) and its host sub-communicators returns ErrFreed, messages
// sent on c that were never received are discarded, and c's context id
// becomes available to later Splits. It is collective over c: every
// member calls it once, after completing its operations on c, except
// non-blocking collectives: Free waits for those still running, and their
// requests complete normally (as MPI's pending operations do), unless one
// failed on some member before Free: then it ends them with ErrFreed. The world
// communicator cannot be freed. A receive still pending on c (against
// that rule) ends with ErrFreed rather than never.
//
// Before releasing the id, every member tells every other that it is done
// with c, after its last message on c (messages between two ranks arrive
// in order), so when Free returns no message sent on c can still arrive.
// If that exchange fails (a member died) c is freed but its id is not
// reused.
func (c *Comm) Free() error {
	if c.freed == nil {
		return fmt.Errorf("%w: the world communicator cannot be freed", ErrArg)
	}
	if err := c.errUsable(); err != nil {
		return err
	}
	if c.inter != nil {
		return c.interFree()
	}
	err := c.freeExchange()
	c.freed.Store(true)
	c.p.eng.failContexts(c.contexts(), ErrFreed)
	if err != nil {
		return fmt.Errorf("mpi: free: %w", err)
	}
	c.node = nil
	c.coll = collState{}
	c.p.releaseCtx(c.ctx >> 1)
	return nil
}

// contexts are the message contexts of c and its host sub-communicators.
func (c *Comm) contexts() []uint32 {
	ids := []uint32{c.ctx, c.collCtx()}
	if ns := c.node; ns != nil {
		for _, s := range []*Comm{ns.node, ns.leader, ns.lane} {
			if s != nil {
				ids = append(ids, s.ctx, s.collCtx())
			}
		}
	}
	return ids
}

// nbFailed is this member's flag in Free's exchange: 1 if a non-blocking
// collective on c failed here.
func (c *Comm) nbFailed() byte {
	if c.iseq == nil {
		return 0
	}
	// From here on, one that fails tells the others (start): they may
	// be past the exchange, waiting for their copies in Free.
	c.iseq.freeing.Store(true)
	if c.iseq.failed.Load() {
		return 1
	}
	return 0
}

// flagExchange sends mine to every other member of c (every remote member
// on an intercommunicator) and receives theirs; it says whether any
// flag, mine included, is set. Sent after this member's last message of
// its own on c, so that nothing it sent before can arrive after the
// receiver has drained c.
func (c *Comm) flagExchange(mine byte) (bool, error) {
	n, self := len(c.group), c.self()
	got := make([]byte, n)
	reqs := make([]*Request, 0, 2*n)
	for r := 0; r < n; r++ {
		if r != self {
			reqs = append(reqs, c.cirecv(got[r:r+1], 1, r, tagFree))
		}
	}
	for r := 0; r < n; r++ {
		if r != self {
			reqs = append(reqs, c.cisend([]byte{mine}, r, tagFree))
		}
	}
	err := c.waitReqs(reqs...)
	return mine != 0 || slices.Contains(got, 1), err
}

// waitRunning waits for the non-blocking collectives still running on c:
// every member started them before its Free, so they complete, unless
// one failed somewhere (failed, from the exchange): then Free ends them.
func (c *Comm) waitRunning(failed bool) {
	if !failed && c.iseq != nil {
		c.iseq.running.Wait()
	}
}

// freeExchange exchanges the flags with every other member, waits for the
// running non-blocking collectives, then discards whatever else c's
// contexts hold.
func (c *Comm) freeExchange() error {
	failed, err := c.flagExchange(c.nbFailed())
	if err != nil {
		return err
	}
	c.waitRunning(failed)
	subs := []*Comm{c}
	if ns := c.node; ns != nil {
		subs = append(subs, ns.node, ns.leader, ns.lane)
	}
	for _, s := range subs {
		if s == nil {
			continue
		}
		if err := s.drain(s.ctx); err != nil {
			return err
		}
		if err := s.drain(s.collCtx()); err != nil {
			return err
		}
	}
	return nil
}

// drain receives and drops every message queued on context ctx. It only
// takes what is queued (no receive is posted): a member that finished its
// part of Free and then died (no Finalize) must not fail the others, as a
// posted AnySource receive would. A rendezvous it discards is completed
// so the sender's Send returns; if that sender died meanwhile, its message
// is lost anyway, so that is no error either.
func (c *Comm) drain(ctx uint32) error {
	for {
		rr := new(recvReq)
		op, req := &rr.op, &rr.req
		if err := c.initRecvOp(op, ctx, nil, 1, AnySource, AnyTag); err != nil {
			return err
		}
		op.alloc, op.req, req.op = true, req, op
		m, _, _ := c.p.eng.takeUnexpected(op)
		if m == nil {
			return nil
		}
		c.p.matched(op, m)
		wctx, cancel := context.WithTimeout(bg, freeDrainTimeout)
		_, err := req.Wait(wctx)
		cancel()
		var pe *PeerError
		if err != nil && !errors.Is(err, ErrTruncate) && !errors.As(err, &pe) {
			return err
		}
	}
}

// CommTypeShared is SplitType's type for ranks that can share memory
// (MPI_COMM_TYPE_SHARED): the ranks of one host.
const CommTypeShared = 1

// SplitType splits c by a property of the ranks (MPI_Comm_split_type):
// with CommTypeShared, one communicator per host (as SplitShared), ordered
// by key then rank in c; with Undefined, nil (the caller takes part but
// joins no communicator). It is collective over c. Another type on any
// rank is ErrArg naming that rank on every rank.
func (c *Comm) SplitType(typ, key int) (*Comm, error) {
	if err := c.intraOnly("SplitType"); err != nil {
		return nil, err
	}
	// One exchange of every rank's type and node key, so that a bad type
	// fails every rank alike instead of leaving the others waiting.
	const entry = layoutEntry + 8
	mine := make([]byte, entry)
	k := c.p.nodeKey()
	copy(mine, k[:])
	binary.LittleEndian.PutUint64(mine[layoutEntry:], uint64(int64(typ)))
	all, err := c.allgatherBytes(mine, tagNode)
	if err != nil {
		return nil, err
	}
	for r := range c.group {
		if t := int(int64(binary.LittleEndian.Uint64(all[r*entry+layoutEntry:]))); t != CommTypeShared && t != Undefined {
			return nil, fmt.Errorf("%w: SplitType: rank %d passed type %d (want CommTypeShared or Undefined)", ErrArg, r, t)
		}
	}
	color := Undefined
	if typ == CommTypeShared {
		color = hostsOf(all, len(c.group), entry)[c.rank] // the host's lowest rank
	}
	return c.Split(color, key)
}

// releaseCtx returns a freed communicator's context id for reuse.
func (p *proc) releaseCtx(id uint32) {
	p.ctxMu.Lock()
	defer p.ctxMu.Unlock()
	if i, ok := slices.BinarySearch(p.freeCtx, id); !ok {
		p.freeCtx = slices.Insert(p.freeCtx, i, id)
	}
	p.forgetFamilyLocked(id<<1 | 1)
}
