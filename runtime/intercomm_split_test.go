package mpi

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// interDupCheck: Dup of an intercommunicator is an intercommunicator
// between the same groups with its own message space.
func interDupCheck(s interSide) error {
	d, err := s.ic.Dup()
	if err != nil {
		return fmt.Errorf("dup: %w", err)
	}
	if err := checkShape(d, s.inA, pick(s, true), pick(s, false), s.me); err != nil {
		return fmt.Errorf("dup: %w", err)
	}
	// The same envelope on both: each receive matches its own.
	if s.ic.Rank() == 0 {
		for i, cm := range []*Comm{s.ic, d} {
			if err := Send(cm, []int{i}, 0, 5); err != nil {
				return err
			}
		}
		got := make([]int, 1)
		for _, i := range []int{1, 0} {
			if _, err := Recv([]*Comm{s.ic, d}[i], got, 0, 5); err != nil || got[0] != i {
				return fmt.Errorf("dup: message on communicator %d: %v, %v", i, got, err)
			}
		}
	}
	ws, err := AllgatherValue(d, s.me)
	if err != nil || !slices.Equal(ws, s.other) {
		return fmt.Errorf("dup: allgathervalue %v, %v; want %v", ws, err, s.other)
	}
	return d.Free()
}

// pick returns the world ranks of group A (a) or B, in local rank order.
func pick(s interSide, a bool) []int {
	if s.inA == a {
		return s.mine
	}
	return s.other
}

// interSplitCheck: Split by world rank parity, keyed in reverse, with the
// last world rank Undefined: each side of a color gets an
// intercommunicator between its members of that color, and a color
// missing on one side is nil on the other.
func interSplitCheck(s interSide) error {
	n := len(s.mine) + len(s.other)
	colorOf := func(w int) int {
		if w == n-1 {
			return Undefined
		}
		return w % 2
	}
	sel := func(ws []int, col int) []int {
		var out []int
		for _, w := range ws {
			if colorOf(w) == col {
				out = append(out, w)
			}
		}
		slices.Sort(out)
		slices.Reverse(out) // key -w: descending world rank
		return out
	}
	col := colorOf(s.me)
	sc, err := s.ic.Split(col, -s.me)
	if err != nil {
		return fmt.Errorf("split: %w", err)
	}
	lw, rw := sel(s.mine, col), sel(s.other, col)
	if col == Undefined || len(rw) == 0 {
		if sc != nil {
			return fmt.Errorf("split color %d (remote members %v): got a communicator, want nil", col, rw)
		}
		return nil
	}
	if sc == nil {
		return fmt.Errorf("split color %d: nil, want local %v remote %v", col, lw, rw)
	}
	inA := s.inA
	ga, gb := lw, rw
	if !inA {
		ga, gb = rw, lw
	}
	if err := checkShape(sc, inA, ga, gb, s.me); err != nil {
		return fmt.Errorf("split color %d: %w", col, err)
	}
	cat := func(a, b string) string { return a + "," + b }
	var want []string
	for _, w := range rw {
		want = append(want, fmt.Sprint(w))
	}
	if r, err := AllreduceValue(sc, fmt.Sprint(s.me), cat); err != nil || r != strings.Join(want, ",") {
		return fmt.Errorf("split color %d: allreducevalue %q, %v; want %q", col, r, err, strings.Join(want, ","))
	}
	// Split of the split (Dup again): still the same groups.
	d, err := sc.Dup()
	if err != nil {
		return fmt.Errorf("dup of split: %w", err)
	}
	if err := checkShape(d, inA, ga, gb, s.me); err != nil {
		return fmt.Errorf("dup of split: %w", err)
	}
	if err := d.Barrier(); err != nil {
		return err
	}
	if err := d.Free(); err != nil {
		return err
	}
	return sc.Free()
}

// interSplitBadColor: a bad color on B's rank 0 is ErrArg on every member
// of both groups, and the intercommunicator stays usable.
func interSplitBadColor(s interSide) error {
	col := 0
	if !s.inA && s.ic.Rank() == 0 {
		col = -5
	}
	if _, err := s.ic.Split(col, 0); !errors.Is(err, ErrArg) || !strings.Contains(err.Error(), "color -5") {
		return fmt.Errorf("split with color -5 on B's rank 0: %v, want ErrArg naming it", err)
	}
	return s.ic.Barrier()
}

// TestInterCommSplitDup: Dup and Split of intercommunicators between
// unequal halves of 2..8 ranks, on every transport.
func TestInterCommSplitDup(t *testing.T) {
	forInterWorlds(t, interSizes, func(t *testing.T, comms []*Comm) {
		each(t, comms, func(c *Comm) error {
			s, err := makeSide(c)
			if err != nil {
				return err
			}
			for _, f := range []func(interSide) error{interDupCheck, interSplitCheck, interSplitBadColor, interSplitCheck} {
				if err := f(s); err != nil {
					return err
				}
			}
			return s.ic.Free()
		})
	})
}

// interCreateCheck: Create on an intercommunicator: each group passes a
// subgroup of its own (its even world ranks, in reverse), the result
// joins the two subgroups (nil outside them, or when the other side's is
// empty); a member passing another group than its group's rank 0, or a
// group with a non-member, is ErrArg on every member of both groups.
func interCreateCheck(s interSide) error {
	evens := func(ws []int) []int {
		var out []int
		for _, w := range ws {
			if w%2 == 0 {
				out = append(out, w)
			}
		}
		slices.Reverse(out)
		return out
	}
	lg, rg := evens(s.mine), evens(s.other)
	nc, err := s.ic.Create(Group{lg})
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	if !slices.Contains(lg, s.me) || len(rg) == 0 {
		if nc != nil {
			return fmt.Errorf("create: a communicator outside the groups %v / %v", lg, rg)
		}
	} else {
		ga, gb := lg, rg
		if !s.inA {
			ga, gb = rg, lg
		}
		if nc == nil {
			return fmt.Errorf("create: nil, want %v / %v", lg, rg)
		}
		if err := checkShape(nc, s.inA, ga, gb, s.me); err != nil {
			return fmt.Errorf("create: %w", err)
		}
		ws, err := AllgatherValue(nc, s.me)
		if err != nil || !slices.Equal(ws, rg) {
			return fmt.Errorf("create: allgathervalue %v, %v; want %v", ws, err, rg)
		}
		if err := nc.Free(); err != nil {
			return err
		}
	}
	// B's last local rank passes another group (B has 2 members or more).
	g := Group{slices.Clone(s.mine)}
	if bn := len(pick(s, false)); bn > 1 {
		if !s.inA && s.ic.Rank() == bn-1 {
			g.world = g.world[:bn-1]
		}
		if _, err := s.ic.Create(g); !errors.Is(err, ErrArg) || !s.inA && !strings.Contains(err.Error(), fmt.Sprintf("local rank %d", bn-1)) {
			return fmt.Errorf("create with another group on B's last rank: %v, want ErrArg naming it", err)
		}
	}
	// A passes a group with a member of B.
	g = Group{slices.Clone(s.mine)}
	if s.inA {
		g.world = append(g.world, s.other[0])
	}
	if _, err := s.ic.Create(g); !errors.Is(err, ErrArg) {
		return fmt.Errorf("create with a remote member in A's group: %v, want ErrArg", err)
	}
	return s.ic.Barrier()
}

func TestInterCommCreate(t *testing.T) {
	forInterWorlds(t, interSizes, func(t *testing.T, comms []*Comm) {
		each(t, comms, func(c *Comm) error {
			s, err := makeSide(c)
			if err != nil {
				return err
			}
			if err := interCreateCheck(s); err != nil {
				return err
			}
			return s.ic.Free()
		})
	})
}
