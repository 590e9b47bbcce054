package mpi

import (
	"crypto/sha256"
	"strconv"
	"sync/atomic"
)

// Node-aware (two-level) collectives. When a communicator spans several
// hosts and some host holds several of its ranks, Barrier, Bcast, Reduce,
// Allreduce, Allgather, Gather and Scatter run in two levels: the ranks of each host among themselves
// (over shared memory), and one leader per host (its lowest rank) over the
// network. Only the leaders' step crosses hosts, so each host sends and
// receives one copy of the data instead of one per rank, whatever the
// placement. See docs/collectives.md.
//
// The layout is learned once per communicator, collectively, on its first
// Barrier, Bcast, Reduce or Allreduce: every rank contributes a hash of its
// host identity, so every rank sees the same table and takes the same
// decisions. Large commutative Allreduces over hosts of equal size use
// lanes (one leader per host rank) instead of one leader per host.

// tagNode is the layout exchange's tag on the collective context.
const tagNode = 40

// Context ids of the sub-communicators are the parent's with a high bit
// set. Split hands out ids below ctxDerived, and a parent's id is unused by
// any other communicator of its members, so the derived ids are too; and
// deriving them needs no agreement that could race a concurrent Split on
// another communicator.
const (
	ctxNodeBit   = 1 << 31
	ctxLeaderBit = 1 << 30
	ctxLaneBit   = 1 << 29
	ctxDerived   = ctxLaneBit
)

// nodeState is a communicator's host layout and its sub-communicators.
type nodeState struct {
	// twoLevel: more than one host, and some host has several ranks.
	twoLevel bool
	// ordered: every host's ranks are consecutive in the communicator, so
	// host order then rank order within a host is rank order and the
	// two-level algorithms keep a non-commutative op's operand order.
	ordered bool
	nodeOf  []int // communicator rank -> host index (hosts by lowest rank)
	leaders []int // host index -> communicator rank of its leader
	node    *Comm // this rank's host's ranks, in communicator order
	leader  *Comm // the leaders in host order; nil unless this rank leads
	// lane: the ranks with this rank's host rank, one per host, when
	// every host has the same number of ranks (else nil everywhere).
	lane  *Comm
	used  atomic.Int64 // collectives that ran in two levels (tests)
	lanes atomic.Int64 // of which Allreduces over lanes (tests)
}

// flatNodes marks sub-communicators, which are single-host or one rank per
// host by construction, so they never exchange a layout.
func flatNodes() *nodeState { return &nodeState{} }

// layoutEntry is one rank's contribution: its host identity's hash.
const layoutEntry = 16

// nodeKey hashes this process's host identity; an unknown identity is
// made unique (its own host), since locality cannot be assumed.
func (p *proc) nodeKey() [layoutEntry]byte {
	id := p.nodeID
	if id == "" {
		id = "\x00unknown-" + strconv.Itoa(p.rank)
	}
	h := sha256.Sum256([]byte("gompi-node\x00" + id))
	return [layoutEntry]byte(h[:])
}

// nodes returns c's layout, exchanging it on first use (collective).
func (c *Comm) nodes() (*nodeState, error) {
	// Every collective starts here, and one of one rank sends nothing
	// that would find c freed.
	if err := c.errUsable(); err != nil {
		return nil, err
	}
	if c.node != nil {
		return c.node, nil
	}
	// Two hosts, one of them shared, need 3 ranks. A derived context id
	// (a sub-communicator's) is never a parent.
	if len(c.group) < 3 || c.ctx >= ctxDerived {
		c.node = flatNodes()
		return c.node, nil
	}
	key := c.p.nodeKey()
	all, err := c.allgatherBytes(key[:], tagNode)
	if err != nil {
		return nil, err
	}
	c.node = c.buildNodes(all)
	return c.node, nil
}

// buildNodes derives the layout from every rank's entry and, when the
// two-level algorithms apply, makes the host and leader communicators.
func (c *Comm) buildNodes(all []byte) *nodeState {
	n := len(c.group)
	ns := &nodeState{nodeOf: make([]int, n)}
	index := map[[layoutEntry]byte]int{}
	var members [][]int // host index -> communicator ranks, ascending
	for r := 0; r < n; r++ {
		k := [layoutEntry]byte(all[r*layoutEntry:])
		h, ok := index[k]
		if !ok {
			h = len(members)
			index[k] = h
			members = append(members, nil)
			ns.leaders = append(ns.leaders, r)
		}
		ns.nodeOf[r] = h
		members[h] = append(members[h], r)
	}
	shared, equal := false, true
	ns.ordered = true
	for _, m := range members {
		shared = shared || len(m) > 1
		equal = equal && len(m) == len(members[0])
		ns.ordered = ns.ordered && m[len(m)-1]-m[0] == len(m)-1
	}
	ns.twoLevel = len(members) > 1 && shared
	if !ns.twoLevel {
		return ns
	}
	// The host communicators share one id: their groups are disjoint.
	me := ns.nodeOf[c.rank]
	ns.node = c.subComm(c.ctx|ctxNodeBit, members[me])
	if ns.leaders[me] == c.rank {
		ns.leader = c.subComm(c.ctx|ctxLeaderBit, ns.leaders)
	}
	if equal { // the lanes share one id: their groups are disjoint
		lane := make([]int, len(members))
		for h, m := range members {
			lane[h] = m[ns.node.rank]
		}
		ns.lane = c.subComm(c.ctx|ctxLaneBit, lane)
	}
	return ns
}

// subComm makes the communicator of c's ranks (in that order, including
// c's own) on context ctx.
func (c *Comm) subComm(ctx uint32, ranks []int) *Comm {
	// A clone's sub-communicators share its tag space and context.
	nc := &Comm{p: c.p, ctx: ctx, group: make([]int, len(ranks)), index: make(map[int]int, len(ranks)), node: flatNodes(),
		tagOff: c.tagOff, cctx: c.cctx, freed: c.freed, fscope: c.scope()}
	for i, r := range ranks {
		w := c.group[r]
		nc.group[i] = w
		nc.index[w] = i
		if r == c.rank {
			nc.rank = i
		}
	}
	return nc
}

// twoLevel returns c's layout if a collective with an op of the given
// commutativity should run in two levels, else nil. Non-commutative ops
// need every host's ranks consecutive (ordered), or operands would be
// combined out of rank order.
func (c *Comm) twoLevel(commute bool) (*nodeState, error) {
	ns, err := c.nodes()
	if err != nil || !ns.twoLevel || !(commute || ns.ordered) {
		return nil, err
	}
	ns.used.Add(1)
	return ns, nil
}

// nodeRank is the host-communicator rank of c's rank r (same host as c's).
func (ns *nodeState) nodeRank(c *Comm, r int) int { return ns.node.index[c.group[r]] }

// barrier: the host's ranks report to their leader (binomial fan-in), the
// leaders run a barrier, and each leader releases its host (binomial
// fan-out). A rank leaves only after its leader left the leaders' barrier,
// which every leader entered only after its whole host arrived.
func (ns *nodeState) barrier() error {
	nc := ns.node
	n, r := len(nc.group), nc.rank
	for mask := 1; mask < n; mask <<= 1 {
		if r&mask != 0 {
			if err := nc.csend(nil, r-mask, tagBarrier); err != nil {
				return err
			}
			break
		}
		if r+mask < n {
			if err := nc.crecv(nil, r+mask, tagBarrier); err != nil {
				return err
			}
		}
	}
	if ns.leader != nil {
		if err := ns.leader.Barrier(); err != nil {
			return err
		}
	}
	return nc.bcastBytes(nil, 0, tagBarrier)
}

// bcastTwoLevel: root's host broadcasts from root, the leaders from root's
// host's leader, then the other hosts from their leaders. Each step picks
// its own algorithm by size (scatter + allgather for large buffers).
func bcastTwoLevel[T Number](c *Comm, ns *nodeState, buf []T, root int) error {
	rh, me := ns.nodeOf[root], ns.nodeOf[c.rank]
	if me == rh {
		if err := Bcast(ns.node, buf, ns.nodeRank(c, root)); err != nil {
			return err
		}
	}
	if ns.leader != nil {
		if err := Bcast(ns.leader, buf, rh); err != nil {
			return err
		}
	}
	if me != rh {
		return Bcast(ns.node, buf, 0)
	}
	return nil
}

// reduceTwoLevel: each host reduces to its leader, the leaders reduce to
// root's host's leader, which hands the result to root if root does not
// lead. With ordered hosts, both levels keep rank order.
func reduceTwoLevel[T Number](c *Comm, ns *nodeState, sendbuf, recvbuf []T, op Op, root int) error {
	cnt := len(sendbuf)
	rh := ns.nodeOf[root]
	lead := ns.leaders[rh]
	var acc []T // the host's partial result, at leaders
	if ns.leader != nil {
		if c.rank == root {
			acc = recvbuf[:cnt]
		} else {
			acc = scratch[T](c, 0, cnt) // sub-communicators have their own scratch
		}
	}
	if err := Reduce(ns.node, sendbuf, acc, op, 0); err != nil {
		return err
	}
	if ns.leader != nil {
		if err := Reduce(ns.leader, acc, acc, op, rh); err != nil {
			return err
		}
	}
	switch {
	case root == lead:
	case c.rank == lead:
		return c.csend(asBytes(acc), root, tagReduce)
	case c.rank == root:
		return c.crecv(asBytes(recvbuf[:cnt]), lead, tagReduce)
	}
	return nil
}

// allreduceTwoLevel: each host reduces to its leader (binomial, or ring
// reduce-scatter + gather when large), the leaders allreduce (recursive
// doubling, or ring reduce-scatter + allgather when large), and each leader
// broadcasts to its host (binomial, or scatter + allgather when large).
// Network traffic is the leaders' allreduce only: about 2x the buffer per
// host when large, instead of 2x per rank whose ring neighbour is on
// another host. Large commutative reductions with equal hosts go over
// lanes instead (allreduceLanes). recvbuf has len(sendbuf) elements.
func allreduceTwoLevel[T Number](c *Comm, ns *nodeState, sendbuf, recvbuf []T, op Op) error {
	cnt, k := len(sendbuf), len(ns.node.group)
	if ns.lane != nil && op.d.commute && cnt*sizeOf[T]() >= allreduceLarge && cnt >= k*op.Unit() {
		return allreduceLanes(ns, sendbuf, recvbuf, op)
	}
	if err := Reduce(ns.node, sendbuf, recvbuf, op, 0); err != nil {
		return err
	}
	if ns.leader != nil {
		if err := Allreduce(ns.leader, recvbuf, recvbuf, op); err != nil {
			return err
		}
	}
	return Bcast(ns.node, recvbuf, 0)
}

// allreduceLanes is the multi-leader large Allreduce for hosts of k ranks
// each: a ring reduce-scatter within each host leaves host rank i with
// block i of its host's sum, the ranks holding block i on every host (lane
// i) allreduce it, and a ring allgather within each host completes every
// buffer. The network carries the same 2x the buffer per host as with one
// leader, but in k concurrent streams of 1/k each, and no rank gathers or
// scatters the whole buffer within the host.
func allreduceLanes[T Number](ns *nodeState, sendbuf, recvbuf []T, op Op) error {
	ns.lanes.Add(1)
	nc, cnt, sz := ns.node, len(sendbuf), sizeOf[T]()
	bl := unitBlocks(cnt, len(nc.group), op.Unit())
	if err := ringReduceScatter(nc, sendbuf, recvbuf, layout{b: bl}, op, tagAllreduce); err != nil {
		return err
	}
	lo, hi := bl.at(nc.rank)
	if err := Allreduce(ns.lane, recvbuf[lo:hi], recvbuf[lo:hi], op); err != nil {
		return err
	}
	return nc.ringAllgather(asBytes(recvbuf), layout{b: blocks{cnt * sz, bl.bs * sz}}, 0, tagAllreduce)
}

// members lists each host's communicator ranks, ascending.
func (ns *nodeState) members() [][]int {
	m := make([][]int, len(ns.leaders))
	for r, h := range ns.nodeOf {
		m[h] = append(m[h], r)
	}
	return m
}

// hostSpans gives each host's span of a host-ordered buffer of k-element
// blocks (counts and displacements in elements).
func hostSpans(members [][]int, k int) (counts, displs []int) {
	counts, displs = make([]int, len(members)), make([]int, len(members))
	off := 0
	for h, m := range members {
		counts[h], displs[h] = len(m)*k, off
		off += len(m) * k
	}
	return counts, displs
}

// unpermute copies the host-ordered blocks of all into dst in communicator
// rank order.
func unpermute[T Number](members [][]int, displs []int, all, dst []T, k int) {
	for h, m := range members {
		for i, r := range m {
			copy(dst[r*k:(r+1)*k], all[displs[h]+i*k:displs[h]+(i+1)*k])
		}
	}
}

// allgatherTwoLevel: each host gathers its blocks at its leader, the
// leaders allgather the hosts' spans (host order), each leader puts the
// blocks in rank order and broadcasts the whole buffer within its host. A
// host sends and receives its data once over the network instead of once
// per rank whose ring neighbour is elsewhere. recvbuf holds Size()*k.
func allgatherTwoLevel[T Number](c *Comm, ns *nodeState, sendbuf, recvbuf []T) error {
	n, k := len(c.group), len(sendbuf)
	members := ns.members()
	var hostbuf []T
	if ns.leader != nil {
		hostbuf = make([]T, len(members[ns.nodeOf[c.rank]])*k)
	}
	if err := Gather(ns.node, sendbuf, hostbuf, 0); err != nil {
		return err
	}
	if ns.leader != nil {
		counts, displs := hostSpans(members, k)
		all := recvbuf[:n*k]
		if !ns.ordered { // host order is not rank order
			all = make([]T, n*k)
		}
		if err := Allgatherv(ns.leader, hostbuf, all, counts, displs); err != nil {
			return err
		}
		if !ns.ordered {
			unpermute(members, displs, all, recvbuf, k)
		}
	}
	return Bcast(ns.node, recvbuf[:n*k], 0)
}

// gatherTwoLevel: each host gathers at its leader, the leaders gather the
// hosts' spans at root's leader, which puts them in rank order and hands
// them to root if root does not lead.
func gatherTwoLevel[T Number](c *Comm, ns *nodeState, sendbuf, recvbuf []T, root int) error {
	n, k := len(c.group), len(sendbuf)
	members := ns.members()
	rh := ns.nodeOf[root]
	lead := ns.leaders[rh]
	var hostbuf []T
	if ns.leader != nil {
		hostbuf = make([]T, len(members[ns.nodeOf[c.rank]])*k)
	}
	if err := Gather(ns.node, sendbuf, hostbuf, 0); err != nil {
		return err
	}
	if ns.leader != nil {
		counts, displs := hostSpans(members, k)
		var all []T
		if c.rank == lead {
			all = make([]T, n*k)
		}
		if err := Gatherv(ns.leader, hostbuf, all, counts, displs, rh); err != nil {
			return err
		}
		if c.rank == lead {
			dst := recvbuf
			if root != lead {
				dst = make([]T, n*k)
			}
			unpermute(members, displs, all, dst, k)
			if root != lead {
				return c.csend(asBytes(dst), root, tagGather)
			}
		}
	}
	if c.rank == root && root != lead {
		return c.crecv(asBytes(recvbuf[:n*k]), lead, tagGather)
	}
	return nil
}

// scatterTwoLevel: root hands its buffer to its host's leader if it does
// not lead, that leader puts the blocks in host order and scatters the
// hosts' spans among the leaders, and each leader scatters within its
// host.
func scatterTwoLevel[T Number](c *Comm, ns *nodeState, sendbuf, recvbuf []T, root int) error {
	n, k := len(c.group), len(recvbuf)
	members := ns.members()
	rh := ns.nodeOf[root]
	lead := ns.leaders[rh]
	if c.rank == root && root != lead {
		if err := c.csend(asBytes(sendbuf[:n*k]), lead, tagScatter); err != nil {
			return err
		}
	}
	var hostbuf []T
	if ns.leader != nil {
		counts, displs := hostSpans(members, k)
		var all []T
		if c.rank == lead {
			src := sendbuf
			if root != lead {
				src = make([]T, n*k)
				if err := c.crecv(asBytes(src), root, tagScatter); err != nil {
					return err
				}
			}
			all = make([]T, n*k)
			for h, m := range members { // rank order -> host order
				for i, r := range m {
					copy(all[displs[h]+i*k:displs[h]+(i+1)*k], src[r*k:(r+1)*k])
				}
			}
		}
		hostbuf = make([]T, counts[ns.nodeOf[c.rank]])
		if err := Scatterv(ns.leader, all, counts, displs, hostbuf, rh); err != nil {
			return err
		}
	}
	return Scatter(ns.node, hostbuf, recvbuf, 0)
}
