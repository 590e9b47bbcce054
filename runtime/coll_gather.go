package mpi

import "fmt"

// Data-movement collectives: scatter, gather, allgather, alltoall and their
// "v" variants with per-rank counts and displacements (in elements).

// checkV validates per-rank counts and displacements against a buffer of
// size elements. Nil displs means packed (rank i starts after rank i-1),
// in which case a packed copy is returned.
func checkV(n int, counts, displs []int, size int, what string) ([]int, error) {
	if len(counts) != n {
		return nil, fmt.Errorf("%w: %s: %d counts for %d ranks", ErrArg, what, len(counts), n)
	}
	if displs == nil {
		displs = make([]int, n)
		off := 0
		for i, k := range counts {
			displs[i] = off
			off += max(k, 0)
		}
	}
	if len(displs) != n {
		return nil, fmt.Errorf("%w: %s: %d displacements for %d ranks", ErrArg, what, len(displs), n)
	}
	for i := range counts {
		if counts[i] < 0 || displs[i] < 0 || displs[i]+counts[i] > size {
			return nil, fmt.Errorf("%w: %s: rank %d count %d at %d outside buffer of %d", ErrArg, what, i, counts[i], displs[i], size)
		}
	}
	return displs, nil
}

// Scatter sends the i-th block of len(recvbuf) elements of root's sendbuf
// to rank i's recvbuf. sendbuf (root only; len >= Size()*len(recvbuf)) is
// ignored elsewhere. Root sends to every rank directly (a linear scatter:
// the root's links are the bottleneck either way).
// On an intercommunicator the root (Root) sends its whole sendbuf, which
// must be RemoteSize() blocks of the other group's len(recvbuf): a longer
// one is ErrTruncate, a shorter one ErrArg, on every member of that group.
func Scatter[T Number](c *Comm, sendbuf, recvbuf []T, root int) error {
	if c.inter != nil {
		return interScatter(c, sendbuf, recvbuf, root)
	}
	if err := c.checkRoot(root); err != nil {
		return err
	}
	n, k := len(c.group), len(recvbuf)
	if c.rank == root && len(sendbuf) < n*k {
		return fmt.Errorf("%w: scatter: send buffer of %d for %d ranks x %d", ErrArg, len(sendbuf), n, k)
	}
	if ns, err := c.twoLevel(true); err != nil {
		return err
	} else if ns != nil {
		return scatterTwoLevel(c, ns, sendbuf, recvbuf, root)
	}
	if c.rank != root {
		return c.crecv(asBytes(recvbuf), root, tagScatter)
	}
	reqs := c.startReqs()
	for i := 0; i < n; i++ {
		if i != root {
			reqs = append(reqs, c.cisend(asBytes(sendbuf[i*k:(i+1)*k]), i, tagScatter))
		}
	}
	copy(recvbuf, sendbuf[root*k:(root+1)*k])
	return c.finishReqs(reqs)
}

// Scatterv sends counts[i] elements of root's sendbuf starting at
// displs[i] to rank i (displs nil: packed in rank order). sendbuf, counts
// and displs are used at root only; every rank's recvbuf must hold its
// count. On an intercommunicator, root is Root on the root, ProcNull on
// the rest of its group and the root's remote rank on the other group,
// whose RemoteSize() ranks counts and displs describe.
func Scatterv[T Number](c *Comm, sendbuf []T, counts, displs []int, recvbuf []T, root int) error {
	if err := c.errUsable(); err != nil {
		return err
	}
	if c.inter != nil {
		return interScatterv(c, sendbuf, counts, displs, recvbuf, root)
	}
	if err := c.checkRoot(root); err != nil {
		return err
	}
	n := len(c.group)
	if c.rank != root {
		return c.crecv(asBytes(recvbuf), root, tagScatter)
	}
	displs, err := checkV(n, counts, displs, len(sendbuf), "scatterv")
	if err != nil {
		return err
	}
	if len(recvbuf) < counts[root] {
		return fmt.Errorf("%w: scatterv: receive buffer of %d for %d", ErrArg, len(recvbuf), counts[root])
	}
	reqs := c.startReqs()
	for i := 0; i < n; i++ {
		if i != root {
			reqs = append(reqs, c.cisend(asBytes(sendbuf[displs[i]:displs[i]+counts[i]]), i, tagScatter))
		}
	}
	copy(recvbuf, sendbuf[displs[root]:displs[root]+counts[root]])
	return c.finishReqs(reqs)
}

// Gather collects every rank's sendbuf (equal lengths) into root's recvbuf
// in rank order (len >= Size()*len(sendbuf); ignored elsewhere). Root posts
// every receive at once (linear gather).
func Gather[T Number](c *Comm, sendbuf, recvbuf []T, root int) error {
	if c.inter != nil {
		return interGather(c, sendbuf, recvbuf, root)
	}
	if err := c.checkRoot(root); err != nil {
		return err
	}
	n, k := len(c.group), len(sendbuf)
	if c.rank == root && len(recvbuf) < n*k {
		return fmt.Errorf("%w: gather: receive buffer of %d for %d ranks x %d", ErrArg, len(recvbuf), n, k)
	}
	if ns, err := c.twoLevel(true); err != nil {
		return err
	} else if ns != nil {
		return gatherTwoLevel(c, ns, sendbuf, recvbuf, root)
	}
	if c.rank != root {
		return c.csend(asBytes(sendbuf), root, tagGather)
	}
	if len(recvbuf) < n*k {
		return fmt.Errorf("%w: gather: receive buffer of %d for %d ranks x %d", ErrArg, len(recvbuf), n, k)
	}
	reqs := c.startReqs()
	for i := 0; i < n; i++ {
		if i != root {
			reqs = append(reqs, c.cirecv(asBytes(recvbuf[i*k:(i+1)*k]), sizeOf[T](), i, tagGather))
		}
	}
	copy(recvbuf[root*k:], sendbuf)
	return c.finishReqs(reqs)
}

// Gatherv collects counts[i] elements from rank i into root's recvbuf at
// displs[i] (displs nil: packed in rank order). recvbuf, counts and displs
// are used at root only. A rank sending more than its count gets
// ErrTruncate at root. On an intercommunicator, root is as Scatterv's and
// the root receives from the RemoteSize() ranks of the other group.
func Gatherv[T Number](c *Comm, sendbuf, recvbuf []T, counts, displs []int, root int) error {
	if err := c.errUsable(); err != nil {
		return err
	}
	if c.inter != nil {
		return interGatherv(c, sendbuf, recvbuf, counts, displs, root)
	}
	if err := c.checkRoot(root); err != nil {
		return err
	}
	n := len(c.group)
	if c.rank != root {
		return c.csend(asBytes(sendbuf), root, tagGather)
	}
	displs, err := checkV(n, counts, displs, len(recvbuf), "gatherv")
	if err != nil {
		return err
	}
	if len(sendbuf) > counts[root] {
		return fmt.Errorf("%w: gatherv: root sends %d, count %d", ErrTruncate, len(sendbuf), counts[root])
	}
	reqs := c.startReqs()
	for i := 0; i < n; i++ {
		if i != root {
			reqs = append(reqs, c.cirecv(asBytes(recvbuf[displs[i]:displs[i]+counts[i]]), sizeOf[T](), i, tagGather))
		}
	}
	copy(recvbuf[displs[root]:], sendbuf)
	return c.finishReqs(reqs)
}

// Allgather collects every rank's sendbuf (equal lengths k) into every
// rank's recvbuf in rank order (len >= Size()*k). Recursive doubling
// (log2 n exchanges of doubling size) for power-of-two sizes below 64 KiB
// gathered; otherwise a ring (n-1 exchanges of one block). On an
// intercommunicator recvbuf receives the remote group's blocks in its rank
// order; their length is the remote group's k, which may differ from this
// group's (as MPI's recvcount may differ from sendcount there). A recvbuf
// shorter than RemoteSize() of them is ErrTruncate on every member of the
// group.
func Allgather[T Number](c *Comm, sendbuf, recvbuf []T) error {
	if c.inter != nil {
		return interAllgather(c, sendbuf, recvbuf)
	}
	n, k, r := len(c.group), len(sendbuf), c.rank
	if len(recvbuf) < n*k {
		return fmt.Errorf("%w: allgather: receive buffer of %d for %d ranks x %d", ErrArg, len(recvbuf), n, k)
	}
	if !sameSlice(sendbuf, recvbuf[r*k:]) {
		copy(recvbuf[r*k:], sendbuf)
	}
	if ns, err := c.twoLevel(true); err != nil {
		return err
	} else if ns != nil {
		return allgatherTwoLevel(c, ns, sendbuf, recvbuf)
	}
	b := asBytes(recvbuf[:n*k])
	kb := k * sizeOf[T]()
	if n&(n-1) == 0 && len(b) < allgatherLarge {
		for mask := 1; mask < n; mask <<= 1 {
			p := r ^ mask
			mine, theirs := (r&^(mask-1))*kb, (p&^(mask-1))*kb
			if err := c.csendrecv(b[mine:mine+mask*kb], p, b[theirs:theirs+mask*kb], p, tagAllgather); err != nil {
				return err
			}
		}
		return nil
	}
	return c.ringAllgather(b, layout{b: blocks{len(b), kb}}, 0, tagAllgather)
}

// Allgatherv collects counts[i] elements from rank i into every rank's
// recvbuf at displs[i] (displs nil: packed in rank order), along a ring.
// len(sendbuf) must equal counts[Rank()]. On an intercommunicator, counts
// and displs describe the remote group, whose blocks recvbuf receives.
func Allgatherv[T Number](c *Comm, sendbuf, recvbuf []T, counts, displs []int) error {
	if err := c.errUsable(); err != nil {
		return err
	}
	if c.inter != nil {
		return interAllgatherv(c, sendbuf, recvbuf, counts, displs)
	}
	n, r := len(c.group), c.rank
	displs, err := checkV(n, counts, displs, len(recvbuf), "allgatherv")
	if err != nil {
		return err
	}
	if len(sendbuf) != counts[r] {
		return fmt.Errorf("%w: allgatherv: sending %d, count %d", ErrArg, len(sendbuf), counts[r])
	}
	if !sameSlice(sendbuf, recvbuf[displs[r]:]) {
		copy(recvbuf[displs[r]:], sendbuf)
	}
	return c.ringAllgather(asBytes(recvbuf), layout{counts: counts, displs: displs, elem: sizeOf[T]()}, 0, tagAllgather)
}

// Alltoall sends block i (of k = len(sendbuf)/Size() elements) of sendbuf
// to rank i, which stores it as block Rank() of its recvbuf. Blocks below
// 1 KiB go in two levels through the host leaders when c spans hosts
// (coll_node_a2a.go); otherwise blocks below 32 KiB are all posted at
// once, and larger ones go by pairwise exchange (step s sends to rank+s
// and receives from rank-s), which bounds the traffic in flight. On an
// intercommunicator, block i goes to and comes from remote rank i (k =
// len(sendbuf)/RemoteSize() both ways; groups whose blocks differ in size
// use Alltoallv).
func Alltoall[T Number](c *Comm, sendbuf, recvbuf []T) error {
	if err := c.errUsable(); err != nil {
		return err
	}
	n := len(c.group) // the remote group's size on an intercommunicator
	if len(sendbuf)%n != 0 {
		return fmt.Errorf("%w: alltoall: send buffer of %d not a multiple of %d ranks", ErrArg, len(sendbuf), n)
	}
	k := len(sendbuf) / n
	if len(recvbuf) < n*k {
		return fmt.Errorf("%w: alltoall: receive buffer of %d for %d", ErrArg, len(recvbuf), n*k)
	}
	if sameSlice(sendbuf, recvbuf) {
		return fmt.Errorf("%w: alltoall: send and receive buffers overlap", ErrArg)
	}
	l := layout{b: blocks{n * k, k}}
	if c.inter != nil {
		return interAlltoall(c, sendbuf, l, recvbuf, l)
	}
	if k*sizeOf[T]() < alltoallNodeLarge {
		if ns, err := c.twoLevel(true); err != nil {
			return err
		} else if ns != nil {
			return alltoallTwoLevel(c, ns, sendbuf, l, recvbuf, l, true)
		}
	}
	return alltoall(c, sendbuf, l, recvbuf, l)
}

// Alltoallv sends sendcounts[i] elements of sendbuf at sdispls[i] to rank
// i, and receives recvcounts[i] elements from rank i into recvbuf at
// rdispls[i] (nil displacements: packed in rank order). recvcounts[i] must
// match what rank i sends here (more gives ErrTruncate). On an
// intercommunicator, the counts and displacements are of the remote
// group's ranks.
func Alltoallv[T Number](c *Comm, sendbuf []T, sendcounts, sdispls []int, recvbuf []T, recvcounts, rdispls []int) error {
	if err := c.errUsable(); err != nil {
		return err
	}
	n := len(c.group) // the remote group's size on an intercommunicator
	sdispls, err := checkV(n, sendcounts, sdispls, len(sendbuf), "alltoallv send")
	if err != nil {
		return err
	}
	rdispls, err = checkV(n, recvcounts, rdispls, len(recvbuf), "alltoallv receive")
	if err != nil {
		return err
	}
	if c.inter != nil {
		return interAlltoall(c, sendbuf, layout{counts: sendcounts, displs: sdispls, elem: 1}, recvbuf, layout{counts: recvcounts, displs: rdispls, elem: 1})
	}
	if sendcounts[c.rank] != recvcounts[c.rank] {
		return fmt.Errorf("%w: alltoallv: sending %d to self, receiving %d", ErrArg, sendcounts[c.rank], recvcounts[c.rank])
	}
	sl, rl := layout{counts: sendcounts, displs: sdispls, elem: 1}, layout{counts: recvcounts, displs: rdispls, elem: 1}
	if ns, err := c.nodes(); err != nil {
		return err
	} else if ns.twoLevel {
		// Every rank must take the same path: agree on the largest block.
		big := []int64{int64(max(sl.maxBlock(n), rl.maxBlock(n)) * sizeOf[T]())}
		if err := Allreduce(c, big, big, Max); err != nil {
			return err
		}
		if big[0] < int64(alltoallNodeLarge) {
			ns.used.Add(1)
			return alltoallTwoLevel(c, ns, sendbuf, sl, recvbuf, rl, false)
		}
	}
	return alltoall(c, sendbuf, sl, recvbuf, rl)
}

// alltoall moves block i of sl to rank i, into block rank of rl (element
// offsets).
func alltoall[T Number](c *Comm, sendbuf []T, sl layout, recvbuf []T, rl layout) error {
	n, r := len(c.group), c.rank
	lo, hi := sl.at(r)
	rlo, _ := rl.at(r)
	copy(recvbuf[rlo:], sendbuf[lo:hi])
	big := 0
	for i := 0; i < n; i++ {
		lo, hi := sl.at(i)
		big = max(big, hi-lo)
	}
	if big*sizeOf[T]() < alltoallLarge {
		reqs := c.startReqs()
		for s := 1; s < n; s++ {
			src := mod(r-s, n)
			lo, hi := rl.at(src)
			reqs = append(reqs, c.cirecv(asBytes(recvbuf[lo:hi]), sizeOf[T](), src, tagAlltoall))
		}
		for s := 1; s < n; s++ {
			dst := (r + s) % n
			lo, hi := sl.at(dst)
			reqs = append(reqs, c.cisend(asBytes(sendbuf[lo:hi]), dst, tagAlltoall))
		}
		return c.finishReqs(reqs)
	}
	for s := 1; s < n; s++ {
		dst, src := (r+s)%n, mod(r-s, n)
		slo, shi := sl.at(dst)
		rlo, rhi := rl.at(src)
		if err := c.csendrecv(asBytes(sendbuf[slo:shi]), dst, asBytes(recvbuf[rlo:rhi]), src, tagAlltoall); err != nil {
			return err
		}
	}
	return nil
}
