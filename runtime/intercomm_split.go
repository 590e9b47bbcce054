package mpi

import (
	"fmt"
	"sort"
	"sync/atomic"
)

// Split and Dup of an intercommunicator (MPI_Comm_split and MPI_Comm_dup
// on an intercommunicator): the result is an intercommunicator between
// the local members and the remote members that passed the same color,
// each group ordered by key then by its rank in c. A member whose color
// is Undefined, or has no member in the other group, gets nil.
//
// The groups' rank 0s swap every member's entry (world rank, color, key,
// context id offer) as Merge does, so every member of both groups knows
// both sides' colors and takes the same context id from the same offers
// (one id serves every color: the new communicators are disjoint). Each
// group then splits its private duplicate by the colors that have
// members on both sides, which is the new intercommunicator's local
// group and private duplicate.

// tagInterSplit is the swap's tag on the intercommunicator and the
// entries' on its local duplicate.
const tagInterSplit = 44

func (c *Comm) interSplit(color, key int) (*Comm, error) {
	return c.interSplitCheck(color, key, 0, nil)
}

// interSplitCheck is interSplit with Create's check word and argument
// error (see split): the words must agree within each group (the groups
// pass different ones), else ErrArg naming the local rank that differs
// from rank 0, relayed to both groups as is argErr (every member of the
// group found the same one, as they passed the same group).
func (c *Comm) interSplitCheck(color, key int, check uint64, argErr error) (*Comm, error) {
	lc := c.inter.local
	badColor := func(entries [][]byte) (int, int, bool) {
		for r, e := range entries {
			if col := entryWord(e); col < 0 && col != Undefined {
				return r, col, true
			}
		}
		return 0, 0, false
	}
	sw := swapper{
		pre: func(local [][]byte) (bool, error) {
			if r, col, bad := badColor(local); bad {
				return true, fmt.Errorf("%w: Split: local rank %d passed color %d (want >= 0 or Undefined)", ErrArg, r, col)
			}
			for r, e := range local {
				if entryCheck(e) != entryCheck(local[0]) {
					return true, fmt.Errorf("%w: Create: local rank %d passed a different group from local rank 0's (every member of a group must pass the same group)", ErrArg, r)
				}
			}
			return true, argErr
		},
		swap: func(msg []byte) ([]byte, error) {
			rr := c.irecv(c.collCtx(), nil, 1, 0, tagInterSplit+c.tagOff, true)
			sr := c.cisend(msg, 0, tagInterSplit)
			err := c.waitReqs(rr, sr)
			return rr.data, err
		},
	}
	if lc.rank != 0 {
		sw = swapper{}
	}
	local, remote, err := sw.run(lc, 0, int64(color), int64(key), check, tagInterSplit)
	if err != nil {
		return nil, err
	}
	if len(remote) != len(c.group) || len(local) != len(lc.group) {
		return nil, fmt.Errorf("%w: Split: the groups' sizes disagree with the intercommunicator", ErrArg)
	}
	id, err := c.p.interCtx(sw, lc, 0, local, remote, tagInterSplit)
	if err != nil {
		return nil, err
	}
	// The remote members of this color, by key then remote rank.
	var peers []int
	for r, e := range remote {
		if color != Undefined && entryWord(e) == color {
			peers = append(peers, r)
		}
	}
	sort.SliceStable(peers, func(i, j int) bool { return entryKey(remote[peers[i]]) < entryKey(remote[peers[j]]) })
	// Local members whose color has no remote member join nothing; every
	// local member sees the same remote colors, so they agree on it.
	lcolor := color
	if len(peers) == 0 {
		lcolor = Undefined
	}
	nl, err := lc.Split(lcolor, key)
	if err != nil || nl == nil {
		return nil, err
	}
	ic := &Comm{p: c.p, ctx: id << 1, rank: nl.rank, group: make([]int, len(peers)), index: map[int]int{},
		freed: new(atomic.Bool), inter: &interState{local: nl}}
	for i, r := range peers {
		w := c.group[r]
		ic.group[i] = w
		ic.index[w] = i
	}
	ic.setInterScope()
	return ic, nil
}
