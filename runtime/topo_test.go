package mpi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestDimsCreate(t *testing.T) {
	for _, tc := range []struct {
		n          int
		dims, want []int
	}{
		{6, []int{0, 0}, []int{3, 2}},
		{8, []int{0, 0, 0}, []int{2, 2, 2}},
		{12, []int{0, 0}, []int{4, 3}},
		{7, []int{0, 0}, []int{7, 1}},
		{12, []int{0, 3}, []int{4, 3}},
		{1, []int{0}, []int{1}},
		{16, []int{2, 0, 0}, []int{2, 4, 2}},
	} {
		got, err := DimsCreate(tc.n, tc.dims)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("DimsCreate(%d, %v) = %v, %v; want %v", tc.n, tc.dims, got, err, tc.want)
		}
	}
	for _, bad := range []struct {
		n    int
		dims []int
	}{{7, []int{2, 0}}, {6, []int{2, 2}}, {0, []int{0}}, {4, []int{-1, 0}}} {
		if _, err := DimsCreate(bad.n, bad.dims); !errors.Is(err, ErrArg) {
			t.Errorf("DimsCreate(%d, %v): %v, want ErrArg", bad.n, bad.dims, err)
		}
	}
}

func TestGroups(t *testing.T) {
	g := Group{[]int{0, 1, 2, 3, 4, 5}}
	a, _ := g.Incl([]int{4, 2, 0})
	b, _ := g.Excl([]int{0, 1})
	if !slices.Equal(a.WorldRanks(), []int{4, 2, 0}) || !slices.Equal(b.WorldRanks(), []int{2, 3, 4, 5}) {
		t.Fatalf("incl %v excl %v", a, b)
	}
	tr, _ := a.TranslateRanks([]int{0, 1, 2}, b)
	if !slices.Equal(tr, []int{2, 0, Undefined}) {
		t.Errorf("translate: %v", tr)
	}
	if !slices.Equal(Union(a, b).WorldRanks(), []int{4, 2, 0, 3, 5}) || !slices.Equal(Intersection(a, b).WorldRanks(), []int{4, 2}) ||
		!slices.Equal(Difference(a, b).WorldRanks(), []int{0}) {
		t.Errorf("set operations")
	}
	c, _ := g.Incl([]int{0, 2, 4})
	if Compare(a, a) != Ident || Compare(a, c) != Similar || Compare(a, b) != Unequal {
		t.Errorf("compare")
	}
	if _, err := g.Incl([]int{6}); !errors.Is(err, ErrRank) {
		t.Errorf("incl out of range: %v", err)
	}
	if _, err := g.Excl([]int{1, 1}); !errors.Is(err, ErrArg) {
		t.Errorf("excl twice: %v", err)
	}
}

// TestCartAndCreate builds a 2-D periodic grid over 1..8 ranks, shifts in
// both dimensions (exchanging ranks to check the neighbours agree), takes
// row and column sub-grids, a communicator from a group, and SplitShared.
func TestCartAndCreate(t *testing.T) {
	forSizes(t, func(t *testing.T, comms []*Comm) {
		each(t, comms, func(c *Comm) error {
			n := c.Size()
			dims, err := DimsCreate(n, []int{0, 0})
			if err != nil {
				return err
			}
			cart, err := c.CartCreate(dims, []bool{true, false})
			if err != nil {
				return err
			}
			me, _ := cart.Coords(cart.Rank())
			if r, _ := cart.RankOf(me); r != cart.Rank() {
				return fmt.Errorf("rank of coords %v = %d, want %d", me, r, cart.Rank())
			}
			for dim := 0; dim < 2; dim++ {
				src, dst, err := cart.Shift(dim, 1)
				if err != nil {
					return err
				}
				// Send my rank up, receive from below.
				out, in := []int64{int64(cart.Rank())}, []int64{-1}
				var reqs []*Request
				if dst != ProcNull {
					reqs = append(reqs, Isend(cart.Comm, out, dst, 9))
				}
				if src != ProcNull {
					reqs = append(reqs, Irecv(cart.Comm, in, src, 9))
				}
				if _, err := WaitAll(bg, reqs...); err != nil {
					return err
				}
				if src != ProcNull && in[0] != int64(src) {
					return fmt.Errorf("dim %d: got %d from %d", dim, in[0], src)
				}
				if dim == 1 && (me[1] == 0) != (src == ProcNull) {
					return fmt.Errorf("non-periodic edge: coords %v src %d", me, src)
				}
			}
			row, err := cart.Sub([]bool{false, true})
			if err != nil {
				return err
			}
			if row.Size() != dims[1] || row.Rank() != me[1] {
				return fmt.Errorf("row: size %d rank %d, coords %v", row.Size(), row.Rank(), me)
			}
			sum := []int64{int64(c.Rank())}
			if err := Allreduce(row.Comm, sum, sum, Sum); err != nil {
				return err
			}
			want := int64(0)
			for j := 0; j < dims[1]; j++ {
				want += int64(me[0]*dims[1] + j)
			}
			if sum[0] != want {
				return fmt.Errorf("row sum %d, want %d", sum[0], want)
			}
			// Even ranks, reversed.
			var evens []int
			for r := n - 1; r >= 0; r-- {
				if r%2 == 0 {
					evens = append(evens, r)
				}
			}
			g, _ := c.Group().Incl(evens)
			ec, err := c.Create(g)
			if err != nil {
				return err
			}
			if (c.Rank()%2 == 0) != (ec != nil) {
				return fmt.Errorf("create: membership wrong")
			}
			if ec != nil && ec.Rank() != slices.Index(evens, c.Rank()) {
				return fmt.Errorf("create: rank %d", ec.Rank())
			}
			sh, err := c.SplitShared(0)
			if err != nil {
				return err
			}
			if sh.Size() != n {
				return fmt.Errorf("split shared: %d of %d ranks on one host", sh.Size(), n)
			}
			return nil
		})
	})
}

// TestSplitSharedHosts: on pretend hosts, SplitShared groups each host.
func TestSplitSharedHosts(t *testing.T) {
	const hosts = "ABCABCAB"
	comms := hostsWorld(t, hosts)
	each(t, comms, func(c *Comm) error {
		sh, err := c.SplitShared(-c.Rank()) // reversed order
		if err != nil {
			return err
		}
		h := hosts[c.Rank()]
		var want []int
		for r := len(hosts) - 1; r >= 0; r-- {
			if hosts[r] == h {
				want = append(want, r)
			}
		}
		got := sh.Group().WorldRanks()
		if !slices.Equal(got, want) {
			return fmt.Errorf("host %c: %v, want %v", h, got, want)
		}
		if strings.Count(hosts, string(h)) != sh.Size() {
			return fmt.Errorf("size %d", sh.Size())
		}
		return nil
	})
}

// TestSharedHosts: on pretend hosts, each rank's host is named by its
// lowest rank.
func TestSharedHosts(t *testing.T) {
	const hosts = "ABCABCAB"
	comms := hostsWorld(t, hosts)
	each(t, comms, func(c *Comm) error {
		got, err := c.SharedHosts()
		if err != nil {
			return err
		}
		want := make([]int, len(hosts))
		for r := range hosts {
			want[r] = strings.IndexByte(hosts, hosts[r])
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("rank %d: %v, want %v", c.Rank(), got, want)
		}
		return nil
	})
}

// TestCartShiftEdgeIsProcNull: off a non-periodic edge Shift returns
// ProcNull, so a stencil's Sendrecv on Shift's ranks runs unchanged at the
// edges (MPI_Cart_shift's MPI_PROC_NULL); it used to return Undefined,
// which every send and receive refuses as an invalid rank.
func TestCartShiftEdgeIsProcNull(t *testing.T) {
	for _, disp := range []int{1, -1, 2} {
		t.Run(fmt.Sprint(disp), func(t *testing.T) {
			forSizes(t, func(t *testing.T, comms []*Comm) {
				each(t, comms, func(c *Comm) error {
					n := c.Size()
					cart, err := c.CartCreate([]int{n}, []bool{false})
					if err != nil {
						return err
					}
					me := cart.Rank()
					src, dst, err := cart.Shift(0, disp)
					if err != nil {
						return err
					}
					in := []int{-1}
					st, err := Sendrecv(cart.Comm, []int{me}, dst, 4, in, src, 4)
					if err != nil {
						return fmt.Errorf("shift %d: Sendrecv to %d from %d: %v", disp, dst, src, err)
					}
					if from := me - disp; from < 0 || from >= n {
						if src != ProcNull || st.Source != ProcNull || in[0] != -1 {
							return fmt.Errorf("shift %d at the edge: src %d, status %+v, got %d", disp, src, st, in[0])
						}
					} else if src != from || in[0] != from {
						return fmt.Errorf("shift %d: src %d, got %d, want %d", disp, src, in[0], from)
					}
					if to := me + disp; (to < 0 || to >= n) != (dst == ProcNull) {
						return fmt.Errorf("shift %d: dst %d for rank %d of %d", disp, dst, me, n)
					}
					return nil
				})
			})
		})
	}
}

// TestTranslateRanksProcNull: ProcNull translates to ProcNull (as
// MPI_Group_translate_ranks does), so a stencil can translate Shift's
// neighbours, edges included, into another group's ranks; it was ErrRank.
func TestTranslateRanksProcNull(t *testing.T) {
	g := Group{[]int{3, 1, 2}}
	w := Group{[]int{0, 1, 2, 3}}
	for _, tc := range []struct {
		in, want []int
	}{
		{[]int{ProcNull, 0, 2}, []int{ProcNull, 3, 2}},
		{[]int{1, ProcNull}, []int{1, ProcNull}},
	} {
		got, err := g.TranslateRanks(tc.in, w)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("TranslateRanks(%v) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []int{AnySource, Undefined, 3} {
		if _, err := g.TranslateRanks([]int{bad}, w); !errors.Is(err, ErrRank) {
			t.Errorf("TranslateRanks(%d): %v, want ErrRank", bad, err)
		}
	}
}

// TestTopologyOverflow: dims whose product overflows int are ErrArg. They
// made DimsCreate divide by zero (a panic) and CartCreate return a nil
// Cart and no error on every rank (the product wrapped to 0).
func TestTopologyOverflow(t *testing.T) {
	huge := []int{1 << 32, 1 << 32}
	for _, dims := range [][]int{huge, {1 << 32, 0, 1 << 32}, {1 << 62, 4, 1}} {
		if _, err := DimsCreate(4, dims); !errors.Is(err, ErrArg) {
			t.Errorf("DimsCreate(4, %v): %v, want ErrArg", dims, err)
		}
	}
	comms, _ := world(t, 2, nil)
	each(t, comms, func(c *Comm) error {
		for _, dims := range [][]int{huge, {1 << 62, 4}} {
			cart, err := c.CartCreate(dims, []bool{false, false})
			if cart != nil || !errors.Is(err, ErrArg) {
				return fmt.Errorf("CartCreate(%v): %v, %v; want ErrArg", dims, cart, err)
			}
		}
		return nil
	})
}

// TestSplitBadColor: a negative color other than Undefined on one rank
// is ErrArg naming that rank on every rank. Only that rank used to
// return (ErrArg), and the others waited for it in the exchange for ever
// (here: until the view's deadline).
func TestSplitBadColor(t *testing.T) {
	comms, _ := world(t, 3, nil)
	each(t, comms, func(c *Comm) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		color := 0
		if c.Rank() == 1 {
			color = -5
		}
		s, err := c.WithContext(ctx).Split(color, 0)
		if s != nil || !errors.Is(err, ErrArg) || !strings.Contains(fmt.Sprint(err), "rank 1 passed color -5") {
			return fmt.Errorf("Split with rank 1's color -5: %v, %v; want ErrArg naming rank 1", s, err)
		}
		// The communicator is still usable: nobody took a context id.
		d, err := c.Dup()
		if err != nil {
			return err
		}
		return d.Free()
	})
}

// TestSplitTypeBadTypeOnOneRank: an unknown type on one rank is ErrArg
// naming that rank on every rank; only that rank used to return, and the
// others waited for it for ever (here: until the view's deadline).
func TestSplitTypeBadTypeOnOneRank(t *testing.T) {
	comms := hostsWorld(t, "AABA")
	each(t, comms, func(c *Comm) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		typ := CommTypeShared
		if c.Rank() == 2 {
			typ = 7
		}
		s, err := c.WithContext(ctx).SplitType(typ, 0)
		if s != nil || !errors.Is(err, ErrArg) || !strings.Contains(fmt.Sprint(err), "rank 2 passed type 7") {
			return fmt.Errorf("SplitType with rank 2's type 7: %v, %v; want ErrArg naming rank 2", s, err)
		}
		// Then a good one: hosts A and B.
		s, err = c.SplitType(CommTypeShared, 0)
		if err != nil {
			return err
		}
		if want := map[bool]int{true: 3, false: 1}[c.Rank() != 2]; s.Size() != want {
			return fmt.Errorf("shared communicator of %d, want %d", s.Size(), want)
		}
		return s.Free()
	})
}

// TestCreateGroupsDisagree: Create with a group that differs on one rank
// (another order, another member, a non-member of the communicator) is
// ErrArg naming that rank on every rank, not communicators that disagree
// or a hang; the communicator stays usable.
func TestCreateGroupsDisagree(t *testing.T) {
	for _, n := range []int{2, 3, 5, 8} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			transports(t, n, nil, func(t *testing.T, comms []*Comm) {
				each(t, comms, func(c *Comm) error {
					last := n - 1
					for _, tc := range []struct {
						name string
						odd  Group // the last rank's group; the others pass {0, 1}
					}{
						{"order", Group{[]int{1, 0}}},
						{"member", Group{[]int{0, 1, last}[:min(3, n)]}},
						{"empty", Group{}},
						{"outside", Group{[]int{0, n + 3}}},
					} {
						g := Group{[]int{0, 1}}
						if c.Rank() == last {
							g = tc.odd
						}
						nc, err := c.Create(g)
						if n == 2 && tc.name == "member" {
							// {0, 1, 1}[:2] is the same group: no error.
							if err != nil {
								return fmt.Errorf("%s: %v", tc.name, err)
							}
							if err := nc.Free(); err != nil {
								return err
							}
							continue
						}
						if !errors.Is(err, ErrArg) || !strings.Contains(err.Error(), fmt.Sprintf("rank %d", last)) || nc != nil {
							return fmt.Errorf("%s: %v, %v; want ErrArg naming rank %d", tc.name, nc, err, last)
						}
					}
					// Every rank passing a group with a non-member: ErrArg everywhere.
					if _, err := c.Create(Group{[]int{0, n}}); !errors.Is(err, ErrArg) {
						return fmt.Errorf("same group with a non-member: %v, want ErrArg", err)
					}
					nc, err := c.Create(Group{[]int{last, 0}})
					if err != nil {
						return err
					}
					if (nc != nil) != (c.Rank() == 0 || c.Rank() == last) {
						return fmt.Errorf("create after the errors: %v", nc)
					}
					if nc != nil {
						if err := nc.Barrier(); err != nil {
							return err
						}
						return nc.Free()
					}
					return nil
				})
			})
		})
	}
}
