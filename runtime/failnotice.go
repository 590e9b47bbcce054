package mpi

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Member-failure notices: how a collective's failure reaches every member.
//
// A dead member fails only the members that exchange messages with it
// (their receives from it, their sends to it). Those then leave the
// collective, and the members waiting for them would wait forever. So a
// member whose collective ends with a *PeerError tells every other member
// of the communicator, with one small message on a context no
// communicator uses (ctxNotice), that the communicator's collectives
// failed because of that rank. Receiving the notice (or failing itself)
// marks the communicator's collective family failed for good: after a
// grace period (famGrace, for a collective that can still complete) its
// collective receives and rendezvous sends still pending end with the
// dead rank's *PeerError, and later ones fail at once. A family is a
// communicator's collective context together with those of its host
// sub-communicators (coll_node.go), which are the parent's with a high bit
// set. Point-to-point traffic on the communicator is not touched: it
// involves only the two ranks that exchange it.
//
// Notices are sent only by members that failed, so a collective that a
// member completed before dying still completes for the others (they
// receive what it sent) unless some member could not complete it.
// Normal operation pays nothing: posts look at the family set only once
// some peer or family failed (engine.anyFailed), a rendezvous send and the
// direct receive path's wait test the context's parity (and load one
// atomic pointer on collective contexts), and a notice is recognised only
// after a message found no posted receive.

// ctxNotice is the context of notices: a communicator's context (its id
// shifted once) stays below 2^29 and a derived one sets one high bit, so
// none has two of them set.
const ctxNotice = ctxNodeBit | ctxLeaderBit | 1

// ErrMemberFailed is wrapped in the *PeerError that a collective returns
// when another member reported that the collective failed because of the
// rank the error names (this member did not exchange messages with it).
var ErrMemberFailed = errors.New("a member of the communicator failed")

// noticeWait bounds sending one notice beyond making the connection.
var noticeWait = 10 * time.Second

// family is the collective family of context ctx (ctx must be odd: a
// collective context).
func family(ctx uint32) uint32 { return ctx &^ (ctxNodeBit | ctxLeaderBit | ctxLaneBit) }

// famGrace is how long a family's failure spares what is pending or
// posted on it: a notice names the communicator, not one of its
// collectives, and a member still finishing an earlier collective whose
// data is on its way (a member that died after completing it) must still
// complete it. A member waiting for one that left waits this long more.
// Atomic: tests shorten it while goroutines of earlier tests' processes
// may still read it.
var famGrace atomic.Int64

func init() { famGrace.Store(int64(time.Second)) }

// famSet is the set of failed families: a map replaced as a whole (under
// engine.mu), so reads take no lock.
type famSet struct {
	m atomic.Pointer[map[uint32]*famFail]
}

// famFail is one family's failure: its error, in force from at on.
type famFail struct {
	err error
	at  time.Time
}

// err is the failure of ctx's family once in force, or nil (also for
// point-to-point contexts, which are even).
func (fs *famSet) err(ctx uint32) error {
	if ctx&1 == 0 {
		return nil
	}
	m := fs.m.Load()
	if m == nil {
		return nil
	}
	if f := (*m)[family(ctx)]; f != nil && !time.Now().Before(f.at) {
		return f.err
	}
	return nil
}

// cause is the failure of ctx's family, in force or not yet.
func (fs *famSet) cause(ctx uint32) error {
	if m := fs.m.Load(); m != nil && ctx&1 == 1 {
		if f := (*m)[family(ctx)]; f != nil {
			return f.err
		}
	}
	return nil
}

// failScope says whom to tell when a collective on a communicator fails:
// each target's world ranks, and the families by which they know it.
type failScope struct{ targets []noticeTarget }

type noticeTarget struct {
	world []int
	fams  []uint32
}

// scope is c's failScope: its own, set for sub-communicators (their
// parent's) and intercommunicators, else c's group and family.
func (c *Comm) scope() *failScope {
	if c.fscope != nil {
		return c.fscope
	}
	return &failScope{targets: []noticeTarget{{world: c.group, fams: []uint32{family(c.collCtx())}}}}
}

// collErr returns err, after telling the other members when it is a
// peer's failure (the collective on c is over for this member). Once c's
// family failed, a peer's failure is reported as the family's: a member
// that left the collective (and then finalized or exited) fails this
// one's exchanges with it, but the cause is the rank the family names.
func (c *Comm) collErr(err error) error {
	if err == nil {
		return nil
	}
	var pe *PeerError
	if errors.As(err, &pe) {
		c.p.memberFailed(c.scope(), pe, pe.Rank)
		if ferr := c.p.eng.fams.cause(c.collCtx()); ferr != nil {
			return ferr
		}
	}
	// A context that ended (WithContext) sends no notice: the others'
	// collectives wait for this member as before (docs/collectives.md).
	return err
}

// memberFailed records the failure of this process's families in s and,
// the first time, sends the notices (and waits for them, a bounded time:
// a caller that exits next must not lose them). A member that learned of
// the failure from a notice passes it on too, but only over the links it
// has: a member waiting for it in the collective is connected to it
// (or will be refused when it dials), and must learn the cause before
// this member's Finalize or exit, which would fail its receive naming
// this member instead of the dead rank. Only the first member to fail
// makes new connections (to every member).
//
// err is this member's error, cause the rank the notices name: the dead
// one, or this one when it left on its own (leftInFree).
func (p *proc) memberFailed(s *failScope, err error, cause int) {
	var mine []uint32
	for _, t := range s.targets {
		if slices.Contains(t.world, p.rank) {
			mine = append(mine, t.fams...)
		}
	}
	if len(mine) == 0 {
		return
	}
	first := p.failFamilies(mine, err)
	if !p.tell(mine) {
		return // this process already sent notices for them
	}
	var pe *PeerError
	if !first && errors.As(p.eng.fams.cause(mine[0]), &pe) {
		// Name the rank the notice named, not whoever failed this
		// member's receive since.
		cause = pe.Rank
	}
	var wg sync.WaitGroup
	for _, t := range s.targets {
		b := make([]byte, 4*len(t.fams))
		for i, f := range t.fams {
			binary.LittleEndian.PutUint32(b[4*i:], f)
		}
		for _, w := range t.world {
			if w == p.rank || w == cause || (!first && p.peers[w].current() == nil) {
				continue
			}
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(p.ctx, p.cfg.ConnectTimeout+noticeWait)
				defer cancel()
				r := p.world.isendWait(ctxNotice, b, w, cause, true)
				r.Wait(ctx) // a member that cannot be told is failed or gone
			}(w)
		}
	}
	wg.Wait()
}

// onNotice handles a notice: its tag is the dead rank, its payload the
// families this process knows the communicator by.
func (p *proc) onNotice(m *message) {
	if len(m.data)%4 != 0 || m.tag < 0 || m.tag >= p.size {
		return
	}
	var fams []uint32
	// Under ctxMu, so a Free releasing an id (and forgetting its family)
	// cannot interleave: a late notice about a freed communicator must
	// not fail a later one given the same id.
	p.ctxMu.Lock()
	defer p.ctxMu.Unlock()
	for i := 0; i < len(m.data); i += 4 {
		f := binary.LittleEndian.Uint32(m.data[i:])
		// Not a freed id; one not taken yet is a communicator this
		// member is still creating (notices go to members only).
		if _, freed := slices.BinarySearch(p.freeCtx, f>>1); !freed {
			fams = append(fams, f)
		}
	}
	why := fmt.Errorf("%w (reported by rank %d)", ErrMemberFailed, m.srcWorld)
	if m.tag == m.srcWorld {
		why = fmt.Errorf("%w: rank %d left a non-blocking collective that Free waited for", ErrMemberFailed, m.tag)
	}
	p.failFamilies(fams, &PeerError{Rank: m.tag, Err: why})
}

// forgetFamily drops family f's failure when its id is released (Free), so
// a later communicator given the id starts clean. Caller holds ctxMu.
func (p *proc) forgetFamilyLocked(f uint32) {
	delete(p.told, f)
	e := p.eng
	e.mu.Lock()
	defer e.mu.Unlock()
	if old := e.fams.m.Load(); old != nil {
		if _, ok := (*old)[f]; ok {
			nm := maps.Clone(*old)
			delete(nm, f)
			e.fams.m.Store(&nm)
		}
	}
}

// failFamilies marks fams failed with err and, after famGrace, ends what
// is pending on them then: posted collective receives (but Free's
// exchange, which works among the live members whatever their
// collectives did), then rendezvous sends. Later posts and sends fail
// from then on. It says whether any family was new.
func (p *proc) failFamilies(fams []uint32, err error) bool {
	e := p.eng
	e.mu.Lock()
	nm := map[uint32]*famFail{}
	if old := e.fams.m.Load(); old != nil {
		maps.Copy(nm, *old)
	}
	grace := time.Duration(famGrace.Load())
	rec := &famFail{err: err, at: time.Now().Add(grace)}
	var fresh []uint32
	for _, f := range fams {
		if _, ok := nm[f]; !ok {
			nm[f] = rec
			fresh = append(fresh, f)
		}
	}
	if len(fresh) == 0 {
		e.mu.Unlock()
		return false
	}
	e.fams.m.Store(&nm)
	e.anyFailed = true
	e.mu.Unlock()
	time.AfterFunc(grace, func() { p.sweepFamilies(fresh, rec) })
	return true
}

// sweepFamilies ends what is still pending on fams once their failure rec
// is in force, unless Free forgot it meanwhile (the id may be reused).
func (p *proc) sweepFamilies(fams []uint32, rec *famFail) {
	e := p.eng
	e.mu.Lock()
	var live []uint32
	if m := e.fams.m.Load(); m != nil {
		for _, f := range fams {
			if (*m)[f] == rec {
				live = append(live, f)
			}
		}
	}
	if len(live) == 0 {
		e.mu.Unlock()
		return
	}
	err := rec.err
	e.failPostedLocked(err, func(r *recvOp) bool {
		return r.ctx&1 == 1 && r.tag != tagFree && slices.Contains(live, family(r.ctx))
	})
	// The sends stay recorded: a receiver that matched one before it
	// learned of the failure still asks for the data (CTS, PUT) or says
	// it copied it (FIN), and an unknown id would drop a live link. Their
	// requests complete now (once: complete ignores later calls), and
	// collective sends are never persistent, so no later use is hit.
	for _, pe := range p.peers {
		if pe == nil {
			continue
		}
		var gone []*sendOp
		pe.mu.Lock()
		for _, s := range pe.sends {
			if s.ctx&1 == 1 && slices.Contains(live, family(s.ctx)) {
				gone = append(gone, s)
			}
		}
		pe.mu.Unlock()
		for _, s := range gone {
			s.req.complete(Status{}, err)
		}
	}
}

// setInterScope makes the intercommunicator ic and its local duplicate
// tell both groups: the remote one knows ic by ic's family, the local one
// by that and the duplicate's (whose id only the local group agreed on).
func (ic *Comm) setInterScope() {
	lc := ic.inter.local
	s := &failScope{targets: []noticeTarget{
		{world: ic.group, fams: []uint32{family(ic.collCtx())}},
		{world: lc.group, fams: []uint32{family(ic.collCtx()), family(lc.collCtx())}},
	}}
	ic.fscope, lc.fscope = s, s
}

// tell marks fams as told by this process; it says whether one was new.
// (Under ctxMu, as forgetFamilyLocked.)
func (p *proc) tell(fams []uint32) bool {
	p.ctxMu.Lock()
	defer p.ctxMu.Unlock()
	if p.told == nil {
		p.told = map[uint32]bool{}
	}
	fresh := false
	for _, f := range fams {
		if !p.told[f] {
			p.told[f], fresh = true, true
		}
	}
	return fresh
}

// leftInFree handles a non-blocking collective that failed after this
// member entered Free (its flag may have said none failed): the others
// may be past the exchange, waiting for their copies, which wait for this
// member. A peer's failure has told them already (collErr); any other
// error (a context that ended, an argument error) tells them now, naming
// this member. Errors of Free's own ending and of shutdown tell no one.
func (c *Comm) leftInFree(err error) {
	var pe *PeerError
	if errors.As(err, &pe) || errors.Is(err, ErrFreed) || c.p.errClosed() != nil {
		return
	}
	c.p.memberFailed(c.scope(), err, c.p.rank)
}
