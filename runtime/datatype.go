package mpi

import (
	"fmt"
	"math"
	"strings"
)

// Derived datatypes (MPI_Type_*). A Datatype describes where a sequence of
// bytes lies relative to a base address: its type map, flattened once, at
// construction, into (offset, length) blocks in type-map order with
// adjacent blocks merged. Size is the bytes of data; LB and Extent place
// consecutive copies (copy i of a type starts i*Extent after copy 0), as in
// MPI. File views (runtime/mpiio) tile a file with a filetype; the same
// values can describe memory layouts.
//
// Constructors return an error wrapping ErrArg for negative counts,
// mismatched argument lengths, or a type map that would not fit in
// MaxBlocks blocks or in int64 offsets. The zero Datatype is invalid.

// Block is one contiguous run of a flattened type: Len bytes at Off.
type Block struct {
	Off, Len int64
}

// MaxBlocks bounds a flattened type map (about 1.5 GiB of blocks), so a
// typo in a count is an error instead of an out-of-memory crash.
const MaxBlocks = 1 << 26

// Datatype is an immutable datatype; copy it freely.
type Datatype struct{ d *dtype }

// Order is the storage order of Subarray's array.
type Order int

const (
	// OrderC: the last dimension varies fastest (row major).
	OrderC Order = iota
	// OrderFortran: the first dimension varies fastest (column major).
	OrderFortran
)

type kind int

const (
	kNamed kind = iota
	kContiguous
	kVector
	kHvector
	kIndexed
	kHindexed
	kSubarray
	kResized
	kStruct
)

type dtype struct {
	name   string
	size   int64
	lb     int64
	extent int64
	blocks []Block

	// The constructor and its arguments, kept for String and for tests
	// that check the flattening against a naive walk.
	kind     kind
	count    int
	blocklen int
	stride   int64   // Vector: in old extents; Hvector: bytes
	lens     []int   // Indexed, Hindexed, Struct; Subarray: sizes
	displs   []int64 // Indexed: in old extents; Hindexed, Struct: bytes
	sub      []int   // Subarray subsizes
	starts   []int   // Subarray starts
	order    Order
	olds     []*dtype
}

func named(name string, size int64) Datatype {
	return Datatype{&dtype{name: name, size: size, extent: size, blocks: []Block{{0, size}}, kind: kNamed}}
}

// Named types. Int and Uint are Go's (8 bytes on 64-bit platforms).
var (
	Byte    = named("byte", 1)
	Int8    = named("int8", 1)
	Uint8   = named("uint8", 1)
	Int16   = named("int16", 2)
	Uint16  = named("uint16", 2)
	Int32   = named("int32", 4)
	Uint32  = named("uint32", 4)
	Int64   = named("int64", 8)
	Uint64  = named("uint64", 8)
	Float32 = named("float32", 4)
	Float64 = named("float64", 8)
	Int     = named("int", int64(sizeOf[int]()))
	Uint    = named("uint", int64(sizeOf[uint]()))
	Uintptr = named("uintptr", int64(sizeOf[uintptr]()))
)

// TypeOf is the named datatype of elements of type T: one contiguous
// element of T's size (a type defined over a Number keeps its size).
func TypeOf[T Number]() Datatype {
	var z T
	switch any(z).(type) {
	case int8:
		return Int8
	case uint8:
		return Uint8
	case int16:
		return Int16
	case uint16:
		return Uint16
	case int32:
		return Int32
	case uint32:
		return Uint32
	case int64:
		return Int64
	case uint64:
		return Uint64
	case float32:
		return Float32
	case float64:
		return Float64
	case int:
		return Int
	case uint:
		return Uint
	case uintptr:
		return Uintptr
	}
	return named(fmt.Sprintf("%T", z), int64(sizeOf[T]()))
}

// Valid reports whether t was made by a constructor (not the zero value).
func (t Datatype) Valid() bool { return t.d != nil }

// Size is the bytes of data in one copy of t.
func (t Datatype) Size() int64 { return t.d.size }

// LB is t's lower bound: where its first copy starts.
func (t Datatype) LB() int64 { return t.d.lb }

// Extent is the distance between consecutive copies of t.
func (t Datatype) Extent() int64 { return t.d.extent }

// Blocks is t's flattened type map in type-map order, adjacent blocks
// merged. The slice is shared: do not modify it.
func (t Datatype) Blocks() []Block { return t.d.blocks }

// Contiguous reports whether t is one block starting at its lower bound
// and as long as its extent, so that copies of it tile without gaps.
func (t Datatype) Contiguous() bool {
	b := t.d.blocks
	return t.d.size == t.d.extent && (t.d.size == 0 || len(b) == 1 && b[0].Off == t.d.lb)
}

func (t Datatype) String() string {
	if t.d == nil {
		return "<invalid datatype>"
	}
	return t.d.String()
}

func (d *dtype) String() string {
	if d.kind == kNamed {
		return d.name
	}
	names := make([]string, len(d.olds))
	for i, o := range d.olds {
		names[i] = o.String()
	}
	var b strings.Builder
	switch d.kind {
	case kContiguous:
		fmt.Fprintf(&b, "contiguous(%d, %s)", d.count, names[0])
	case kVector:
		fmt.Fprintf(&b, "vector(%d, %d, %d, %s)", d.count, d.blocklen, d.stride, names[0])
	case kHvector:
		fmt.Fprintf(&b, "hvector(%d, %d, %dB, %s)", d.count, d.blocklen, d.stride, names[0])
	case kIndexed:
		fmt.Fprintf(&b, "indexed(%v, %v, %s)", d.lens, d.displs, names[0])
	case kHindexed:
		fmt.Fprintf(&b, "hindexed(%v, %vB, %s)", d.lens, d.displs, names[0])
	case kSubarray:
		o := "C"
		if d.order == OrderFortran {
			o = "Fortran"
		}
		fmt.Fprintf(&b, "subarray(%v, %v, %v, %s, %s)", d.lens, d.sub, d.starts, o, names[0])
	case kResized:
		fmt.Fprintf(&b, "resized(%s, lb %d, extent %d)", names[0], d.lb, d.extent)
	case kStruct:
		fmt.Fprintf(&b, "struct(%v, %vB, [%s])", d.lens, d.displs, strings.Join(names, " "))
	}
	return b.String()
}

// placement is count consecutive copies of t starting at disp.
type placement struct {
	disp  int64
	count int64
	t     *dtype
}

var errOverflow = fmt.Errorf("%w: datatype offsets overflow int64", ErrArg)

func mulCheck(a, b int64) (int64, error) {
	if a == 0 || b == 0 {
		return 0, nil
	}
	c := a * b
	if c/b != a || (a == -1 && b == math.MinInt64) || (b == -1 && a == math.MinInt64) {
		return 0, errOverflow
	}
	return c, nil
}

func addCheck(a, b int64) (int64, error) {
	c := a + b
	if (c > a) != (b > 0) {
		return 0, errOverflow
	}
	return c, nil
}

// build flattens placements into d (which holds the constructor's
// arguments) and sets its bounds and size.
func build(d *dtype, ps []placement) (Datatype, error) {
	var nblocks int64
	first := true
	for _, p := range ps {
		if p.count == 0 {
			continue
		}
		n, err := mulCheck(p.count, int64(len(p.t.blocks)))
		if err != nil {
			return Datatype{}, err
		}
		if nblocks += n; nblocks > MaxBlocks {
			return Datatype{}, fmt.Errorf("%w: datatype has more than %d blocks", ErrArg, MaxBlocks)
		}
		sz, err := mulCheck(p.count, p.t.size)
		if err != nil {
			return Datatype{}, err
		}
		if d.size, err = addCheck(d.size, sz); err != nil {
			return Datatype{}, err
		}
		// Bounds: copy j spans [disp+j*ext+lb, disp+j*ext+lb+ext).
		span, err := mulCheck(p.count-1, p.t.extent)
		if err != nil {
			return Datatype{}, err
		}
		lo, err := addCheck(p.disp, p.t.lb)
		if err != nil {
			return Datatype{}, err
		}
		hi, err := addCheck(lo, p.t.extent)
		if err != nil {
			return Datatype{}, err
		}
		a, err := addCheck(lo, span)
		if err != nil {
			return Datatype{}, err
		}
		b, err := addCheck(hi, span)
		if err != nil {
			return Datatype{}, err
		}
		lo, hi = min(lo, a), max(hi, b)
		for _, blk := range p.t.blocks { // every block's ends must fit too
			last, err := addCheck(p.disp, span)
			if err != nil {
				return Datatype{}, err
			}
			for _, base := range [2]int64{p.disp, last} {
				o, err := addCheck(base, blk.Off)
				if err != nil {
					return Datatype{}, err
				}
				if _, err := addCheck(o, blk.Len); err != nil {
					return Datatype{}, err
				}
			}
		}
		if first {
			d.lb, d.extent = lo, hi
			first = false
		} else {
			d.lb, d.extent = min(d.lb, lo), max(d.extent, hi)
		}
	}
	if ub := d.extent; first {
		d.lb, d.extent = 0, 0
	} else {
		e, err := addCheck(ub, -d.lb)
		if err != nil {
			return Datatype{}, err
		}
		d.extent = e
	}
	blocks := make([]Block, 0, nblocks)
	for _, p := range ps {
		for j := int64(0); j < p.count; j++ {
			base := p.disp + j*p.t.extent
			for _, blk := range p.t.blocks {
				blocks = appendBlock(blocks, Block{base + blk.Off, blk.Len})
			}
		}
	}
	d.blocks = blocks
	return Datatype{d}, nil
}

// appendBlock appends b, merging it into the last block when adjacent.
func appendBlock(bs []Block, b Block) []Block {
	if b.Len == 0 {
		return bs
	}
	if n := len(bs); n > 0 && bs[n-1].Off+bs[n-1].Len == b.Off {
		bs[n-1].Len += b.Len
		return bs
	}
	return append(bs, b)
}

func checkOld(what string, old ...Datatype) error {
	for _, o := range old {
		if o.d == nil {
			return fmt.Errorf("%w: %s of an invalid (zero) datatype", ErrArg, what)
		}
	}
	return nil
}

func checkCount(what, name string, n int) error {
	if n < 0 {
		return fmt.Errorf("%w: %s: negative %s %d", ErrArg, what, name, n)
	}
	return nil
}

// Contiguous is count consecutive copies of old (MPI_Type_contiguous).
func Contiguous(count int, old Datatype) (Datatype, error) {
	if err := checkOld("Contiguous", old); err != nil {
		return Datatype{}, err
	}
	if err := checkCount("Contiguous", "count", count); err != nil {
		return Datatype{}, err
	}
	d := &dtype{kind: kContiguous, count: count, olds: []*dtype{old.d}}
	return build(d, []placement{{0, int64(count), old.d}})
}

// Vector is count blocks of blocklen copies of old, the blocks stride
// extents of old apart (MPI_Type_vector).
func Vector(count, blocklen, stride int, old Datatype) (Datatype, error) {
	if err := checkOld("Vector", old); err != nil {
		return Datatype{}, err
	}
	s, err := mulCheck(int64(stride), old.d.extent)
	if err != nil {
		return Datatype{}, err
	}
	t, err := hvector("Vector", count, blocklen, s, old)
	if err == nil {
		t.d.kind, t.d.stride = kVector, int64(stride)
	}
	return t, err
}

// Hvector is Vector with the stride in bytes (MPI_Type_create_hvector).
func Hvector(count, blocklen int, stride int64, old Datatype) (Datatype, error) {
	if err := checkOld("Hvector", old); err != nil {
		return Datatype{}, err
	}
	return hvector("Hvector", count, blocklen, stride, old)
}

func hvector(what string, count, blocklen int, stride int64, old Datatype) (Datatype, error) {
	if err := checkCount(what, "count", count); err != nil {
		return Datatype{}, err
	}
	if err := checkCount(what, "block length", blocklen); err != nil {
		return Datatype{}, err
	}
	if int64(count) > MaxBlocks {
		return Datatype{}, fmt.Errorf("%w: %s: count %d over %d", ErrArg, what, count, MaxBlocks)
	}
	d := &dtype{kind: kHvector, count: count, blocklen: blocklen, stride: stride, olds: []*dtype{old.d}}
	ps := make([]placement, count)
	for i := range ps {
		disp, err := mulCheck(int64(i), stride)
		if err != nil {
			return Datatype{}, err
		}
		ps[i] = placement{disp, int64(blocklen), old.d}
	}
	return build(d, ps)
}

// Indexed is blocks of blocklens[i] copies of old at displs[i] extents of
// old (MPI_Type_indexed).
func Indexed(blocklens, displs []int, old Datatype) (Datatype, error) {
	if err := checkOld("Indexed", old); err != nil {
		return Datatype{}, err
	}
	bd := make([]int64, len(displs))
	for i, x := range displs {
		v, err := mulCheck(int64(x), old.d.extent)
		if err != nil {
			return Datatype{}, err
		}
		bd[i] = v
	}
	t, err := hindexed("Indexed", blocklens, bd, old)
	if err == nil {
		t.d.kind = kIndexed
		t.d.displs = make([]int64, len(displs))
		for i, x := range displs {
			t.d.displs[i] = int64(x)
		}
	}
	return t, err
}

// Hindexed is Indexed with displacements in bytes
// (MPI_Type_create_hindexed).
func Hindexed(blocklens []int, displs []int64, old Datatype) (Datatype, error) {
	if err := checkOld("Hindexed", old); err != nil {
		return Datatype{}, err
	}
	return hindexed("Hindexed", blocklens, displs, old)
}

func hindexed(what string, blocklens []int, displs []int64, old Datatype) (Datatype, error) {
	if len(blocklens) != len(displs) {
		return Datatype{}, fmt.Errorf("%w: %s: %d block lengths but %d displacements", ErrArg, what, len(blocklens), len(displs))
	}
	ps := make([]placement, len(blocklens))
	for i, n := range blocklens {
		if err := checkCount(what, fmt.Sprintf("block length [%d]", i), n); err != nil {
			return Datatype{}, err
		}
		ps[i] = placement{displs[i], int64(n), old.d}
	}
	d := &dtype{kind: kHindexed, lens: append([]int(nil), blocklens...), displs: append([]int64(nil), displs...), olds: []*dtype{old.d}}
	return build(d, ps)
}

// Struct is blocks of blocklens[i] copies of types[i] at displs[i] bytes
// (MPI_Type_create_struct). No alignment padding is added to the extent
// (as MPICH); use Resized to pad.
func Struct(blocklens []int, displs []int64, types []Datatype) (Datatype, error) {
	if len(blocklens) != len(displs) || len(blocklens) != len(types) {
		return Datatype{}, fmt.Errorf("%w: Struct: %d block lengths, %d displacements, %d types", ErrArg, len(blocklens), len(displs), len(types))
	}
	if err := checkOld("Struct", types...); err != nil {
		return Datatype{}, err
	}
	ps := make([]placement, len(blocklens))
	olds := make([]*dtype, len(types))
	for i, n := range blocklens {
		if err := checkCount("Struct", fmt.Sprintf("block length [%d]", i), n); err != nil {
			return Datatype{}, err
		}
		ps[i] = placement{displs[i], int64(n), types[i].d}
		olds[i] = types[i].d
	}
	d := &dtype{kind: kStruct, lens: append([]int(nil), blocklens...), displs: append([]int64(nil), displs...), olds: olds}
	return build(d, ps)
}

// Resized is old with its lower bound and extent replaced
// (MPI_Type_create_resized); the data blocks are unchanged.
func Resized(old Datatype, lb, extent int64) (Datatype, error) {
	if err := checkOld("Resized", old); err != nil {
		return Datatype{}, err
	}
	if extent < 0 {
		return Datatype{}, fmt.Errorf("%w: Resized: negative extent %d", ErrArg, extent)
	}
	if _, err := addCheck(lb, extent); err != nil {
		return Datatype{}, err
	}
	o := old.d
	d := &dtype{kind: kResized, size: o.size, lb: lb, extent: extent, blocks: o.blocks, olds: []*dtype{o}}
	return Datatype{d}, nil
}

// Subarray is the sub-array of subsizes elements starting at starts of an
// array of sizes elements of old, stored in order (MPI_Type_create_subarray).
// Its lower bound is 0 and its extent the whole array's, so that copies of
// it tile consecutive arrays.
func Subarray(sizes, subsizes, starts []int, order Order, old Datatype) (Datatype, error) {
	if err := checkOld("Subarray", old); err != nil {
		return Datatype{}, err
	}
	n := len(sizes)
	if n == 0 || len(subsizes) != n || len(starts) != n {
		return Datatype{}, fmt.Errorf("%w: Subarray: %d sizes, %d subsizes, %d starts (need the same number, at least 1)", ErrArg, n, len(subsizes), len(starts))
	}
	if order != OrderC && order != OrderFortran {
		return Datatype{}, fmt.Errorf("%w: Subarray: unknown order %d", ErrArg, order)
	}
	for i := range sizes {
		if sizes[i] <= 0 || subsizes[i] < 0 || starts[i] < 0 || starts[i]+subsizes[i] > sizes[i] {
			return Datatype{}, fmt.Errorf("%w: Subarray: dimension %d: size %d, subsize %d, start %d (need 0 <= start, start+subsize <= size, size > 0)",
				ErrArg, i, sizes[i], subsizes[i], starts[i])
		}
	}
	// dims from the fastest-varying to the slowest.
	dims := make([]int, n)
	for i := range dims {
		if order == OrderC {
			dims[i] = n - 1 - i
		} else {
			dims[i] = i
		}
	}
	ext := old.d.extent
	t, err := Contiguous(subsizes[dims[0]], old)
	if err != nil {
		return Datatype{}, err
	}
	stride := ext
	disp, err := mulCheck(int64(starts[dims[0]]), ext)
	if err != nil {
		return Datatype{}, err
	}
	// The stride of dims[k] is the product of the sizes of dims[:k] times
	// ext.
	for k, dim := range dims {
		if k > 0 {
			if t, err = Hvector(subsizes[dim], 1, stride, t); err != nil {
				return Datatype{}, err
			}
			off, err := mulCheck(int64(starts[dim]), stride)
			if err != nil {
				return Datatype{}, err
			}
			if disp, err = addCheck(disp, off); err != nil {
				return Datatype{}, err
			}
		}
		if stride, err = mulCheck(stride, int64(sizes[dim])); err != nil {
			return Datatype{}, err
		}
	}
	if t, err = Hindexed([]int{1}, []int64{disp}, t); err != nil {
		return Datatype{}, err
	}
	if t, err = Resized(t, 0, stride); err != nil {
		return Datatype{}, err
	}
	t.d.kind = kSubarray
	t.d.lens = append([]int(nil), sizes...)
	t.d.sub = append([]int(nil), subsizes...)
	t.d.starts = append([]int(nil), starts...)
	t.d.order = order
	t.d.olds = []*dtype{old.d}
	return t, nil
}
