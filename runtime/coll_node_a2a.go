package mpi

// Node-aware Alltoall and Alltoallv. With small blocks an all-to-all is
// bound by its message count: n*(n-1) messages, most of them across hosts
// when hosts hold several ranks. In two levels each rank hands its whole
// send buffer to its host's leader (one message), the leaders exchange one
// message per pair of hosts carrying every block between the two hosts,
// and each leader hands each of its ranks everything addressed to it (one
// message). Cross-host messages drop from n*(n-n/H) to H*(H-1) for H
// hosts, at the price of three local copies of the data and of funnelling
// a host's traffic through one rank; so large blocks keep the flat
// algorithm (all-posted or pairwise), whose cross-host traffic is spread
// over every rank.

// alltoallNodeLarge: Alltoall(v) runs in two levels when the largest
// block (over every rank, for Alltoallv) is below this many bytes.
var alltoallNodeLarge = 1 << 10

// alltoallTwoLevel moves block d of sl (element offsets in sendbuf) to
// rank d, into block c.rank of rl, through the host leaders. uniform says
// every block of every rank has the same count (Alltoall), so no counts
// are exchanged.
func alltoallTwoLevel[T Number](c *Comm, ns *nodeState, sendbuf []T, sl layout, recvbuf []T, rl layout, uniform bool) error {
	n := len(c.group)
	members := ns.members()
	mine := members[ns.nodeOf[c.rank]]
	lead := ns.leader != nil
	size := func(l layout, i int) int { lo, hi := l.at(i); return hi - lo }

	// The leader learns its ranks' send counts (row j: member j's count
	// to every rank) and receive counts (from every rank).
	scnt, rcnt := make([][]int, len(mine)), make([][]int, len(mine))
	if uniform {
		k := size(sl, 0)
		row := make([]int, n)
		for i := range row {
			row[i] = k
		}
		for j := range mine {
			scnt[j], rcnt[j] = row, row
		}
	} else {
		row := make([]int64, 2*n)
		for i := 0; i < n; i++ {
			row[i], row[n+i] = int64(size(sl, i)), int64(size(rl, i))
		}
		var all []int64
		if lead {
			all = make([]int64, len(mine)*2*n)
		}
		if err := Gather(ns.node, row, all, 0); err != nil {
			return err
		}
		if lead {
			for j := range mine {
				scnt[j], rcnt[j] = make([]int, n), make([]int, n)
				for i := 0; i < n; i++ {
					scnt[j][i], rcnt[j][i] = int(all[j*2*n+i]), int(all[j*2*n+n+i])
				}
			}
		}
	}

	// Each rank packs its blocks by destination host, then destination
	// rank within the host, and the host gathers them at its leader.
	out := 0
	for d := 0; d < n; d++ {
		out += size(sl, d)
	}
	packed := make([]T, 0, out)
	for _, m := range members {
		for _, d := range m {
			lo, hi := sl.at(d)
			packed = append(packed, sendbuf[lo:hi]...)
		}
	}
	var hostbuf []T
	var gcounts []int
	if lead {
		gcounts = make([]int, len(mine))
		tot := 0
		for j := range mine {
			for d := 0; d < n; d++ {
				gcounts[j] += scnt[j][d]
			}
			tot += gcounts[j]
		}
		hostbuf = make([]T, tot)
	}
	if err := Gatherv(ns.node, packed, hostbuf, gcounts, nil, 0); err != nil {
		return err
	}

	// The leaders exchange one message per pair of hosts: to host g, for
	// each of this host's ranks s, its blocks for g's ranks in order.
	var scatter []T
	var scounts []int
	if lead {
		H := len(members)
		// off[j]: where member j's blocks for host g start in hostbuf.
		off := make([]int, len(mine))
		for j := 1; j < len(mine); j++ {
			off[j] = off[j-1] + gcounts[j-1]
		}
		hcount, rhost := make([]int, H), make([]int, H)
		toHosts := make([]T, 0, len(hostbuf))
		for g, m := range members {
			for j := range mine {
				w := 0
				for _, d := range m {
					w += scnt[j][d]
				}
				toHosts = append(toHosts, hostbuf[off[j]:off[j]+w]...)
				off[j] += w
				hcount[g] += w
			}
			for j := range mine {
				for _, s := range m {
					rhost[g] += rcnt[j][s]
				}
			}
		}
		in := 0
		for _, k := range rhost {
			in += k
		}
		fromHosts := make([]T, in)
		if err := Alltoallv(ns.leader, toHosts, hcount, nil, fromHosts, rhost, nil); err != nil {
			return err
		}
		// From host h came, for each s of h, s's blocks for this host's
		// ranks in order; regroup them by destination rank (sources in
		// host order, then rank order within the host).
		scounts = make([]int, len(mine))
		for j := range mine {
			for s := 0; s < n; s++ {
				scounts[j] += rcnt[j][s]
			}
		}
		sdispls := make([]int, len(mine))
		for j := 1; j < len(mine); j++ {
			sdispls[j] = sdispls[j-1] + scounts[j-1]
		}
		scatter = make([]T, len(fromHosts))
		next := append([]int(nil), sdispls...)
		at := 0
		for _, m := range members {
			for _, s := range m {
				for j := range mine {
					k := rcnt[j][s]
					copy(scatter[next[j]:next[j]+k], fromHosts[at:at+k])
					next[j] += k
					at += k
				}
			}
		}
	}
	in := 0
	for s := 0; s < n; s++ {
		in += size(rl, s)
	}
	mineIn := make([]T, in)
	if err := Scatterv(ns.node, scatter, scounts, nil, mineIn, 0); err != nil {
		return err
	}
	at := 0
	for _, m := range members {
		for _, s := range m {
			lo, hi := rl.at(s)
			at += copy(recvbuf[lo:hi], mineIn[at:at+hi-lo])
		}
	}
	return nil
}
