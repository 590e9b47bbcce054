package mpi

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
)

// Intercommunicators (MPI_Intercomm_create, MPI_Intercomm_merge).
//
// An intercommunicator is a *Comm with inter set. Its group is the REMOTE
// group and its rank is this process's rank in the LOCAL group, so the
// point-to-point code, which maps a destination or source through c.group
// to a world rank and stamps c.rank on what it sends, addresses the
// remote group unchanged: a receiver in the other group sees the sender's
// local rank, which is the sender's rank in that receiver's remote group.
// AnySource matches the remote group only, and fails when a remote member
// dies (hasWorld looks at the remote group).
//
// Both groups use one context id, agreed like Split's (comm_free.go) but
// over the offers of every member of both groups: each group gathers its
// members' offers, the two leaders swap them (over the peer communicator
// at creation, as MPI does, or over the intercommunicator for Merge), and
// each leader broadcasts the other group's to its members; every member
// then takes the same id from the same offers. Collectives run within
// each group on a private duplicate of the local communicator
// (inter.local) and between the groups' rank 0s on the
// intercommunicator's collective context (intercomm_coll.go).

// ErrIntercomm: the operation is not provided on an intercommunicator,
// or needs one and got an intracommunicator.
var ErrIntercomm = errors.New("mpi: not supported on an intercommunicator")

// interState is an intercommunicator's local side.
type interState struct {
	local *Comm // private duplicate of the local group
}

// Tags on the collective contexts: of the local duplicate at creation,
// of the intercommunicator and its local duplicate for Merge.
const (
	tagInterCreate = 42
	tagMerge       = 43
)

// IsInter says whether c is an intercommunicator.
func (c *Comm) IsInter() bool { return c.inter != nil }

// RemoteSize is the size of an intercommunicator's remote group (0 on an
// intracommunicator).
func (c *Comm) RemoteSize() int {
	if c.inter == nil {
		return 0
	}
	return len(c.group)
}

// RemoteGroup is an intercommunicator's remote group (empty on an
// intracommunicator).
func (c *Comm) RemoteGroup() Group {
	if c.inter == nil {
		return Group{}
	}
	return Group{slices.Clone(c.group)}
}

// intraOnly is the error of an operation that needs an intracommunicator,
// or ErrFreed (a collective of one rank sends nothing that would find it).
func (c *Comm) intraOnly(op string) error {
	if err := c.errUsable(); err != nil {
		return err
	}
	if c.inter != nil {
		return fmt.Errorf("%w: %s (provided: point-to-point, Barrier, Bcast, Reduce, Allreduce, Gather(v), Scatter(v), Allgather(v), Alltoall(v), ReduceScatter(Block), their non-blocking forms, the ...Value collectives, Split, Dup, Create, Merge, Free)", ErrIntercomm, op)
	}
	return nil
}

// InterCommCreate builds an intercommunicator between c's group (the
// local group) and a disjoint remote group (MPI_Intercomm_create). It is
// collective over both groups: every member of c passes the same
// localLeader (a rank of c); the local leader also passes peer, a
// communicator holding both leaders, and remoteLeader, the remote
// leader's rank in peer (peer and remoteLeader are ignored elsewhere).
// The leaders exchange the groups over peer with tag, on peer's
// point-to-point context (as in MPI, have no other message with that tag
// in flight between them). A bad leader or overlapping groups are an
// error (ErrRank, ErrArg) on every member of the group that detects it;
// the other group may then wait for ever (bound it with c.WithContext).
//
// On the result, Rank, Size and Group are the local group's,
// point-to-point ranks (and WorldRank) name the remote group, and
// RemoteSize and RemoteGroup describe it.
func (c *Comm) InterCommCreate(localLeader int, peer *Comm, remoteLeader, tag int) (*Comm, error) {
	if err := c.intraOnly("InterCommCreate's local communicator"); err != nil {
		return nil, err
	}
	if err := c.errUsable(); err != nil {
		return nil, err
	}
	if localLeader < 0 || localLeader >= len(c.group) {
		return nil, fmt.Errorf("%w: local leader %d (local communicator of %d)", ErrRank, localLeader, len(c.group))
	}
	if err := checkTag(tag, false); err != nil {
		return nil, err
	}
	lc, err := c.Split(0, c.rank) // same ranks as c
	if err != nil {
		return nil, err
	}
	var sw swapper
	if c.rank == localLeader {
		sw.pre = func([][]byte) (bool, error) {
			err := checkPeer(c, peer, remoteLeader)
			return err == nil, err
		}
		sw.swap = func(msg []byte) ([]byte, error) {
			pv := peer
			if c.cctx != nil { // bounded by c's context
				pv = peer.derive(peer.tagOff, c.cctx)
			}
			rr := pv.irecv(pv.ctx, nil, 1, remoteLeader, tag, true)
			sr := pv.isend(pv.ctx, msg, remoteLeader, tag)
			err := pv.waitReqs(rr, sr)
			return rr.data, err
		}
		sw.post = func(remote [][]byte) error {
			for i, e := range remote {
				if w := entryWorld(e); c.hasWorld(w) {
					return fmt.Errorf("%w: the groups overlap: world rank %d is remote rank %d and local rank %d", ErrArg, w, i, slices.Index(c.group, w))
				}
			}
			return nil
		}
	}
	xc := lc.derive(0, c.cctx)
	local, remote, err := sw.run(xc, localLeader, 0, 0, 0, tagInterCreate)
	if err != nil {
		return nil, errors.Join(err, freeQuiet(lc, err))
	}
	id, err := c.p.interCtx(sw, xc, localLeader, local, remote, tagInterCreate)
	if err != nil {
		return nil, errors.Join(err, freeQuiet(lc, err))
	}
	ic := &Comm{p: c.p, ctx: id << 1, rank: c.rank, group: make([]int, len(remote)), index: map[int]int{},
		freed: new(atomic.Bool), inter: &interState{local: lc}}
	for i, e := range remote {
		w := entryWorld(e)
		ic.group[i] = w
		ic.index[w] = i
	}
	ic.setInterScope()
	return ic, nil
}

// Merge returns the intracommunicator of both groups of the
// intercommunicator c (MPI_Intercomm_merge): the group whose members
// passed high=false first, each group in its own rank order; when both
// groups pass the same value, the group whose rank 0 has the lower world
// rank comes first. Every member of a group must pass the same high (an
// error wrapping ErrArg on both groups otherwise). It is collective over
// both groups; the new communicator's context id is agreed by all of
// them, as Split's.
func (c *Comm) Merge(high bool) (*Comm, error) {
	if c.inter == nil {
		return nil, fmt.Errorf("%w: Merge of an intracommunicator", ErrIntercomm)
	}
	if err := c.errUsable(); err != nil {
		return nil, err
	}
	lc := c.inter.local
	sw := swapper{
		pre: func(local [][]byte) (bool, error) {
			for r, e := range local {
				if entryFlag(e) != high {
					return true, fmt.Errorf("%w: Merge: local rank %d passed high=%v, local rank %d high=%v",
						ErrArg, r, entryFlag(e), lc.rank, high)
				}
			}
			return true, nil
		},
		swap: func(msg []byte) ([]byte, error) {
			rr := c.irecv(c.collCtx(), nil, 1, 0, tagMerge+c.tagOff, true)
			sr := c.cisend(msg, 0, tagMerge)
			err := c.waitReqs(rr, sr)
			return rr.data, err
		},
	}
	if lc.rank != 0 {
		sw = swapper{}
	}
	var word int64
	if high {
		word = 1
	}
	local, remote, err := sw.run(lc, 0, word, 0, 0, tagMerge)
	if err != nil {
		return nil, err
	}
	if len(remote) != len(c.group) || len(local) != len(lc.group) {
		return nil, fmt.Errorf("%w: Merge: the groups' sizes disagree with the intercommunicator", ErrArg)
	}
	id, err := c.p.interCtx(sw, lc, 0, local, remote, tagMerge)
	if err != nil {
		return nil, err
	}
	rhigh := entryFlag(remote[0])
	first := (!high && rhigh) || (high == rhigh && lc.group[0] < c.group[0])
	lo, hi := lc.group, c.group
	rank := c.rank
	if !first {
		lo, hi = hi, lo
		rank += len(lo)
	}
	nc := &Comm{p: c.p, ctx: id << 1, rank: rank, group: slices.Concat(lo, hi), index: map[int]int{}, freed: new(atomic.Bool)}
	for i, w := range nc.group {
		nc.index[w] = i
	}
	return nc, nil
}

// interFree is Free of an intercommunicator: every local member tells
// every remote one that it is done (after its last message), waits for
// its running non-blocking collectives (see freeExchange), drains the
// contexts, frees the local duplicate and releases the id.
func (c *Comm) interFree() error {
	// The flags go to the remote group and, for the collectives' steps
	// within a group, to the local one.
	mine := c.nbFailed()
	failed, err := c.flagExchange(mine)
	if err == nil {
		var lf bool
		lf, err = c.inter.local.flagExchange(mine)
		failed = failed || lf
	}
	if err == nil {
		c.waitRunning(failed)
		err = c.drain(c.ctx)
	}
	if err == nil {
		err = c.drain(c.ctx)
	}
	if err == nil {
		err = c.drain(c.collCtx())
	}
	c.freed.Store(true)
	c.p.eng.failContexts(c.contexts(), ErrFreed)
	if err != nil {
		c.inter.local.freed.Store(true)
		return fmt.Errorf("mpi: free: %w", err)
	}
	if err := c.inter.local.Free(); err != nil {
		return fmt.Errorf("mpi: free: local group: %w", err)
	}
	c.coll = collState{}
	c.p.releaseCtx(c.ctx >> 1)
	return nil
}

// freeQuiet frees the private duplicate of a creation that failed with an
// error every member of the group shares (an argument error, found
// locally or relayed by the leader). After any other error (a failed
// peer, a context that ended) Free's exchange might not complete, so the
// duplicate is only marked freed (its id is not reused).
func freeQuiet(lc *Comm, cause error) error {
	if !errors.Is(cause, ErrArg) && !errors.Is(cause, ErrRank) && !errors.Is(cause, ErrIntercomm) {
		lc.freed.Store(true)
		return nil
	}
	if err := lc.Free(); err != nil {
		return fmt.Errorf("freeing the local duplicate: %w", err)
	}
	return nil
}

// checkPeer validates the local leader's view of the peer communicator.
func checkPeer(c, peer *Comm, remoteLeader int) error {
	switch {
	case peer == nil:
		return fmt.Errorf("%w: the local leader's peer communicator is nil", ErrArg)
	case peer.inter != nil:
		return fmt.Errorf("%w: as the peer communicator", ErrIntercomm)
	}
	if err := peer.errUsable(); err != nil {
		return err
	}
	if remoteLeader < 0 || remoteLeader >= len(peer.group) {
		return fmt.Errorf("%w: remote leader %d (peer communicator of %d)", ErrRank, remoteLeader, len(peer.group))
	}
	if w := peer.group[remoteLeader]; c.hasWorld(w) {
		return fmt.Errorf("%w: remote leader %d is world rank %d, local rank %d: the groups overlap",
			ErrArg, remoteLeader, w, slices.Index(c.group, w))
	}
	return nil
}

// interCtx agrees on the new communicator's id with both groups, from
// the offers in local and remote (the entries of the exchange sw ran on
// lc), and claims it on every member. When a concurrent Split on some
// member claimed the id meanwhile (see agreeCtx), it offers again: the
// round that tells every member about the claims carries new offers.
func (p *proc) interCtx(sw swapper, lc *Comm, leader int, local, remote [][]byte, tag int) (uint32, error) {
	agree := swapper{swap: sw.swap}
	if sw.swap != nil {
		agree.pre = func([][]byte) (bool, error) { return true, nil }
	}
	for attempt := 1; ; attempt++ {
		offers := make([][]byte, 0, len(local)+len(remote))
		for _, e := range slices.Concat(local, remote) {
			offers = append(offers, e[entryOffers:])
		}
		id := pickCtx(offers)
		if id >= ctxDerived>>1 {
			return 0, fmt.Errorf("%w: out of communicator context ids", ErrArg)
		}
		var claimed int64
		if p.claimCtx(id) {
			claimed = 1
		}
		var err error
		local, remote, err = agree.run(lc, leader, claimed, 0, 0, tag)
		if err != nil {
			return 0, err // a claimed id stays claimed: unused, never reused
		}
		ok := true
		for _, e := range slices.Concat(local, remote) {
			ok = ok && entryFlag(e)
		}
		if ok {
			return id, nil
		}
		if claimed == 1 {
			p.releaseCtx(id)
		}
		ctxRetryWait(attempt)
	}
}

// --- the leaders' exchange (docs/collectives.md, Intercommunicators) ---

// interEntry is one member's entry: world rank, flag (Merge's high, or
// Split's color), key (Split's), check word (Create's group hash) and its
// context id offer (comm_free.go, from entryOffers on), as 8-byte
// little-endian words.
const (
	entryOffers = 32
	interEntry  = entryOffers + 8 + 8*ctxOffers
)

func entryWorld(e []byte) int    { return int(binary.LittleEndian.Uint64(e)) }
func entryFlag(e []byte) bool    { return binary.LittleEndian.Uint64(e[8:]) != 0 }
func entryWord(e []byte) int     { return int(int64(binary.LittleEndian.Uint64(e[8:]))) }
func entryKey(e []byte) int      { return int(int64(binary.LittleEndian.Uint64(e[16:]))) }
func entryCheck(e []byte) uint64 { return binary.LittleEndian.Uint64(e[24:]) }

// swapper is the leaders' part of the exchange; the zero swapper is a
// non-leader's. pre checks the local entries before the swap (and says
// whether the swap can happen at all), swap sends the local group's
// message to the remote leader and returns the remote group's, post
// checks the remote entries.
type swapper struct {
	pre  func(local [][]byte) (bool, error)
	swap func(msg []byte) ([]byte, error)
	post func(remote [][]byte) error
}

// run gathers every local member's entry on lc, lets the leader swap the
// group's entries with the remote leader, and broadcasts the remote
// entries (or the error that stopped the exchange) to every member. Every
// member returns the same entries, or an error: a leader's check that
// failed is every member's error, on both groups when the swap happened.
func (sw swapper) run(lc *Comm, leader int, word, key int64, check uint64, tag int) (local, remote [][]byte, err error) {
	mine := make([]byte, interEntry)
	binary.LittleEndian.PutUint64(mine, uint64(lc.p.rank))
	binary.LittleEndian.PutUint64(mine[8:], uint64(word))
	binary.LittleEndian.PutUint64(mine[16:], uint64(key))
	binary.LittleEndian.PutUint64(mine[24:], check)
	lc.p.putCtxOffer(mine[entryOffers:])
	all, err := lc.allgatherBytes(mine, tag)
	if err != nil {
		return nil, nil, err
	}
	for i := 0; i < len(all); i += interEntry {
		local = append(local, all[i:i+interEntry])
	}
	var msg []byte
	if lc.rank == leader {
		ok, lerr := sw.pre(local)
		if ok {
			resp, serr := sw.swap(encodeSwap(local, lerr))
			if serr == nil {
				remote, serr = decodeSwap(resp, "the remote group")
			}
			if serr == nil && sw.post != nil {
				serr = sw.post(remote)
			}
			lerr = cmpOr(lerr, serr)
		}
		err = lerr
		msg = encodeSwap(remote, err)
	}
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(msg)))
	if berr := lc.bcastBytes(n[:], leader, tag); berr != nil {
		return nil, nil, errors.Join(err, berr)
	}
	if lc.rank != leader {
		msg = make([]byte, binary.LittleEndian.Uint64(n[:]))
	}
	if berr := lc.bcastBytes(msg, leader, tag); berr != nil {
		return nil, nil, errors.Join(err, berr)
	}
	if lc.rank != leader {
		remote, err = decodeSwap(msg, fmt.Sprintf("the local leader (rank %d)", leader))
	}
	return local, remote, err
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// Kinds of a relayed error, so errors.Is/As work on every member.
const (
	relayOther = iota
	relayRank
	relayArg
	relayIntercomm
	relayPeer
	relayCanceled
	relayDeadline
)

// encodeSwap is the exchange's message: status 0, a count and the
// entries; or status 1, the error's kind, a rank (of a PeerError) and its
// text.
func encodeSwap(entries [][]byte, err error) []byte {
	if err != nil {
		kind, rank, text := relayOther, 0, err.Error()
		var pe *PeerError
		switch {
		case errors.As(err, &pe):
			kind, rank, text = relayPeer, pe.Rank, pe.Err.Error()
		case errors.Is(err, ErrRank):
			kind = relayRank
		case errors.Is(err, ErrArg):
			kind = relayArg
		case errors.Is(err, ErrIntercomm):
			kind = relayIntercomm
		case errors.Is(err, context.Canceled):
			kind = relayCanceled
		case errors.Is(err, context.DeadlineExceeded):
			kind = relayDeadline
		}
		b := []byte{1, byte(kind)}
		b = binary.LittleEndian.AppendUint64(b, uint64(int64(rank)))
		return append(b, text...)
	}
	b := binary.LittleEndian.AppendUint32([]byte{0}, uint32(len(entries)))
	for _, e := range entries {
		b = append(b, e...)
	}
	return b
}

// relayedError is an error another member detected: its text, and the
// sentinel it wrapped.
type relayedError struct {
	text string
	is   error
}

func (e *relayedError) Error() string { return e.text }
func (e *relayedError) Unwrap() error { return e.is }

// decodeSwap reads encodeSwap's message from who.
func decodeSwap(b []byte, who string) ([][]byte, error) {
	bad := fmt.Errorf("%w: malformed group exchange message (%d bytes) from %s", ErrArg, len(b), who)
	if len(b) < 1 {
		return nil, bad
	}
	if b[0] == 1 {
		if len(b) < 10 {
			return nil, bad
		}
		kind, rank, text := b[1], int(int64(binary.LittleEndian.Uint64(b[2:]))), string(b[10:])
		var sentinel error
		switch kind {
		case relayPeer:
			return nil, &PeerError{Rank: rank, Err: fmt.Errorf("%s (seen by %s)", text, who)}
		case relayRank:
			sentinel = ErrRank
		case relayArg:
			sentinel = ErrArg
		case relayIntercomm:
			sentinel = ErrIntercomm
		case relayCanceled:
			sentinel = context.Canceled
		case relayDeadline:
			// Members share the creation's deadline: whoever's expiry
			// is seen first, every member reports the context's error.
			sentinel = context.DeadlineExceeded
		}
		return nil, fmt.Errorf("%s: %w", who, &relayedError{text, sentinel})
	}
	if b[0] != 0 || len(b) < 5 {
		return nil, bad
	}
	n := int(binary.LittleEndian.Uint32(b[1:]))
	b = b[5:]
	if n < 1 || len(b) != n*interEntry {
		return nil, bad
	}
	out := make([][]byte, n)
	for i := range out {
		out[i] = b[i*interEntry : (i+1)*interEntry]
	}
	return out, nil
}
