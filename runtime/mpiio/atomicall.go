package mpiio

import (
	"sort"

	mpi "github.com/gompi/gompi/runtime"
)

// tagTurn passes the turn of an ordered atomic collective write.
const tagTurn = 3

// overlapCheckMax bounds the pieces overlaps sorts: beyond it the call is
// taken as overlapping (the ordered write is correct either way, only
// slower), so that fine-grained views cannot make every rank hold every
// rank's pieces.
const overlapCheckMax = 1 << 20

// overlaps: some byte may be written by more than one rank's pieces of
// the collective call p describes (only computed in atomic mode). Disjoint
// spans settle it at once.
func overlaps(p *plan) bool {
	type rng struct{ lo, hi int64 }
	var spans []rng
	for r := range p.pos {
		if lo, hi := p.views[r].span(p.pos[r], p.n[r]); hi > lo {
			spans = append(spans, rng{lo, hi})
		}
	}
	if !overlapping(spans, func(x rng) (int64, int64) { return x.lo, x.hi }) {
		return false
	}
	var rs []rng
	for r := range p.pos {
		p.views[r].pieces(p.pos[r], p.n[r], 0, maxOff, func(off, _, l int64) bool {
			rs = append(rs, rng{off, off + l})
			return len(rs) <= overlapCheckMax
		})
		if len(rs) > overlapCheckMax {
			return true
		}
	}
	return overlapping(rs, func(x rng) (int64, int64) { return x.lo, x.hi })
}

// overlapping: two of the ranges overlap.
func overlapping[T any](rs []T, bounds func(T) (lo, hi int64)) bool {
	sort.Slice(rs, func(i, j int) bool {
		a, _ := bounds(rs[i])
		b, _ := bounds(rs[j])
		return a < b
	})
	for i := 1; i < len(rs); i++ {
		lo, _ := bounds(rs[i])
		if _, hi := bounds(rs[i-1]); lo < hi {
			return true
		}
	}
	return false
}

// orderedWrite is a collective write in atomic mode whose ranks' pieces
// overlap: each rank writes its pieces as an atomic independent write
// (under its range lock, through any cache), in rank order, each after
// the previous rank's returned. So the file is as if the ranks had written
// one after another (each overlapped byte is the highest writing rank's),
// as MPI's atomic mode asks. Two-phase aggregation (and the caches'
// independent flushers) received and wrote overlapping pieces of
// different ranks in whatever order they came: a byte range every rank
// wrote ended up part one rank's, part another's.
func (f *File) orderedWrite(op string, v *view, buf []byte, off int64) (int, error) {
	me, size := f.rank, f.comm.Size()
	turn := []byte{0}
	var err error
	if me > 0 {
		_, err = mpi.WaitAll(f.ctx, mpi.Irecv(f.comm, turn, me-1, tagTurn))
	}
	n := 0
	if err == nil {
		n, err = f.writeAt(v, true, false, buf, off)
	}
	if me < size-1 {
		// Passed on even after an error: the others must not wait for
		// ever; the agreement below fails the call on every rank.
		if _, serr := mpi.WaitAll(f.ctx, mpi.Isend(f.comm, turn, me+1, tagTurn)); err == nil {
			err = serr
		}
	}
	return n, f.agree(op, f.err(op, -1, err))
}
