package mpi

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"slices"
)

// Groups, communicators from groups, SplitShared, and Cartesian
// topologies. All are built on Split, so they need no new wire messages.

// Group is an ordered set of ranks of the world communicator (MPI_Group),
// independent of any communicator's message space. The zero Group is
// empty. Groups are values: operations return new ones.
type Group struct{ world []int }

// Group returns c's group (in c's rank order; the local group of an
// intercommunicator, see RemoteGroup).
func (c *Comm) Group() Group {
	if c.inter != nil {
		return Group{slices.Clone(c.inter.local.group)}
	}
	return Group{slices.Clone(c.group)}
}

// Size is the number of ranks in g.
func (g Group) Size() int { return len(g.world) }

// WorldRanks returns g's members as world ranks, in g's order.
func (g Group) WorldRanks() []int { return slices.Clone(g.world) }

// Rank returns the rank in g of world rank w, or Undefined.
func (g Group) Rank(w int) int {
	if i := slices.Index(g.world, w); i >= 0 {
		return i
	}
	return Undefined
}

func (g Group) check(ranks []int) error {
	seen := map[int]bool{}
	for _, r := range ranks {
		if r < 0 || r >= len(g.world) {
			return fmt.Errorf("%w: %d (group of %d)", ErrRank, r, len(g.world))
		}
		if seen[r] {
			return fmt.Errorf("%w: rank %d listed twice", ErrArg, r)
		}
		seen[r] = true
	}
	return nil
}

// Incl returns the group of g's ranks listed, in that order.
func (g Group) Incl(ranks []int) (Group, error) {
	if err := g.check(ranks); err != nil {
		return Group{}, err
	}
	out := make([]int, len(ranks))
	for i, r := range ranks {
		out[i] = g.world[r]
	}
	return Group{out}, nil
}

// Excl returns g without the ranks listed (order kept).
func (g Group) Excl(ranks []int) (Group, error) {
	if err := g.check(ranks); err != nil {
		return Group{}, err
	}
	var out []int
	for i, w := range g.world {
		if !slices.Contains(ranks, i) {
			out = append(out, w)
		}
	}
	return Group{out}, nil
}

// TranslateRanks maps ranks of g to ranks of h (Undefined where a member
// of g is not in h; ProcNull to ProcNull, as in MPI, so Shift's neighbours
// translate at the edges too).
func (g Group) TranslateRanks(ranks []int, h Group) ([]int, error) {
	out := make([]int, len(ranks))
	for i, r := range ranks {
		if r == ProcNull {
			out[i] = ProcNull
			continue
		}
		if r < 0 || r >= len(g.world) {
			return nil, fmt.Errorf("%w: %d (group of %d)", ErrRank, r, len(g.world))
		}
		out[i] = h.Rank(g.world[r])
	}
	return out, nil
}

// Comparison results of Compare (MPI_IDENT, MPI_SIMILAR, MPI_UNEQUAL).
const (
	Ident   = 0 // same members in the same order
	Similar = 1 // same members, another order
	Unequal = 2
)

// Compare compares two groups.
func Compare(a, b Group) int {
	switch {
	case slices.Equal(a.world, b.world):
		return Ident
	case len(a.world) == len(b.world):
		x, y := slices.Clone(a.world), slices.Clone(b.world)
		slices.Sort(x)
		slices.Sort(y)
		if slices.Equal(x, y) {
			return Similar
		}
	}
	return Unequal
}

// Union is a's members then b's not in a.
func Union(a, b Group) Group {
	out := slices.Clone(a.world)
	for _, w := range b.world {
		if !slices.Contains(a.world, w) {
			out = append(out, w)
		}
	}
	return Group{out}
}

// Intersection is a's members that are in b, in a's order.
func Intersection(a, b Group) Group {
	var out []int
	for _, w := range a.world {
		if slices.Contains(b.world, w) {
			out = append(out, w)
		}
	}
	return Group{out}
}

// Difference is a's members not in b, in a's order.
func Difference(a, b Group) Group {
	var out []int
	for _, w := range a.world {
		if !slices.Contains(b.world, w) {
			out = append(out, w)
		}
	}
	return Group{out}
}

// Create returns the communicator of g's members (ranked in g's order), or
// nil on ranks outside g. It is collective over c, and every rank must
// pass the same g, a subset of c's group. A hash of g travels with the
// context id agreement, so a rank that passed another group is ErrArg
// naming it on every rank (instead of communicators that disagree), and
// a g that is not a subset is ErrArg on every rank.
//
// On an intercommunicator (MPI_Comm_create of one) g is a subgroup of the
// local group, the same on every member of it (each group passes its
// own), and the result is an intercommunicator between the two groups'
// g, or nil outside g or when the other group's g is empty.
func (c *Comm) Create(g Group) (*Comm, error) {
	if err := c.errUsable(); err != nil {
		return nil, err
	}
	local := c
	if c.inter != nil {
		local = c.inter.local
	}
	var argErr error
	for _, w := range g.world {
		if !local.hasWorld(w) {
			argErr = fmt.Errorf("%w: Create: world rank %d of the group is not in the communicator's (local) group", ErrArg, w)
			break
		}
	}
	h := fnv.New64a()
	var b [8]byte
	for _, w := range g.world {
		binary.LittleEndian.PutUint64(b[:], uint64(w))
		h.Write(b[:])
	}
	// 0 is an ordinary Split's word; an empty group hashes to FNV's basis.
	check := h.Sum64() | 1
	color, key := Undefined, 0
	if i := g.Rank(local.group[local.rank]); i >= 0 && argErr == nil {
		color, key = 0, i
	}
	if c.inter != nil {
		return c.interSplitCheck(color, key, check, argErr)
	}
	return c.split(color, key, check, argErr)
}

// SplitShared returns the communicator of c's ranks on this rank's host
// (MPI_Comm_split_type with MPI_COMM_TYPE_SHARED: ranks that can share
// memory), ordered by key then rank in c. Hosts are told apart as the
// node-aware collectives do (coll_node.go). It is collective over c.
func (c *Comm) SplitShared(key int) (*Comm, error) {
	if err := c.intraOnly("SplitShared"); err != nil {
		return nil, err
	}
	hosts, err := c.sharedHosts()
	if err != nil {
		return nil, err
	}
	return c.Split(hosts[c.rank], key) // color: the host's lowest rank
}

// SharedHosts tells c's ranks apart by host as SplitShared does, without
// making a communicator: hosts[r] is the lowest rank of c on rank r's
// host. It is collective over c: one allgather (SplitShared and a
// reduction over the result cost several collective steps, each a few ms
// with more ranks than cores).
func (c *Comm) SharedHosts() ([]int, error) {
	if err := c.intraOnly("SharedHosts"); err != nil {
		return nil, err
	}
	return c.sharedHosts()
}

func (c *Comm) sharedHosts() ([]int, error) {
	k := c.p.nodeKey()
	all, err := c.allgatherBytes(k[:], tagNode)
	if err != nil {
		return nil, err
	}
	return hostsOf(all, len(c.group), layoutEntry), nil
}

// hostsOf tells n ranks apart by the node keys at the start of their
// stride-byte entries of all: hosts[r] is the lowest rank with r's key.
func hostsOf(all []byte, n, stride int) []int {
	hosts := make([]int, n)
	first := map[[layoutEntry]byte]int{}
	for r := range hosts {
		key := [layoutEntry]byte(all[r*stride:])
		if _, ok := first[key]; !ok {
			first[key] = r
		}
		hosts[r] = first[key]
	}
	return hosts
}

// DimsCreate fills the zero entries of dims (one per dimension; nonzero
// entries are kept) so that their product is nnodes, as balanced as
// possible, in non-increasing order (MPI_Dims_create).
func DimsCreate(nnodes int, dims []int) ([]int, error) {
	out := slices.Clone(dims)
	fixed, free := 1, 0
	for _, d := range out {
		switch {
		case d < 0:
			return nil, fmt.Errorf("%w: dims %v", ErrArg, dims)
		case d == 0:
			free++
		case d > max(nnodes, 1)/fixed: // the product would pass nnodes (or overflow)
			return nil, fmt.Errorf("%w: %d nodes do not fit dims %v", ErrArg, nnodes, dims)
		default:
			fixed *= d
		}
	}
	if nnodes < 1 || nnodes%fixed != 0 {
		return nil, fmt.Errorf("%w: %d nodes do not fit dims %v", ErrArg, nnodes, dims)
	}
	if free == 0 {
		if fixed != nnodes {
			return nil, fmt.Errorf("%w: dims %v hold %d, not %d nodes", ErrArg, dims, fixed, nnodes)
		}
		return out, nil
	}
	// Deal the prime factors, largest first, to the smallest free dim.
	f := make([]int, free)
	for i := range f {
		f[i] = 1
	}
	var primes []int
	m := nnodes / fixed
	for p := 2; p*p <= m; p++ {
		for m%p == 0 {
			primes = append(primes, p)
			m /= p
		}
	}
	if m > 1 {
		primes = append(primes, m)
	}
	for i := len(primes) - 1; i >= 0; i-- {
		j := 0
		for k := range f {
			if f[k] < f[j] {
				j = k
			}
		}
		f[j] *= primes[i]
	}
	slices.SortFunc(f, func(a, b int) int { return b - a })
	j := 0
	for i := range out {
		if out[i] == 0 {
			out[i] = f[j]
			j++
		}
	}
	return out, nil
}

// Cart is a communicator with a Cartesian topology: rank r sits at the
// row-major coordinates of r in a grid of dims, periodic in the
// dimensions marked so.
type Cart struct {
	*Comm
	dims    []int
	periods []bool
}

// CartCreate makes a Cartesian communicator of prod(dims) ranks from c's
// first ranks (rank order kept: no reordering); ranks beyond get nil. It
// is collective over c.
func (c *Comm) CartCreate(dims []int, periods []bool) (*Cart, error) {
	if err := c.intraOnly("CartCreate"); err != nil {
		return nil, err
	}
	if len(periods) != len(dims) {
		return nil, fmt.Errorf("%w: %d dims, %d periods", ErrArg, len(dims), len(periods))
	}
	n := 1
	for _, d := range dims {
		if d < 1 {
			return nil, fmt.Errorf("%w: dims %v", ErrArg, dims)
		}
		if d > len(c.group)/n { // checked before multiplying: it could overflow
			return nil, fmt.Errorf("%w: grid %v has more ranks than the communicator's %d", ErrArg, dims, len(c.group))
		}
		n *= d
	}
	color := 0
	if c.rank >= n {
		color = Undefined
	}
	nc, err := c.Split(color, c.rank)
	if err != nil || nc == nil {
		return nil, err
	}
	return &Cart{nc, slices.Clone(dims), slices.Clone(periods)}, nil
}

// Dims returns the grid's extents.
func (t *Cart) Dims() []int { return slices.Clone(t.dims) }

// Coords returns the coordinates of rank r.
func (t *Cart) Coords(r int) ([]int, error) {
	if r < 0 || r >= t.Size() {
		return nil, fmt.Errorf("%w: %d", ErrRank, r)
	}
	co := make([]int, len(t.dims))
	for i := len(t.dims) - 1; i >= 0; i-- {
		co[i] = r % t.dims[i]
		r /= t.dims[i]
	}
	return co, nil
}

// RankOf returns the rank at coords (wrapped in periodic dimensions);
// coordinates off a non-periodic grid return ErrRank.
func (t *Cart) RankOf(coords []int) (int, error) {
	if len(coords) != len(t.dims) {
		return 0, fmt.Errorf("%w: %d coordinates for %d dims", ErrArg, len(coords), len(t.dims))
	}
	r := 0
	for i, x := range coords {
		if t.periods[i] {
			x = mod(x, t.dims[i])
		} else if x < 0 || x >= t.dims[i] {
			return 0, fmt.Errorf("%w: coordinate %d in dimension %d of %d", ErrRank, x, i, t.dims[i])
		}
		r = r*t.dims[i] + x
	}
	return r, nil
}

// Shift returns the ranks disp steps down (src) and up (dst) dimension
// dim from this rank (MPI_Cart_shift); off a non-periodic edge, ProcNull
// (sends and receives to it complete at once, as MPI_PROC_NULL's do).
func (t *Cart) Shift(dim, disp int) (src, dst int, err error) {
	if dim < 0 || dim >= len(t.dims) {
		return 0, 0, fmt.Errorf("%w: dimension %d of %d", ErrArg, dim, len(t.dims))
	}
	me, _ := t.Coords(t.Rank())
	at := func(d int) int {
		co := slices.Clone(me)
		co[dim] += d
		r, err := t.RankOf(co)
		if err != nil {
			return ProcNull // a stencil's send/receive there completes at once
		}
		return r
	}
	return at(-disp), at(disp), nil
}

// Sub returns the grid of the dimensions marked in remain, among the ranks
// that share this rank's coordinates in the others (MPI_Cart_sub). It is
// collective over t.
func (t *Cart) Sub(remain []bool) (*Cart, error) {
	if len(remain) != len(t.dims) {
		return nil, fmt.Errorf("%w: %d flags for %d dims", ErrArg, len(remain), len(t.dims))
	}
	me, _ := t.Coords(t.Rank())
	color, key := 0, 0
	var dims []int
	var periods []bool
	for i, keep := range remain {
		if keep {
			key = key*t.dims[i] + me[i]
			dims = append(dims, t.dims[i])
			periods = append(periods, t.periods[i])
		} else {
			color = color*t.dims[i] + me[i]
		}
	}
	nc, err := t.Split(color, key)
	if err != nil {
		return nil, err
	}
	return &Cart{nc, dims, periods}, nil
}
