package mpi

import (
	"context"
	"encoding/binary"
	"fmt"
	"sort"
	"sync/atomic"
)

// Comm is a communicator: a group of ranks with its own message space.
// Messages sent on one communicator never match receives on another.
type Comm struct {
	p     *proc
	ctx   uint32 // point-to-point context id; ctx|1 carries collectives
	rank  int
	group []int       // communicator rank -> world rank
	index map[int]int // world rank -> communicator rank (nil for world)
	coll  collState   // scratch space of the collectives (coll.go)
	node  *nodeState  // host layout, learned on first use (coll_node.go)
	// Non-blocking collectives and contexts (coll_nb.go): tagOff shifts
	// every collective tag (a clone's private tag space), cctx bounds the
	// collectives' waits, iseq numbers and counts the non-blocking
	// collectives started on c and its views (shared with them).
	tagOff int
	cctx   context.Context
	iseq   *nbState
	// freed is set by Free (comm_free.go); shared by c, its views and
	// its sub-communicators. Nil for the world communicator.
	freed *atomic.Bool
	// inter is set on intercommunicators (intercomm.go): group is then
	// the remote group, rank the rank in the local group.
	inter *interState
	// fscope is whom a failed collective on c tells (failnotice.go):
	// set on sub-communicators (their parent's) and intercommunicators.
	fscope *failScope
}

// Rank is this process's rank in c.
func (c *Comm) Rank() int { return c.rank }

// Size is the number of ranks in c (in its local group, on an
// intercommunicator).
func (c *Comm) Size() int {
	if c.inter != nil {
		return len(c.inter.local.group)
	}
	return len(c.group)
}

// WorldRank translates a rank of c into a rank of the world communicator
// (on an intercommunicator, a rank of the remote group, as point-to-point
// operations name them).
func (c *Comm) WorldRank(rank int) (int, error) {
	if rank < 0 || rank >= len(c.group) {
		return 0, fmt.Errorf("%w: %d", ErrRank, rank)
	}
	return c.group[rank], nil
}

func (c *Comm) hasWorld(w int) bool {
	if c.index == nil {
		return w >= 0 && w < len(c.group)
	}
	_, ok := c.index[w]
	return ok
}

// collCtx is the context id collectives on c use, so they never match
// user point-to-point messages.
func (c *Comm) collCtx() uint32 { return c.ctx | 1 }

// Internal tags on the collective context.
const (
	tagBarrier = 1 + iota
	tagSplit
	tagBcast
	tagReduce
)

// Undefined as a Split color leaves the caller out of every new communicator.
const Undefined = -1

// Dup returns a new communicator with the same group and a new context
// (on an intercommunicator, a new intercommunicator between the same
// groups). It is collective over c.
func (c *Comm) Dup() (*Comm, error) { return c.Split(0, c.rank) }

// Split partitions c: ranks passing the same color form a new communicator,
// ordered by key (then by rank in c). Color Undefined returns nil. It is
// collective over c. Context ids are agreed collectively: the new id is
// unused by every member (see takeCtx). A color below 0 other than
// Undefined is ErrArg on every member, naming the rank that passed it.
// On an intercommunicator the result is an intercommunicator between the
// local and remote members of the same color (intercomm_split.go).
func (c *Comm) Split(color, key int) (*Comm, error) {
	if err := c.errUsable(); err != nil {
		return nil, err
	}
	if c.inter != nil {
		return c.interSplit(color, key)
	}
	return c.split(color, key, 0, nil)
}

// split is Split with a check word that every member must pass alike
// (Create's hash of its group; else ErrArg naming the first member whose
// word differs from rank 0's, on every member) and an argument error
// found locally, returned on every member once the words agree (they
// then passed the same arguments, so each found the same error).
func (c *Comm) split(color, key int, check uint64, argErr error) (*Comm, error) {
	for attempt := 1; ; attempt++ {
		nc, ok, err := c.splitOnce(color, key, check, argErr)
		if ok || err != nil {
			return nc, err
		}
		ctxRetryWait(attempt)
	}
}

// splitOnce is one attempt of split: ok false when the id it picked was
// claimed meanwhile by a concurrent Split on some member (agreeCtx).
func (c *Comm) splitOnce(color, key int, check uint64, argErr error) (*Comm, bool, error) {
	p := c.p
	mine := make([]byte, splitEntry)
	binary.LittleEndian.PutUint64(mine, uint64(int64(color)))
	binary.LittleEndian.PutUint64(mine[8:], uint64(int64(key)))
	binary.LittleEndian.PutUint64(mine[16:], check)
	p.putCtxOffer(mine[splitOffers:])
	all, err := c.allgatherBytes(mine, tagSplit)
	if err != nil {
		return nil, false, err
	}
	check0 := binary.LittleEndian.Uint64(all[16:])
	for r := 1; r < len(c.group); r++ {
		if binary.LittleEndian.Uint64(all[r*splitEntry+16:]) != check0 {
			return nil, false, fmt.Errorf("%w: Create: rank %d passed a different group from rank 0's (every rank must pass the same group)", ErrArg, r)
		}
	}
	if argErr != nil {
		return nil, false, argErr
	}
	type ent struct{ color, key, rank int }
	var members []ent
	offers := make([][]byte, len(c.group))
	for r := 0; r < len(c.group); r++ {
		b := all[r*splitEntry:]
		col := int(int64(binary.LittleEndian.Uint64(b)))
		k := int(int64(binary.LittleEndian.Uint64(b[8:])))
		offers[r] = b[splitOffers:splitEntry]
		if col < 0 && col != Undefined {
			// Checked after the exchange, so that every member fails
			// alike instead of the others waiting for this one.
			return nil, false, fmt.Errorf("%w: Split: rank %d passed color %d (want >= 0 or Undefined)", ErrArg, r, col)
		}
		if col == color && color != Undefined {
			members = append(members, ent{col, k, r})
		}
	}
	id := pickCtx(offers)
	if id >= ctxDerived>>1 { // higher ids are the node-aware collectives' (coll_node.go)
		return nil, false, fmt.Errorf("%w: out of communicator context ids", ErrArg)
	}
	if ok, err := c.agreeCtx(id, tagSplit); !ok || err != nil {
		return nil, false, err
	}
	if color == Undefined {
		return nil, true, nil
	}
	sort.SliceStable(members, func(i, j int) bool {
		if members[i].key != members[j].key {
			return members[i].key < members[j].key
		}
		return members[i].rank < members[j].rank
	})
	nc := &Comm{p: p, ctx: id << 1, group: make([]int, len(members)), index: map[int]int{}, freed: new(atomic.Bool)}
	for i, m := range members {
		w := c.group[m.rank]
		nc.group[i] = w
		nc.index[w] = i
		if m.rank == c.rank {
			nc.rank = i
		}
	}
	return nc, true, nil
}

// allgatherBytes gathers equal-size blocks from every rank at rank 0 and
// broadcasts the concatenation.
func (c *Comm) allgatherBytes(mine []byte, tag int) ([]byte, error) {
	n := len(c.group)
	all := make([]byte, n*len(mine))
	if c.rank == 0 {
		copy(all, mine)
		reqs := make([]*Request, 0, n-1)
		for r := 1; r < n; r++ {
			reqs = append(reqs, c.cirecv(all[r*len(mine):(r+1)*len(mine)], 1, r, tag))
		}
		if err := c.waitReqs(reqs...); err != nil {
			return nil, err
		}
	} else if err := c.csend(mine, 0, tag); err != nil {
		return nil, err
	}
	if err := c.bcastBytes(all, 0, tag); err != nil {
		return nil, err
	}
	return all, nil
}

// Barrier returns once every rank of c has entered it (dissemination
// algorithm: ceil(log2 n) rounds of one zero-byte send and receive; in two
// levels when c spans hosts, see coll_node.go).
func (c *Comm) Barrier() error {
	if c.inter != nil {
		return c.interBarrier()
	}
	if ns, err := c.twoLevel(true); err != nil {
		return err
	} else if ns != nil {
		return ns.barrier()
	}
	n := len(c.group)
	for k := 1; k < n; k <<= 1 {
		if err := c.csendrecv(nil, (c.rank+k)%n, nil, (c.rank-k+n)%n, tagBarrier); err != nil {
			return err
		}
	}
	return c.p.errClosed()
}
