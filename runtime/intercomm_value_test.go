package mpi

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
)

// interMsg is a value collectives' payload with a slice and a string, so
// the codec (gob) does real work.
type interMsg struct {
	From int
	Path []int
	Note string
}

// interValues: every value collective on an intercommunicator, with the
// roots in either group (Root on the root, ProcNull on the rest of its
// group, the root's remote rank in the other group).
func interValues(s interSide) error {
	ic, rn := s.ic, len(s.other)
	aLast, bLast := len(s.mine)-1, rn-1
	if !s.inA {
		aLast, bLast = rn-1, len(s.mine)-1
	}
	// BcastValue from A's last rank, then from B's rank 0.
	for _, root := range []struct {
		inA   bool
		local int
	}{{true, aLast}, {false, 0}} {
		v := interMsg{From: -1}
		if s.isRoot(root.inA, root.local) {
			v = interMsg{From: s.me, Path: []int{s.me, 7}, Note: "root"}
		}
		before := v
		if err := BcastValue(ic, &v, s.rootArg(root.inA, root.local)); err != nil {
			return fmt.Errorf("bcastvalue: %w", err)
		}
		switch {
		case s.inA != root.inA:
			w := s.other[root.local]
			if v.From != w || !slices.Equal(v.Path, []int{w, 7}) || v.Note != "root" {
				return fmt.Errorf("bcastvalue from remote %d: %+v", root.local, v)
			}
		case v.From != before.From || v.Note != before.Note:
			return fmt.Errorf("bcastvalue: the root's group changed: %+v, was %+v", v, before)
		}
	}
	// ScatterValue from B's last rank: A's rank q gets A's world rank q.
	var vals []string
	if s.isRoot(false, bLast) {
		for _, w := range s.other {
			vals = append(vals, "w"+strconv.Itoa(w))
		}
	}
	got, err := ScatterValue(ic, vals, s.rootArg(false, bLast))
	if err != nil {
		return fmt.Errorf("scattervalue: %w", err)
	}
	if want := "w" + strconv.Itoa(s.me); s.inA && got != want || !s.inA && got != "" {
		return fmt.Errorf("scattervalue: %q (in A %v)", got, s.inA)
	}
	// GatherValue at A's rank 0: B's members' values in B's rank order.
	all, err := GatherValue(ic, interMsg{From: s.me, Path: make([]int, s.me)}, s.rootArg(true, 0))
	if err != nil {
		return fmt.Errorf("gathervalue: %w", err)
	}
	if s.isRoot(true, 0) {
		if len(all) != rn {
			return fmt.Errorf("gathervalue: %d values from %d remote ranks", len(all), rn)
		}
		for q, m := range all {
			if m.From != s.other[q] || len(m.Path) != s.other[q] {
				return fmt.Errorf("gathervalue: value %d is %+v, want from %d", q, m, s.other[q])
			}
		}
	} else if all != nil {
		return fmt.Errorf("gathervalue off the root: %v, want nil", all)
	}
	// AllgatherValue: the remote group's values.
	ws, err := AllgatherValue(ic, s.me)
	if err != nil {
		return fmt.Errorf("allgathervalue: %w", err)
	}
	if !slices.Equal(ws, s.other) {
		return fmt.Errorf("allgathervalue: %v, want %v", ws, s.other)
	}
	// AlltoallValue: value q goes to remote rank q.
	out := make([][2]int, rn)
	for q := range out {
		out[q] = [2]int{s.me, s.other[q]}
	}
	in, err := AlltoallValue(ic, out)
	if err != nil {
		return fmt.Errorf("alltoallvalue: %w", err)
	}
	for q, p := range in {
		if p != [2]int{s.other[q], s.me} {
			return fmt.Errorf("alltoallvalue: from remote %d: %v, want [%d %d]", q, p, s.other[q], s.me)
		}
	}
	if len(in) != rn {
		return fmt.Errorf("alltoallvalue: %d values from %d remote ranks", len(in), rn)
	}
	// ReduceValue and AllreduceValue with a non-commutative fold: the
	// remote group's world ranks in its rank order.
	cat := func(a, b string) string { return a + "," + b }
	var want string
	for i, w := range s.other {
		if i > 0 {
			want += ","
		}
		want += strconv.Itoa(w)
	}
	r, err := ReduceValue(ic, strconv.Itoa(s.me), cat, s.rootArg(false, bLast))
	if err != nil {
		return fmt.Errorf("reducevalue: %w", err)
	}
	if s.isRoot(false, bLast) && r != want || !s.isRoot(false, bLast) && r != "" {
		return fmt.Errorf("reducevalue: %q, want %q at the root", r, want)
	}
	if r, err = AllreduceValue(ic, strconv.Itoa(s.me), cat); err != nil || r != want {
		return fmt.Errorf("allreducevalue: %q, %v; want %q", r, err, want)
	}
	return nil
}

// interValueErrors: a codec failure on one member of one group is
// ErrCodec on every member of both groups; bad arguments are errors, not
// hangs.
func interValueErrors(s interSide) error {
	ic, rn := s.ic, len(s.other)
	bad := !s.inA && ic.Rank() == 0 // B's rank 0 cannot encode its value
	var v any = 1
	if bad {
		v = struct{ C chan int }{}
	}
	if _, err := AllgatherValue(ic, v); !errors.Is(err, ErrCodec) {
		return fmt.Errorf("allgathervalue with an unencodable value on B's rank 0: %v, want ErrCodec", err)
	}
	if _, err := GatherValue(ic, v, s.rootArg(true, 0)); !errors.Is(err, ErrCodec) {
		return fmt.Errorf("gathervalue with an unencodable value on B's rank 0: %v, want ErrCodec", err)
	}
	// The communicator is still usable afterwards.
	if ws, err := AllgatherValue(ic, s.me); err != nil || !slices.Equal(ws, s.other) {
		return fmt.Errorf("allgathervalue after a codec error: %v, %v", ws, err)
	}
	// Local argument errors.
	if _, err := AlltoallValue(ic, make([]int, rn+1)); !errors.Is(err, ErrArg) {
		return fmt.Errorf("alltoallvalue with %d values for %d remote ranks: %v, want ErrArg", rn+1, rn, err)
	}
	// ScatterValue's root with the wrong count: ErrArg on every member
	// of both groups (the remote group would otherwise wait for ever).
	var vals []int
	if s.isRoot(true, 0) {
		vals = make([]int, rn+2)
	}
	if _, err := ScatterValue(ic, vals, s.rootArg(true, 0)); !errors.Is(err, ErrArg) {
		return fmt.Errorf("scattervalue with %d values for %d remote ranks: %v, want ErrArg", rn+2, rn, err)
	}
	x := 0
	if err := BcastValue(ic, &x, rn); !errors.Is(err, ErrRank) {
		return fmt.Errorf("bcastvalue root %d of a remote group of %d: %v, want ErrRank", rn, rn, err)
	}
	return nil
}

// TestInterCommValueColls: the value collectives on intercommunicators
// between unequal halves of 2..8 ranks, on every transport.
func TestInterCommValueColls(t *testing.T) {
	forInterWorlds(t, interSizes, func(t *testing.T, comms []*Comm) {
		each(t, comms, func(c *Comm) error {
			s, err := makeSide(c)
			if err != nil {
				return err
			}
			for _, f := range []func(interSide) error{interValues, interValueErrors, interValues} {
				if err := f(s); err != nil {
					return err
				}
			}
			return s.ic.Free()
		})
	})
}
