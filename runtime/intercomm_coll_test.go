package mpi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// interSide is one rank's view of an intercommunicator in the tests: its
// world rank and the world ranks of both groups in local rank order.
type interSide struct {
	ic          *Comm
	inA         bool
	me          int
	mine, other []int
}

// makeSide makes the intercommunicator of makeInter and c's side of it.
func makeSide(c *Comm) (interSide, error) {
	ic, inA, ga, gb, err := makeInter(c)
	if err != nil {
		return interSide{}, fmt.Errorf("create: %w", err)
	}
	s := interSide{ic: ic, inA: inA, me: c.Rank(), mine: ga, other: gb}
	if !inA {
		s.mine, s.other = gb, ga
	}
	return s, nil
}

// rootArg is the root argument of a rooted collective whose root is
// local rank rootLocal of group A (rootInA) or B.
func (s interSide) rootArg(rootInA bool, rootLocal int) int {
	switch {
	case s.inA != rootInA:
		return rootLocal
	case s.ic.Rank() == rootLocal:
		return Root
	}
	return ProcNull
}

func (s interSide) isRoot(rootInA bool, rootLocal int) bool {
	return s.inA == rootInA && s.ic.Rank() == rootLocal
}

// gapped returns displacements for counts with a gap of one element
// after each block, and the buffer length they need.
func gapped(counts []int) (displs []int, n int) {
	for _, k := range counts {
		displs = append(displs, n)
		n += k + 1
	}
	return displs, n
}

// checkGaps checks that buf holds want's blocks at displs and gap
// everywhere else (a v collective writes only the blocks).
func checkGaps[T Number](buf []T, counts, displs []int, gap T, want func(q, i int) T) error {
	in := make([]bool, len(buf))
	for q, k := range counts {
		for i := 0; i < k; i++ {
			in[displs[q]+i] = true
			if got := buf[displs[q]+i]; got != want(q, i) {
				return fmt.Errorf("block %d element %d: %v, want %v", q, i, got, want(q, i))
			}
		}
	}
	for j, v := range buf {
		if !in[j] && v != gap {
			return fmt.Errorf("element %d outside every block was written: %v", j, v)
		}
	}
	return nil
}

// interV: Gatherv at B's last rank and Scatterv from A's rank 0 (blocks
// of remote rank+1 elements, gapped), Allgatherv both packed and gapped.
func interV(s interSide) error {
	ic, rn := s.ic, len(s.other)
	counts := make([]int, rn)
	for q := range counts {
		counts[q] = q + 1
	}
	displs, n := gapped(counts)
	bLast := len(s.mine) - 1
	if s.inA {
		bLast = rn - 1
	}
	send := make([]int32, ic.Rank()+1)
	for i := range send {
		send[i] = int32(s.me*100 + i)
	}
	recv := slices.Repeat([]int32{-7}, n)
	if err := Gatherv(ic, send, recv, counts, displs, s.rootArg(false, bLast)); err != nil {
		return fmt.Errorf("gatherv: %w", err)
	}
	if s.isRoot(false, bLast) {
		if err := checkGaps(recv, counts, displs, -7, func(q, i int) int32 { return int32(s.other[q]*100 + i) }); err != nil {
			return fmt.Errorf("gatherv: %w", err)
		}
	}
	var sbuf []float64
	if s.isRoot(true, 0) {
		sbuf = make([]float64, n)
		for q, k := range counts {
			for i := 0; i < k; i++ {
				sbuf[displs[q]+i] = float64(s.other[q]*10 + i)
			}
		}
	}
	got := make([]float64, ic.Rank()+1)
	if err := Scatterv(ic, sbuf, counts, displs, got, s.rootArg(true, 0)); err != nil {
		return fmt.Errorf("scatterv: %w", err)
	}
	if !s.inA {
		for i, v := range got {
			if v != float64(s.me*10+i) {
				return fmt.Errorf("scatterv: %v, want %d*10+i", got, s.me)
			}
		}
	}
	// Allgatherv: local rank q sends q%3 elements (some send none).
	for _, packed := range []bool{true, false} {
		for q := range counts {
			counts[q] = q % 3
		}
		displs, n = gapped(counts)
		if packed {
			displs, n = nil, 0
			for _, k := range counts {
				n += k
			}
		}
		all := slices.Repeat([]int64{-7}, n)
		if err := Allgatherv(ic, make([]int64, ic.Rank()%3), all, counts, displs); err != nil {
			return fmt.Errorf("allgatherv: %w", err)
		}
		mine := make([]int64, ic.Rank()%3)
		for i := range mine {
			mine[i] = int64(s.me)
		}
		all = slices.Repeat([]int64{-7}, n)
		if err := Allgatherv(ic, mine, all, counts, displs); err != nil {
			return fmt.Errorf("allgatherv: %w", err)
		}
		if displs == nil {
			displs, _ = checkV(rn, counts, nil, n, "test")
		}
		if err := checkGaps(all, counts, displs, -7, func(q, i int) int64 { return int64(s.other[q]) }); err != nil {
			return fmt.Errorf("allgatherv (packed %v): %w", packed, err)
		}
	}
	return nil
}

// interA2A: Alltoall with small blocks and with blocks past the pairwise
// threshold, and Alltoallv whose counts depend on both ends' world ranks.
func interA2A(s interSide) error {
	ic, rn := s.ic, len(s.other)
	for _, k := range []int{2, alltoallLarge/8 + 1} {
		send, recv := make([]int64, rn*k), make([]int64, rn*k)
		for q := 0; q < rn; q++ {
			for i := 0; i < k; i++ {
				send[q*k+i] = int64(s.me*1000 + q*10 + i%10)
			}
		}
		if err := Alltoall(ic, send, recv); err != nil {
			return fmt.Errorf("alltoall of %d: %w", k, err)
		}
		for q := 0; q < rn; q++ {
			for i := 0; i < k; i++ {
				if want := int64(s.other[q]*1000 + ic.Rank()*10 + i%10); recv[q*k+i] != want {
					return fmt.Errorf("alltoall of %d: block %d element %d: %d, want %d", k, q, i, recv[q*k+i], want)
				}
			}
		}
	}
	for _, scale := range []int{1, alltoallLarge / 4} {
		cnt := func(a, b int) int { return (a + 2*b) % 4 * scale } // a sends to b
		sc, rc := make([]int, rn), make([]int, rn)
		for q, w := range s.other {
			sc[q], rc[q] = cnt(s.me, w), cnt(w, s.me)
		}
		sd, sn := gapped(sc)
		rd, rnb := gapped(rc)
		send, recv := make([]int32, sn), slices.Repeat([]int32{-7}, rnb)
		for q, w := range s.other {
			for i := 0; i < sc[q]; i++ {
				send[sd[q]+i] = int32(s.me*100 + w)
			}
		}
		if err := Alltoallv(ic, send, sc, sd, recv, rc, rd); err != nil {
			return fmt.Errorf("alltoallv: %w", err)
		}
		if err := checkGaps(recv, rc, rd, -7, func(q, i int) int32 { return int32(s.other[q]*100 + s.me) }); err != nil {
			return fmt.Errorf("alltoallv (scale %d): %w", scale, err)
		}
	}
	return nil
}

// interRedScat: ReduceScatter with 12 elements split unevenly over each
// group (some ranks get none), and ReduceScatterBlock with Size() blocks
// of RemoteSize() (so both groups reduce Size()*RemoteSize() elements).
func interRedScat(s interSide) error {
	ic := s.ic
	remoteSum := func(j int) int {
		sum := 0
		for _, w := range s.other {
			sum += w + j
		}
		return sum
	}
	const total = 12
	b := newBlocks(total, ic.Size())
	counts := make([]int, ic.Size())
	for i := range counts {
		lo, hi := b.at(i)
		counts[i] = hi - lo
	}
	send := make([]int, total)
	for j := range send {
		send[j] = s.me + j
	}
	recv := make([]int, counts[ic.Rank()])
	if err := ReduceScatter(ic, send, recv, counts, Sum); err != nil {
		return fmt.Errorf("reduce-scatter: %w", err)
	}
	lo, _ := b.at(ic.Rank())
	for i, v := range recv {
		if v != remoteSum(lo+i) {
			return fmt.Errorf("reduce-scatter: %v from %d, want the remote sums", recv, lo)
		}
	}
	k := ic.RemoteSize()
	send = make([]int, ic.Size()*k)
	for j := range send {
		send[j] = s.me + j
	}
	recv = make([]int, k)
	if err := ReduceScatterBlock(ic, send, recv, Sum); err != nil {
		return fmt.Errorf("reduce-scatter-block: %w", err)
	}
	for i, v := range recv {
		if v != remoteSum(ic.Rank()*k+i) {
			return fmt.Errorf("reduce-scatter-block: %v, want the remote sums from %d", recv, ic.Rank()*k)
		}
	}
	return nil
}

// interNB: Ialltoall beside an Igatherv and an IreduceScatterBlock, then
// Ialltoallv and Iallgatherv on a WithContext view.
func interNB(s interSide) error {
	ic, rn := s.ic, len(s.other)
	a2a := make([]int, rn)
	gv := make([]int, rn)
	rs := make([]int, rn)
	ones := slices.Repeat([]int{1}, rn)
	r1 := Ialltoall(ic, slices.Repeat([]int{s.me}, rn), a2a)
	r2 := Igatherv(ic, []int{s.me}, gv, ones, nil, s.rootArg(true, 0))
	r3 := IreduceScatterBlock(ic, slices.Repeat([]int{1}, ic.Size()*rn), rs, Sum)
	if _, err := WaitAll(context.Background(), r1, r2, r3); err != nil {
		return fmt.Errorf("non-blocking: %w", err)
	}
	if !slices.Equal(a2a, s.other) || s.isRoot(true, 0) && !slices.Equal(gv, s.other) || rs[0] != rn {
		return fmt.Errorf("Ialltoall %v, Igatherv %v (want %v), IreduceScatterBlock %v (want %d)", a2a, gv, s.other, rs, rn)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	v := ic.WithContext(ctx)
	av, ag := make([]int, rn), make([]int, rn)
	r4 := Ialltoallv(v, slices.Repeat([]int{s.me}, rn), ones, nil, av, ones, nil)
	r5 := Iallgatherv(v, []int{s.me}, ag, ones, nil)
	if _, err := WaitAll(ctx, r4, r5); err != nil {
		return fmt.Errorf("non-blocking with a context: %w", err)
	}
	if !slices.Equal(av, s.other) || !slices.Equal(ag, s.other) {
		return fmt.Errorf("Ialltoallv %v, Iallgatherv %v, want %v", av, ag, s.other)
	}
	return nil
}

// interVErrors: bad arguments are errors at once on the rank that passes
// them (nothing is sent, so the call needs no partner).
func interVErrors(s interSide) error {
	ic, rn := s.ic, len(s.other)
	buf := make([]int, 4*rn+4)
	for i, err := range []error{
		Alltoall(ic, buf[:2*rn], buf[2*rn:2*rn+1]),
		Alltoallv(ic, buf, make([]int, rn+1), nil, buf, make([]int, rn), nil),
		Allgatherv(ic, buf[:1], buf, make([]int, rn+1), nil),
		Gatherv(ic, buf[:1], buf[:1], slices.Repeat([]int{2}, rn), nil, Root),
		ReduceScatterBlock(ic, buf[:2*ic.Size()], buf[:1], Sum),
		ReduceScatter(ic, buf[:2], buf, make([]int, ic.Size()+1), Sum),
	} {
		if !errors.Is(err, ErrArg) {
			return fmt.Errorf("bad arguments %d: %v, want ErrArg", i, err)
		}
	}
	if err := Scatterv(ic, buf, nil, nil, buf, rn); !errors.Is(err, ErrRank) {
		return fmt.Errorf("Scatterv to remote rank %d of %d: %v, want ErrRank", rn, rn, err)
	}
	return nil
}

// TestInterCommCollV: the v variants, Alltoall(v) and ReduceScatter(Block)
// on intercommunicators between unequal halves of 2..8 ranks, on every
// transport, blocking, non-blocking and with a context; then ErrFreed after
// Free, ProcNull included.
func TestInterCommCollV(t *testing.T) {
	forInterWorlds(t, interSizes, func(t *testing.T, comms []*Comm) {
		each(t, comms, func(c *Comm) error {
			s, err := makeSide(c)
			if err != nil {
				return err
			}
			for _, f := range []func(interSide) error{interV, interA2A, interRedScat, interNB, interVErrors} {
				if err := f(s); err != nil {
					return err
				}
			}
			if err := s.ic.Free(); err != nil {
				return err
			}
			buf := make([]int, 1)
			for i, err := range []error{Gatherv(s.ic, buf, buf, nil, nil, ProcNull), Scatterv(s.ic, buf, nil, nil, buf, ProcNull),
				Alltoall(s.ic, buf, buf[:0]), ReduceScatterBlock(s.ic, buf, buf, Sum), Gather(s.ic, buf, buf, ProcNull)} {
				if !errors.Is(err, ErrFreed) {
					return fmt.Errorf("operation %d after Free: %v, want ErrFreed", i, err)
				}
			}
			return nil
		})
	})
}
