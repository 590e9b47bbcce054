package mpi

import (
	"context"
	"errors"
	"fmt"
	"unsafe"
)

// Collectives over numeric slices. They are package-level generic
// functions (Go has no generic methods) that move the slices' memory
// as-is (no encoding), run on the communicator's collective context so
// they never match user messages, and pick their algorithm from the
// message size, the number of ranks and how the ranks sit on hosts
// (coll_node.go; docs/collectives.md). Every rank
// of the communicator must call the same collectives in the same order with
// matching arguments; collectives on one Comm must not run concurrently
// (as in MPI). A failed peer makes the collectives that wait on it return
// its *PeerError.

// Algorithm switch points, in bytes of the whole buffer. Variables so that
// tests can lower them to exercise every algorithm on small buffers.
var (
	// Bcast: binomial tree below, scatter + ring allgather at or above
	// (with more than 2 ranks).
	bcastLarge = 64 << 10
	// Reduce (commutative ops): binomial tree below, ring reduce-scatter +
	// gather to the root at or above.
	reduceLarge = 64 << 10
	// Allreduce (commutative ops): recursive doubling below, ring
	// reduce-scatter + ring allgather at or above.
	allreduceLarge = 64 << 10
	// Allgather: recursive doubling (power-of-two sizes) below, ring at or
	// above (total bytes gathered).
	allgatherLarge = 64 << 10
	// Alltoall(v): every message posted at once below (bytes per block),
	// pairwise exchange at or above.
	alltoallLarge = 32 << 10
	// Ring reduce-scatter exchanges are split into segments of this many
	// bytes so that reducing one segment overlaps receiving the next.
	ringSegment = 4 << 20
)

// Internal tags of the collectives on the collective context (tagBarrier,
// tagSplit, tagBcast and tagReduce live in comm.go).
const (
	tagAllreduce = 16 + iota
	tagScatter
	tagGather
	tagAllgather
	tagAlltoall
	tagScan
	tagExscan
	tagRedScat
	tagValue
	tagValueAgree
)

// collState is a Comm's scratch space, reused by its collectives so the hot
// path does not allocate. Collectives on one Comm never run concurrently.
type collState struct {
	scratch [2][]uint64
	reqs    []*Request
}

// scratch returns a []T of n elements backed by c's i-th scratch buffer.
func scratch[T Number](c *Comm, i, n int) []T {
	if n == 0 {
		return nil
	}
	words := (n*sizeOf[T]() + 7) / 8
	s := &c.coll.scratch[i]
	if len(*s) < words {
		*s = make([]uint64, max(words, 2*len(*s)))
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(*s))), n)
}

// accumulate sets a = a ∘ b (b from higher ranks); b is clobbered.
func accumulate[T Number](op Op, a, b []T) {
	if op.d.commute {
		combine(op, b, a)
		return
	}
	combine(op, a, b)
	copy(a, b)
}

// --- point-to-point helpers on the collective context ---

var bg = context.Background()

// cisend and cirecv start a send or receive on the collective context, in
// c's tag space: tagOff is 0 for communicators and a per-collective offset
// for the clones non-blocking collectives run on (coll_nb.go).
func (c *Comm) cisend(b []byte, dst, tag int) *Request {
	return c.isend(c.collCtx(), b, dst, tag+c.tagOff)
}

func (c *Comm) cirecv(b []byte, elem, src, tag int) *Request {
	return c.irecv(c.collCtx(), b, elem, src, tag+c.tagOff, false)
}

// wait waits for r; with a context (WithContext), until it ends, and then
// a receive that has not matched is cancelled.
func (c *Comm) wait(r *Request) (Status, error) {
	if c.cctx == nil {
		st, err := r.Wait(bg)
		return st, c.collErr(err)
	}
	st, err := r.Wait(c.cctx)
	if err != nil && !r.isDone() {
		r.Cancel()
	}
	return st, c.collErr(err)
}

func (c *Comm) csend(b []byte, dst, tag int) error {
	_, err := c.wait(c.cisend(b, dst, tag))
	return err
}

// direct says whether c's collective receives may take the direct path
// (recvdirect.go), which nothing but the message ends: not on a view with
// a context, nor in a non-blocking collective (tagOff set), which Free
// must be able to end (failContexts) when it is left behind.
func (c *Comm) direct() bool { return c.cctx == nil && c.tagOff == 0 }

func (c *Comm) crecv(b []byte, src, tag int) error {
	if c.direct() {
		_, err := c.recvWait(c.collCtx(), b, 1, src, tag+c.tagOff)
		return c.collErr(err)
	}
	_, err := c.wait(c.cirecv(b, 1, src, tag))
	return err
}

// csendrecv sends sb to dst while receiving rb from src.
func (c *Comm) csendrecv(sb []byte, dst int, rb []byte, src, tag int) error {
	if c.direct() {
		_, err := c.sendRecvWait(c.collCtx(), sb, dst, tag+c.tagOff, rb, 1, src, tag+c.tagOff)
		return c.collErr(err)
	}
	sr := c.cisend(sb, dst, tag)
	return c.waitReqs(c.cirecv(rb, 1, src, tag), sr)
}

// waitReqs waits for every request. After the first failure it cancels the
// receives that have not matched yet (their peer may never send, since a
// failed collective leaves its peers behind) and waits for the rest, so no
// transfer into a caller's buffer outlives the call. When c's context
// ends, it cancels what it can and returns without waiting for the rest.
func (c *Comm) waitReqs(reqs ...*Request) error {
	ctx := c.cctx
	if ctx == nil {
		ctx = bg
	}
	var first error
	for _, r := range reqs {
		if r == nil {
			continue
		}
		if first != nil {
			r.Cancel()
		}
		_, err := r.Wait(ctx)
		if err != nil && ctx.Err() != nil && !r.isDone() {
			for _, q := range reqs {
				if q != nil {
					q.Cancel()
				}
			}
			return c.collErr(err)
		}
		if err != nil && first == nil && !errors.Is(err, ErrCancelled) {
			first = err
			for _, q := range reqs {
				if q != nil {
					q.Cancel()
				}
			}
		}
	}
	return c.collErr(first)
}

// startReqs returns c's reusable request list, emptied.
func (c *Comm) startReqs() []*Request { return c.coll.reqs[:0] }

// finishReqs waits for reqs and keeps the list for reuse.
func (c *Comm) finishReqs(reqs []*Request) error {
	err := c.waitReqs(reqs...)
	clear(reqs)
	c.coll.reqs = reqs[:0]
	return err
}

func (c *Comm) checkRoot(root int) error {
	if root < 0 || root >= len(c.group) {
		return fmt.Errorf("%w: root %d (communicator of %d)", ErrRank, root, len(c.group))
	}
	return nil
}

func mod(a, n int) int { return ((a % n) + n) % n }

// sameSlice reports whether a and b start at the same element.
func sameSlice[T Number](a, b []T) bool {
	return len(a) > 0 && len(b) > 0 && &a[0] == &b[0]
}

// blocks splits cnt elements into n nearly equal consecutive blocks of
// ceil(cnt/n) (the last ones shorter or empty).
type blocks struct{ cnt, bs int }

func newBlocks(cnt, n int) blocks { return blocks{cnt, (cnt + n - 1) / n} }

// unitBlocks is newBlocks with block sizes a multiple of unit (cnt is), so
// no block boundary splits an op's item.
func unitBlocks(cnt, n, unit int) blocks {
	return blocks{cnt, (cnt/unit + n - 1) / n * unit}
}

func (b blocks) at(i int) (lo, hi int) {
	lo = min(i*b.bs, b.cnt)
	return lo, min(lo+b.bs, b.cnt)
}

// ===================== Bcast =====================

// Bcast copies root's buf into every rank's buf (equal lengths everywhere).
// Binomial tree below 64 KiB or with 2 ranks; above, root scatters the
// buffer along a binomial tree and a ring allgather completes it (van de
// Geijn), so each link carries about 2x the buffer instead of log2(n)x. A
// communicator spanning hosts broadcasts in two levels: within root's host,
// among one leader per host, within the other hosts (docs/collectives.md).
func Bcast[T Number](c *Comm, buf []T, root int) error {
	if c.inter != nil {
		return interBcast(c, buf, root)
	}
	if err := c.checkRoot(root); err != nil {
		return err
	}
	if ns, err := c.twoLevel(true); err != nil {
		return err
	} else if ns != nil {
		return bcastTwoLevel(c, ns, buf, root)
	}
	b := asBytes(buf)
	if len(c.group) <= 2 || len(b) < bcastLarge {
		return c.bcastBytes(b, root, tagBcast)
	}
	return c.bcastScatterAllgather(b, root)
}

// bcastBytes broadcasts buf from root along a binomial tree.
func (c *Comm) bcastBytes(buf []byte, root, tag int) error {
	n := len(c.group)
	if err := c.checkRoot(root); err != nil {
		return err
	}
	rel := mod(c.rank-root, n)
	mask := 1
	for mask < n {
		if rel&mask != 0 {
			if err := c.crecv(buf, (rel-mask+root)%n, tag); err != nil {
				return err
			}
			break
		}
		mask <<= 1
	}
	reqs := c.startReqs()
	for mask >>= 1; mask > 0; mask >>= 1 {
		if rel+mask < n {
			reqs = append(reqs, c.cisend(buf, (rel+mask+root)%n, tag))
		}
	}
	return c.finishReqs(reqs)
}

// bcastScatterAllgather: binomial scatter of n blocks (block i to relative
// rank i), then a ring allgather.
func (c *Comm) bcastScatterAllgather(buf []byte, root int) error {
	n := len(c.group)
	rel := mod(c.rank-root, n)
	bl := newBlocks(len(buf), n)
	span := func(from, to int) []byte { // blocks [from, to)
		lo, _ := bl.at(from)
		_, hi := bl.at(min(to, n) - 1)
		return buf[lo:hi]
	}
	mask := 1
	for mask < n {
		if rel&mask != 0 {
			if err := c.crecv(span(rel, rel+mask), (rel-mask+root)%n, tagBcast); err != nil {
				return err
			}
			break
		}
		mask <<= 1
	}
	reqs := c.startReqs()
	for mask >>= 1; mask > 0; mask >>= 1 {
		if rel+mask < n {
			reqs = append(reqs, c.cisend(span(rel+mask, rel+2*mask), (rel+mask+root)%n, tagBcast))
		}
	}
	if err := c.finishReqs(reqs); err != nil {
		return err
	}
	return c.ringAllgather(buf, layout{b: bl}, root, tagBcast)
}

// layout gives the byte range of block i of a buffer: equal blocks, or
// per-rank counts and displacements (in elements of elem bytes).
type layout struct {
	b              blocks
	counts, displs []int
	elem           int
}

// maxBlock is the largest of the n blocks' sizes.
func (l layout) maxBlock(n int) int {
	if l.counts == nil {
		return l.b.bs
	}
	m := 0
	for i := 0; i < n; i++ {
		m = max(m, l.counts[i]*l.elem)
	}
	return m
}

func (l layout) at(i int) (lo, hi int) {
	if l.counts == nil {
		return l.b.at(i)
	}
	lo = l.displs[i] * l.elem
	return lo, lo + l.counts[i]*l.elem
}

// ringAllgather: rank r starts with block (r-shift) mod n of buf and after
// n-1 steps around the ring (send to r+1, receive from r-1) has them all.
func (c *Comm) ringAllgather(buf []byte, l layout, shift, tag int) error {
	n, r := len(c.group), c.rank
	right, left := (r+1)%n, (r-1+n)%n
	for s := 0; s < n-1; s++ {
		slo, shi := l.at(mod(r-shift-s, n))
		rlo, rhi := l.at(mod(r-shift-s-1, n))
		if err := c.csendrecv(buf[slo:shi], right, buf[rlo:rhi], left, tag); err != nil {
			return err
		}
	}
	return nil
}

// ===================== Reduce =====================

// Reduce combines every rank's sendbuf element-wise with op into root's
// recvbuf (ignored elsewhere; may be nil); len(recvbuf) >= len(sendbuf) at
// root, and sendbuf may be recvbuf (in place). Commutative ops use a
// binomial tree below 64 KiB and, above, a ring reduce-scatter followed by
// a gather of the reduced blocks at root (each rank sends about 1x the
// buffer instead of log2(n)x). Non-commutative ops reduce in rank order
// along a binomial tree rooted at rank 0, which then sends to root. A
// communicator spanning hosts reduces within each host, then among one
// leader per host (non-commutative ops only if each host's ranks are
// consecutive).
func Reduce[T Number](c *Comm, sendbuf, recvbuf []T, op Op, root int) error {
	if c.inter != nil {
		return interReduce(c, sendbuf, recvbuf, op, root)
	}
	if err := c.checkRoot(root); err != nil {
		return err
	}
	cnt := len(sendbuf)
	if err := checkOp[T](op, cnt); err != nil {
		return err
	}
	if c.rank == root && len(recvbuf) < cnt {
		return fmt.Errorf("%w: receive buffer of %d for %d elements", ErrArg, len(recvbuf), cnt)
	}
	n := len(c.group)
	if n == 1 {
		if err := c.errUsable(); err != nil {
			return err
		}
		copy(recvbuf, sendbuf)
		return nil
	}
	if ns, err := c.twoLevel(op.d.commute); err != nil {
		return err
	} else if ns != nil {
		return reduceTwoLevel(c, ns, sendbuf, recvbuf, op, root)
	}
	if op.d.commute && cnt*sizeOf[T]() >= reduceLarge && cnt >= n*op.Unit() {
		return reduceRing(c, sendbuf, recvbuf, op, root)
	}
	return reduceBinomial(c, sendbuf, recvbuf, op, root)
}

func reduceBinomial[T Number](c *Comm, sendbuf, recvbuf []T, op Op, root int) error {
	n, cnt := len(c.group), len(sendbuf)
	troot := root
	if !op.d.commute {
		troot = 0
	}
	rel := mod(c.rank-troot, n)
	var acc []T
	if c.rank == root && c.rank == troot {
		acc = recvbuf[:cnt]
	} else {
		acc = scratch[T](c, 0, cnt)
	}
	copy(acc, sendbuf)
	tmp := scratch[T](c, 1, cnt)
	for mask := 1; mask < n; mask <<= 1 {
		if rel&mask != 0 {
			if err := c.csend(asBytes(acc), (rel-mask+troot)%n, tagReduce); err != nil {
				return err
			}
			break
		}
		if rel+mask < n {
			if err := c.crecv(asBytes(tmp), (rel+mask+troot)%n, tagReduce); err != nil {
				return err
			}
			if op.d.commute {
				combine(op, tmp, acc)
			} else { // acc holds lower ranks: acc = acc ∘ tmp
				combine(op, acc, tmp)
				acc, tmp = tmp, acc
			}
		}
	}
	switch {
	case c.rank == troot && troot == root:
		if !sameSlice(acc, recvbuf) {
			copy(recvbuf, acc)
		}
	case c.rank == troot:
		return c.csend(asBytes(acc), root, tagReduce)
	case c.rank == root:
		return c.crecv(asBytes(recvbuf[:cnt]), troot, tagReduce)
	}
	return nil
}

// reduceRing: ring reduce-scatter (rank r ends with block r reduced), then
// every rank sends its block to root.
func reduceRing[T Number](c *Comm, sendbuf, recvbuf []T, op Op, root int) error {
	n, cnt := len(c.group), len(sendbuf)
	var acc []T
	if c.rank == root {
		acc = recvbuf[:cnt]
	} else {
		acc = scratch[T](c, 0, cnt)
	}
	bl := unitBlocks(cnt, n, op.Unit())
	if err := ringReduceScatter(c, sendbuf, acc, layout{b: bl}, op, tagReduce); err != nil {
		return err
	}
	if c.rank != root {
		lo, hi := bl.at(c.rank)
		return c.csend(asBytes(acc[lo:hi]), root, tagReduce)
	}
	reqs := c.startReqs()
	for i := 0; i < n; i++ {
		if i != root {
			lo, hi := bl.at(i)
			reqs = append(reqs, c.cirecv(asBytes(acc[lo:hi]), 1, i, tagReduce))
		}
	}
	return c.finishReqs(reqs)
}

// ringReduceScatter reduces src (this rank's contribution; every rank's
// has the same length) into acc so that rank r ends with the fully reduced
// block r of bl in acc. Other blocks of acc hold partial results, except
// block r-1, which is never written: src is read in place, so callers need
// not copy it into acc first (acc may be src). Commutative ops only. Step
// s sends block r-s-1 to the right (from src at step 0, from acc after)
// and reduces block r-s-2 received from the left with src's block into
// acc; each exchange is split into segments, and the receive of segment
// k+1 is posted before segment k is reduced.
func ringReduceScatter[T Number](c *Comm, src, acc []T, bl layout, op Op, tag int) error {
	n, r := len(c.group), c.rank
	right, left := (r+1)%n, (r-1+n)%n
	u := op.Unit()
	seg := max(ringSegment/sizeOf[T]()/u, 1) * u
	tmp := scratch[T](c, 1, min(2*seg, 2*bl.maxBlock(n)))
	bufs := [2][]T{tmp[:len(tmp)/2], tmp[len(tmp)/2:]}
	for s := 0; s < n-1; s++ {
		slo, shi := bl.at(mod(r-s-1, n))
		rlo, rhi := bl.at(mod(r-s-2, n))
		// Both sides cut the block into the same segments:
		// [k*seg, min((k+1)*seg, len)), at least one (maybe empty).
		sn, rn := shi-slo, rhi-rlo
		from := acc
		if s == 0 {
			from = src
		}
		sends := c.startReqs()
		for k := 0; k == 0 || k*seg < sn; k++ {
			sends = append(sends, c.cisend(asBytes(from[slo+min(k*seg, sn):slo+min((k+1)*seg, sn)]), right, tag))
		}
		nseg := max((rn+seg-1)/seg, 1)
		var rr [2]*Request
		post := func(k int) {
			lo, hi := min(k*seg, rn), min((k+1)*seg, rn)
			rr[k%2] = c.cirecv(asBytes(bufs[k%2][:hi-lo]), 1, left, tag)
		}
		post(0)
		for k := 0; k < nseg; k++ {
			if k+1 < nseg {
				post(k + 1)
			}
			if _, err := c.wait(rr[k%2]); err != nil {
				if o := rr[(k+1)%2]; o != nil && k+1 < nseg {
					o.Cancel()
				}
				rr[k%2] = nil
				return errors.Join(err, c.waitReqs(rr[(k+1)%2]), c.finishReqs(sends))
			}
			lo, hi := min(k*seg, rn), min((k+1)*seg, rn)
			combineInto(op, bufs[k%2][:hi-lo], src[rlo+lo:rlo+hi], acc[rlo+lo:rlo+hi])
		}
		if err := c.finishReqs(sends); err != nil {
			return err
		}
	}
	return nil
}

// ===================== Allreduce =====================

// Allreduce combines every rank's sendbuf element-wise with op into every
// rank's recvbuf (len(recvbuf) >= len(sendbuf); sendbuf may be recvbuf).
// Below 64 KiB: recursive doubling (non-powers of two fold the first
// 2*(n-2^k) ranks in pairs before and send the result back after). At or
// above, for commutative ops: ring reduce-scatter + ring allgather
// (bandwidth-optimal; with 2 ranks that is one exchange of halves, a
// reduction of one half each, and one exchange of the reduced halves).
// Large non-commutative reductions are a Reduce to rank 0 and a Bcast. A
// communicator spanning hosts reduces within each host, allreduces among
// one leader per host and broadcasts within each host (non-commutative ops
// only if each host's ranks are consecutive).
func Allreduce[T Number](c *Comm, sendbuf, recvbuf []T, op Op) error {
	cnt := len(sendbuf)
	if err := checkOp[T](op, cnt); err != nil {
		return err
	}
	if len(recvbuf) < cnt {
		return fmt.Errorf("%w: receive buffer of %d for %d elements", ErrArg, len(recvbuf), cnt)
	}
	recvbuf = recvbuf[:cnt]
	if c.inter != nil {
		return interAllreduce(c, sendbuf, recvbuf, op)
	}
	if ns, err := c.twoLevel(op.d.commute); err != nil {
		return err
	} else if ns != nil {
		return allreduceTwoLevel(c, ns, sendbuf, recvbuf, op)
	}
	n := len(c.group)
	large := cnt*sizeOf[T]() >= allreduceLarge
	if large && op.d.commute && cnt >= n*op.Unit() && n > 1 {
		// The reduce-scatter reads sendbuf in place and writes every
		// block of recvbuf that the allgather does not: no copy first.
		bl := unitBlocks(cnt, n, op.Unit())
		if err := ringReduceScatter(c, sendbuf, recvbuf, layout{b: bl}, op, tagAllreduce); err != nil {
			return err
		}
		return c.ringAllgather(asBytes(recvbuf), layout{b: blocks{cnt * sizeOf[T](), bl.bs * sizeOf[T]()}}, 0, tagAllreduce)
	}
	if !sameSlice(sendbuf, recvbuf) {
		copy(recvbuf, sendbuf)
	}
	if n == 1 {
		return nil
	}
	switch {
	case large && op.d.commute && cnt >= n*op.Unit():
		bl := unitBlocks(cnt, n, op.Unit())
		if err := ringReduceScatter(c, recvbuf, recvbuf, layout{b: bl}, op, tagAllreduce); err != nil {
			return err
		}
		return c.ringAllgather(asBytes(recvbuf), layout{b: blocks{cnt * sizeOf[T](), bl.bs * sizeOf[T]()}}, 0, tagAllreduce)
	case large && !op.d.commute:
		if err := reduceBinomial(c, recvbuf, recvbuf, op, 0); err != nil {
			return err
		}
		return Bcast(c, recvbuf, 0)
	}
	return allreduceRD(c, recvbuf, op)
}

// allreduceRD is recursive doubling on buf in place, preserving rank order.
func allreduceRD[T Number](c *Comm, buf []T, op Op) error {
	n, r := len(c.group), c.rank
	tmp := scratch[T](c, 0, len(buf))
	pof2 := 1
	for pof2*2 <= n {
		pof2 *= 2
	}
	rem := n - pof2
	newrank := r - rem
	if r < 2*rem {
		if r%2 == 0 {
			if err := c.csend(asBytes(buf), r+1, tagAllreduce); err != nil {
				return err
			}
			newrank = -1
		} else {
			if err := c.crecv(asBytes(tmp), r-1, tagAllreduce); err != nil {
				return err
			}
			combine(op, tmp, buf)
			newrank = r / 2
		}
	}
	if newrank >= 0 {
		for mask := 1; mask < pof2; mask <<= 1 {
			nd := newrank ^ mask
			dst := nd + rem
			if nd < rem {
				dst = nd*2 + 1
			}
			if err := c.csendrecv(asBytes(buf), dst, asBytes(tmp), dst, tagAllreduce); err != nil {
				return err
			}
			if nd < newrank {
				combine(op, tmp, buf)
			} else {
				accumulate(op, buf, tmp)
			}
		}
	}
	if r < 2*rem {
		if r%2 == 1 {
			return c.csend(asBytes(buf), r-1, tagAllreduce)
		}
		return c.crecv(asBytes(buf), r+1, tagAllreduce)
	}
	return nil
}
