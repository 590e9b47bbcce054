package mpi

import (
	"errors"
	"fmt"
)

// Collectives on intercommunicators (MPI semantics): each group's result
// comes from the other group. Each runs within the local group on the
// private duplicate (inter.local, a view in the collective's own tag
// space for non-blocking ones and WithContext) and between the two
// groups' rank 0s on the intercommunicator's collective context; the v
// variants and Alltoall(v) go rank to rank on that context (the value
// collectives: intercomm_value.go). Scan and Exscan return ErrIntercomm
// (intraOnly), as MPI defines no intercommunicator Scan.

// Root is the root argument of Bcast, Reduce, Gather and Scatter on the
// root itself on an intercommunicator (MPI_ROOT); the other members of
// the root's group pass ProcNull, and the members of the other group pass
// the root's rank in their remote group.
const Root = -4

// interBarrier: the local group gathers (a barrier), rank 0s swap an
// empty message, and each rank 0 releases its group, so no member
// returns before every member of both groups entered.
func (c *Comm) interBarrier() error {
	lc := c.inter.local
	if err := lc.Barrier(); err != nil {
		return err
	}
	if lc.rank == 0 {
		if err := c.csendrecv(nil, 0, nil, 0, tagBarrier); err != nil {
			return err
		}
	}
	return lc.bcastBytes(nil, 0, tagBarrier)
}

// interBcast: the root sends to the other group's rank 0, which
// broadcasts within its group.
func interBcast[T Number](c *Comm, buf []T, root int) error {
	switch {
	case root == ProcNull:
		return nil
	case root == Root:
		return c.csend(asBytes(buf), 0, tagBcast)
	case root < 0 || root >= len(c.group):
		return fmt.Errorf("%w: root %d (remote group of %d; Root on the root, ProcNull on the rest of its group)", ErrRank, root, len(c.group))
	}
	lc := c.inter.local
	if lc.rank == 0 {
		if err := c.crecv(asBytes(buf), root, tagBcast); err != nil {
			return err
		}
	}
	return Bcast(lc, buf, 0)
}

// interAllreduce: each group reduces to its rank 0, the rank 0s swap
// their results, and each broadcasts the other group's within its group.
func interAllreduce[T Number](c *Comm, sendbuf, recvbuf []T, op Op) error {
	lc := c.inter.local
	var part []T
	if lc.rank == 0 {
		part = make([]T, len(sendbuf))
	}
	if err := Reduce(lc, sendbuf, part, op, 0); err != nil {
		return err
	}
	if lc.rank == 0 {
		if err := c.csendrecv(asBytes(part), 0, asBytes(recvbuf), 0, tagAllreduce); err != nil {
			return err
		}
	}
	return Bcast(lc, recvbuf, 0)
}

// interAllgather: each group gathers at its rank 0, the rank 0s swap the
// gathered blocks, and each broadcasts the other group's. The remote
// group's blocks may be longer or shorter than this group's (MPI lets the
// groups' send counts differ): rank 0 learns their length from the
// message and broadcasts it first, or -1 if they did not fit its recvbuf.
func interAllgather[T Number](c *Comm, sendbuf, recvbuf []T) error {
	lc := c.inter.local
	var part []T
	if lc.rank == 0 {
		part = make([]T, len(lc.group)*len(sendbuf))
	}
	if err := Gather(lc, sendbuf, part, 0); err != nil {
		return err
	}
	n := []int64{-1}
	var swapErr error
	if lc.rank == 0 {
		rr := c.cirecv(asBytes(recvbuf), sizeOf[T](), 0, tagAllgather)
		swapErr = c.waitReqs(rr, c.cisend(asBytes(part), 0, tagAllgather))
		if swapErr == nil {
			st, _ := rr.Wait(bg) // done: its status
			n[0] = int64(st.Count)
		}
	}
	if err := Bcast(lc, n, 0); err != nil {
		return errors.Join(swapErr, err)
	}
	switch {
	case swapErr != nil:
		return swapErr
	case n[0] < 0:
		return fmt.Errorf("%w: allgather: local rank 0 could not receive the remote group's blocks (its receive buffer of %d is too short?)", ErrTruncate, len(recvbuf))
	case n[0] > int64(len(recvbuf)):
		// Take part in the broadcast all the same, so the others finish.
		err := Bcast(lc, make([]T, n[0]), 0)
		return errors.Join(fmt.Errorf("%w: allgather: receive buffer of %d for the remote group's %d elements", ErrTruncate, len(recvbuf), n[0]), err)
	}
	return Bcast(lc, recvbuf[:n[0]], 0)
}

// interRooted sorts a rooted collective's root argument on an
// intercommunicator: Root (this rank is the root), ProcNull (the rest of
// the root's group: nothing to do), or a rank of the remote group.
func (c *Comm) interRooted(root int, what string) (isRoot, idle bool, err error) {
	switch {
	case root == Root:
		return true, false, nil
	case root == ProcNull:
		return false, true, c.errUsable()
	case root < 0 || root >= len(c.group):
		return false, false, fmt.Errorf("%w: %s: root %d (remote group of %d; Root on the root, ProcNull on the rest of its group)", ErrRank, what, root, len(c.group))
	}
	return false, false, nil
}

// interReduce: the other group reduces to its rank 0, which sends the
// result to the root (len(recvbuf) >= the other group's count there).
func interReduce[T Number](c *Comm, sendbuf, recvbuf []T, op Op, root int) error {
	return interCollect(c, recvbuf, root, "reduce", tagReduce, len(sendbuf), func(part []T) error {
		return Reduce(c.inter.local, sendbuf, part, op, 0)
	})
}

// interGather: the other group gathers at its rank 0, which sends the
// blocks to the root (recvbuf: RemoteSize() blocks there).
func interGather[T Number](c *Comm, sendbuf, recvbuf []T, root int) error {
	return interCollect(c, recvbuf, root, "gather", tagGather, len(c.inter.local.group)*len(sendbuf), func(part []T) error {
		return Gather(c.inter.local, sendbuf, part, 0)
	})
}

// interCollect is the shape of rooted collectives toward the root: the
// root receives recvbuf from the other group's rank 0, where collect (a
// collective of the local group) has left n elements in part.
func interCollect[T Number](c *Comm, recvbuf []T, root int, what string, tag, n int, collect func(part []T) error) error {
	isRoot, idle, err := c.interRooted(root, what)
	switch {
	case err != nil || idle:
		return err
	case isRoot:
		return c.crecv(asBytes(recvbuf), 0, tag)
	}
	var part []T
	if c.inter.local.rank == 0 {
		part = make([]T, n)
	}
	if err := collect(part); err != nil {
		return err
	}
	if c.inter.local.rank == 0 {
		return c.csend(asBytes(part), root, tag)
	}
	return nil
}

// interScatter: the root sends its RemoteSize() blocks to the other
// group's rank 0, which broadcasts whether they fitted (one word) and
// scatters them.
func interScatter[T Number](c *Comm, sendbuf, recvbuf []T, root int) error {
	isRoot, idle, err := c.interRooted(root, "scatter")
	switch {
	case err != nil || idle:
		return err
	case isRoot:
		return c.csend(asBytes(sendbuf), 0, tagScatter)
	}
	// Rank 0 tells its group how the root's message fitted before
	// scattering it: a failure there must fail every member (not leave
	// them waiting), and a short message must not pass as zeros.
	lc := c.inter.local
	var part []T
	st := []int64{0}
	var rerr error
	if lc.rank == 0 {
		part = make([]T, len(lc.group)*len(recvbuf))
		rr := c.cirecv(asBytes(part), sizeOf[T](), root, tagScatter)
		var s Status
		if s, rerr = c.wait(rr); rerr == nil {
			st[0] = int64(s.Count)
			if s.Count == Undefined { // not whole elements
				st[0] = -3
			}
		} else if errors.Is(rerr, ErrTruncate) {
			st[0] = -1
		} else {
			st[0] = -2
		}
	}
	if err := Bcast(lc, st, 0); err != nil {
		return errors.Join(rerr, err)
	}
	want := int64(len(lc.group) * len(recvbuf))
	switch {
	case rerr != nil:
		return rerr
	case st[0] == -1:
		return fmt.Errorf("%w: scatter: the root sent more than %d ranks x %d elements (local rank 0's receive)", ErrTruncate, len(lc.group), len(recvbuf))
	case st[0] == -3:
		return fmt.Errorf("%w: scatter: the root's message is not a whole number of elements", ErrArg)
	case st[0] < 0:
		return fmt.Errorf("scatter: local rank 0 failed to receive from root %d: %w", root, ErrMemberFailed)
	case st[0] != want:
		return fmt.Errorf("%w: scatter: the root sent %d elements for %d ranks x %d", ErrArg, st[0], len(lc.group), len(recvbuf))
	}
	return Scatter(lc, part, recvbuf, 0)
}

// interGatherv: the root receives counts[i] elements from remote rank i
// into recvbuf at displs[i] (counts and displs of RemoteSize() entries);
// every member of the other group sends its sendbuf straight to the root
// (a linear gather, as Gatherv's).
func interGatherv[T Number](c *Comm, sendbuf, recvbuf []T, counts, displs []int, root int) error {
	isRoot, idle, err := c.interRooted(root, "gatherv")
	switch {
	case err != nil || idle:
		return err
	case !isRoot:
		return c.csend(asBytes(sendbuf), root, tagGather)
	}
	rn := len(c.group)
	displs, err = checkV(rn, counts, displs, len(recvbuf), "gatherv")
	if err != nil {
		return err
	}
	reqs := c.startReqs()
	for i := 0; i < rn; i++ {
		reqs = append(reqs, c.cirecv(asBytes(recvbuf[displs[i]:displs[i]+counts[i]]), sizeOf[T](), i, tagGather))
	}
	return c.finishReqs(reqs)
}

// interScatterv: the root sends counts[i] elements of sendbuf at
// displs[i] to remote rank i (RemoteSize() entries), directly.
func interScatterv[T Number](c *Comm, sendbuf []T, counts, displs []int, recvbuf []T, root int) error {
	isRoot, idle, err := c.interRooted(root, "scatterv")
	switch {
	case err != nil || idle:
		return err
	case !isRoot:
		return c.crecv(asBytes(recvbuf), root, tagScatter)
	}
	rn := len(c.group)
	displs, err = checkV(rn, counts, displs, len(sendbuf), "scatterv")
	if err != nil {
		return err
	}
	reqs := c.startReqs()
	for i := 0; i < rn; i++ {
		reqs = append(reqs, c.cisend(asBytes(sendbuf[displs[i]:displs[i]+counts[i]]), i, tagScatter))
	}
	return c.finishReqs(reqs)
}

// interAllgatherv: counts and displs describe the remote group (as in
// MPI). Every rank sends its sendbuf to the other group's rank 0, which
// receives them packed (the counts it holds are the senders'), and
// broadcasts them within its group; each rank unpacks at its displs, so
// the gaps between blocks are not written.
func interAllgatherv[T Number](c *Comm, sendbuf, recvbuf []T, counts, displs []int) error {
	rn := len(c.group)
	displs, err := checkV(rn, counts, displs, len(recvbuf), "allgatherv")
	if err != nil {
		return err
	}
	packed, total := true, 0
	for i, k := range counts {
		packed = packed && displs[i] == total
		total += k
	}
	all := recvbuf[:total]
	if !packed {
		all = make([]T, total)
	}
	lc := c.inter.local
	reqs := c.startReqs()
	if lc.rank == 0 {
		off := 0
		for i, k := range counts {
			reqs = append(reqs, c.cirecv(asBytes(all[off:off+k]), sizeOf[T](), i, tagAllgather))
			off += k
		}
	}
	reqs = append(reqs, c.cisend(asBytes(sendbuf), 0, tagAllgather))
	if err := c.finishReqs(reqs); err != nil {
		return err
	}
	if err := Bcast(lc, all, 0); err != nil {
		return err
	}
	if !packed {
		off := 0
		for i, k := range counts {
			copy(recvbuf[displs[i]:], all[off:off+k])
			off += k
		}
	}
	return nil
}

// interAlltoall moves block i of sl to remote rank i and block i of rl
// from it. Small blocks are all posted at once; large ones go pairwise
// over max(local, remote size) steps (step s: send to rank+s, receive
// from rank-s, either absent when past the remote group's end), which
// pairs each send with the remote rank's receive of the same step and
// bounds the traffic in flight.
func interAlltoall[T Number](c *Comm, sendbuf []T, sl layout, recvbuf []T, rl layout) error {
	rn, r := len(c.group), c.rank
	if max(sl.maxBlock(rn), rl.maxBlock(rn))*sizeOf[T]() < alltoallLarge {
		reqs := c.startReqs()
		for i := 0; i < rn; i++ {
			lo, hi := rl.at(i)
			reqs = append(reqs, c.cirecv(asBytes(recvbuf[lo:hi]), sizeOf[T](), i, tagAlltoall))
		}
		for s := 0; s < rn; s++ {
			dst := (r + s) % rn
			lo, hi := sl.at(dst)
			reqs = append(reqs, c.cisend(asBytes(sendbuf[lo:hi]), dst, tagAlltoall))
		}
		return c.finishReqs(reqs)
	}
	m := max(rn, c.Size())
	for s := 0; s < m; s++ {
		var sr, rr *Request
		if src := mod(r-s, m); src < rn {
			lo, hi := rl.at(src)
			rr = c.cirecv(asBytes(recvbuf[lo:hi]), sizeOf[T](), src, tagAlltoall)
		}
		if dst := (r + s) % m; dst < rn {
			lo, hi := sl.at(dst)
			sr = c.cisend(asBytes(sendbuf[lo:hi]), dst, tagAlltoall)
		}
		if err := c.waitReqs(rr, sr); err != nil {
			return err
		}
	}
	return nil
}

// interReduceScatter: each group reduces its sendbufs to its rank 0, the
// rank 0s swap the results, and each scatters the other group's result
// within its group by counts (Size() entries: the local group's shares).
// Both groups' totals must agree (else ErrTruncate on a rank 0).
func interReduceScatter[T Number](c *Comm, sendbuf, recvbuf []T, counts, displs []int, op Op) error {
	lc := c.inter.local
	var part, theirs []T
	if lc.rank == 0 {
		part, theirs = make([]T, len(sendbuf)), make([]T, len(sendbuf))
	}
	if err := Reduce(lc, sendbuf, part, op, 0); err != nil {
		return err
	}
	if lc.rank == 0 {
		if err := c.csendrecv(asBytes(part), 0, asBytes(theirs), 0, tagRedScat); err != nil {
			return err
		}
	}
	return Scatterv(lc, theirs, counts, displs, recvbuf, 0)
}
