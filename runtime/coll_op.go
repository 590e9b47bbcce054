package mpi

import (
	"cmp"
	"fmt"
	"reflect"
	"unsafe"
)

// Reduction operations: the predefined ones, user ops with a unit (the
// number of consecutive elements one item spans, never split by the
// pipelined algorithms), and the value-index pairs of MaxLoc/MinLoc.

// Op is a reduction operation: one of the predefined Sum, Prod, Min, Max,
// Land, Lor, Lxor, Band, Bor, Bxor (MaxLoc and MinLoc go with ReduceLoc
// and AllreduceLoc), or a user operation made with NewOp. The zero Op is
// invalid.
type Op struct{ d *opDef }

type opDef struct {
	name    string
	code    int
	fn      any // func(in, inout []T) for user ops
	commute bool
	unit    int // elements per item; 0 means 1
}

const (
	opUser = iota
	opSum
	opProd
	opMin
	opMax
	opLand
	opLor
	opLxor
	opBand
	opBor
	opBxor
	opMaxLoc
	opMinLoc
)

func predef(name string, code int) Op {
	return Op{&opDef{name: name, code: code, commute: true}}
}

// Predefined operations. They are commutative and associative (floating
// point rounding aside), so the collectives may combine in any order.
// Sum and Prod work on every Number type; Min and Max on every type but
// the complex ones; the logical (Land, Lor, Lxor: nonzero is true, the
// result is 1 or 0) and bitwise (Band, Bor, Bxor) operations on integer
// types only. Any other combination returns ErrArg.
var (
	Sum  = predef("Sum", opSum)
	Prod = predef("Prod", opProd)
	Min  = predef("Min", opMin)
	Max  = predef("Max", opMax)
	Land = predef("Land", opLand)
	Lor  = predef("Lor", opLor)
	Lxor = predef("Lxor", opLxor)
	Band = predef("Band", opBand)
	Bor  = predef("Bor", opBor)
	Bxor = predef("Bxor", opBxor)
	// MaxLoc and MinLoc reduce value-index pairs with ReduceLoc and
	// AllreduceLoc: the largest (smallest) value and, among equal
	// values, the lowest index (MPI_MAXLOC, MPI_MINLOC).
	MaxLoc = predef("MaxLoc", opMaxLoc)
	MinLoc = predef("MinLoc", opMinLoc)
)

// NewOp makes a user-defined reduction over []T. f must set
// inout[i] = in[i] ∘ inout[i] for every i, where in holds the combined
// contributions of lower ranks than inout's (MPI's convention); the two
// slices have equal length and do not overlap. The operation must be
// associative. If commutative is false, the collectives combine in rank
// order (x0 ∘ x1 ∘ ... ∘ xn-1) with order-preserving algorithms (binomial
// tree to rank 0, recursive doubling), which are not the bandwidth-optimal
// ring algorithms used for large commutative reductions. An Op made for one
// T used with another returns ErrArg. An op whose items span several
// elements (a complex number as [re, im], a 2x2 matrix as 4 elements)
// must declare it with WithUnit.
func NewOp[T Number](name string, f func(in, inout []T), commutative bool) Op {
	return Op{&opDef{name: name, fn: f, commute: commutative}}
}

// WithUnit returns a copy of o whose items are k consecutive elements:
// the collectives then cut buffers only at multiples of k (f always sees
// whole items), and a buffer whose length is not a multiple of k returns
// ErrArg. Without it, large reductions are cut into blocks and segments
// at arbitrary element boundaries.
func (o Op) WithUnit(k int) Op {
	if o.d == nil {
		return o
	}
	d := *o.d
	d.unit = k
	return Op{&d}
}

// Unit is the number of elements per item (1 unless set by WithUnit).
func (o Op) Unit() int {
	if o.d == nil || o.d.unit == 0 {
		return 1
	}
	return o.d.unit
}

// Commutative reports whether the collectives may combine in any order.
func (o Op) Commutative() bool { return o.d != nil && o.d.commute }

func (o Op) String() string {
	if o.d == nil {
		return "invalid Op"
	}
	return o.d.name
}

// checkOp validates op for cnt elements of type T.
func checkOp[T Number](op Op, cnt int) error {
	var z T
	if op.d == nil {
		return fmt.Errorf("%w: zero Op", ErrArg)
	}
	if op.d.unit < 0 {
		return fmt.Errorf("%w: op %s: unit %d", ErrArg, op.d.name, op.d.unit)
	}
	if u := op.Unit(); cnt%u != 0 {
		return fmt.Errorf("%w: op %s: %d elements are not whole units of %d", ErrArg, op.d.name, cnt, u)
	}
	switch op.d.code {
	case opSum, opProd: // every type; the hot path skips reflect
	case opUser:
		if _, ok := op.d.fn.(func(in, inout []T)); !ok {
			return fmt.Errorf("%w: op %s is not defined for %T", ErrArg, op.d.name, z)
		}
	case opMin, opMax:
		if k := reflect.TypeFor[T]().Kind(); k == reflect.Complex64 || k == reflect.Complex128 {
			return fmt.Errorf("%w: op %s is not defined for %T (complex numbers are not ordered)", ErrArg, op.d.name, z)
		}
	case opLand, opLor, opLxor, opBand, opBor, opBxor:
		if reflect.TypeFor[T]().Kind() >= reflect.Float32 {
			return fmt.Errorf("%w: op %s is defined for integer types only, not %T", ErrArg, op.d.name, z)
		}
	case opMaxLoc, opMinLoc:
		return fmt.Errorf("%w: op %s reduces value-index pairs: use ReduceLoc or AllreduceLoc", ErrArg, op.d.name)
	}
	return nil
}

// combine sets inout[i] = in[i] ∘ inout[i] (in from lower ranks).
func combine[T Number](op Op, in, inout []T) { combineInto(op, in, inout, inout) }

// combineInto sets out = in ∘ local element-wise (local may be out).
func combineInto[T Number](op Op, in, local, out []T) {
	in, local = in[:len(out)], local[:len(out)]
	switch op.d.code {
	case opSum:
		for i := range out {
			out[i] = in[i] + local[i]
		}
	case opProd:
		for i := range out {
			out[i] = in[i] * local[i]
		}
	case opUser:
		if !sameSlice(local, out) {
			copy(out, local)
		}
		op.d.fn.(func(in, inout []T))(in, out)
	default:
		combineKind(op.d.code, in, local, out)
	}
}

// combineKind runs the ops that need an ordered or integer type on T's
// underlying type (checkOp has ruled out the rest).
func combineKind[T Number](code int, in, local, out []T) {
	switch reflect.TypeFor[T]().Kind() {
	case reflect.Int:
		intOp(code, cast[int](in), cast[int](local), cast[int](out))
	case reflect.Int8:
		intOp(code, cast[int8](in), cast[int8](local), cast[int8](out))
	case reflect.Int16:
		intOp(code, cast[int16](in), cast[int16](local), cast[int16](out))
	case reflect.Int32:
		intOp(code, cast[int32](in), cast[int32](local), cast[int32](out))
	case reflect.Int64:
		intOp(code, cast[int64](in), cast[int64](local), cast[int64](out))
	case reflect.Uint:
		intOp(code, cast[uint](in), cast[uint](local), cast[uint](out))
	case reflect.Uint8:
		intOp(code, cast[uint8](in), cast[uint8](local), cast[uint8](out))
	case reflect.Uint16:
		intOp(code, cast[uint16](in), cast[uint16](local), cast[uint16](out))
	case reflect.Uint32:
		intOp(code, cast[uint32](in), cast[uint32](local), cast[uint32](out))
	case reflect.Uint64:
		intOp(code, cast[uint64](in), cast[uint64](local), cast[uint64](out))
	case reflect.Uintptr:
		intOp(code, cast[uintptr](in), cast[uintptr](local), cast[uintptr](out))
	case reflect.Float32:
		minMax(code, cast[float32](in), cast[float32](local), cast[float32](out))
	case reflect.Float64:
		minMax(code, cast[float64](in), cast[float64](local), cast[float64](out))
	}
}

// cast views s as its underlying element type E (same size and layout).
func cast[E any, T Number](s []T) []E {
	return unsafe.Slice((*E)(unsafe.Pointer(unsafe.SliceData(s))), len(s))
}

func minMax[E cmp.Ordered](code int, in, local, out []E) {
	switch code {
	case opMin:
		for i := range out {
			out[i] = min(in[i], local[i])
		}
	case opMax:
		for i := range out {
			out[i] = max(in[i], local[i])
		}
	}
}

type integer interface {
	~int | ~int8 | ~int16 | ~int32 | ~int64 |
		~uint | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~uintptr
}

func intOp[E integer](code int, in, local, out []E) {
	b := func(x E) bool { return x != 0 }
	one := func(t bool) E {
		if t {
			return 1
		}
		return 0
	}
	switch code {
	case opLand:
		for i := range out {
			out[i] = one(b(in[i]) && b(local[i]))
		}
	case opLor:
		for i := range out {
			out[i] = one(b(in[i]) || b(local[i]))
		}
	case opLxor:
		for i := range out {
			out[i] = one(b(in[i]) != b(local[i]))
		}
	case opBand:
		for i := range out {
			out[i] = in[i] & local[i]
		}
	case opBor:
		for i := range out {
			out[i] = in[i] | local[i]
		}
	case opBxor:
		for i := range out {
			out[i] = in[i] ^ local[i]
		}
	default:
		minMax(code, in, local, out)
	}
}

// Real is the ordered Number types: the values of MaxLoc/MinLoc pairs.
type Real interface {
	integer | ~float32 | ~float64
}

// ValIndex is a value with an index (a rank, a position), the item
// MaxLoc and MinLoc reduce (MPI's MPI_2INT, MPI_DOUBLE_INT, ...).
type ValIndex[T Real] struct {
	Val   T
	Index int
}

// locOp is MaxLoc or MinLoc over the bytes of []ValIndex[T], one pair per
// unit, so the collectives never split a pair.
func locOp[T Real](op Op) (Op, error) {
	if op.d == nil || (op.d.code != opMaxLoc && op.d.code != opMinLoc) {
		return Op{}, fmt.Errorf("%w: op %v: ReduceLoc and AllreduceLoc take MaxLoc or MinLoc", ErrArg, op)
	}
	isMax := op.d.code == opMaxLoc
	sz := int(unsafe.Sizeof(ValIndex[T]{}))
	f := func(in, inout []byte) {
		a, b := pairs[T](in, sz), pairs[T](inout, sz)
		for i := range b {
			x, y := a[i], &b[i]
			better := x.Val > y.Val
			if !isMax {
				better = x.Val < y.Val
			}
			if better || (x.Val == y.Val && x.Index < y.Index) {
				*y = x
			}
		}
	}
	return NewOp[byte](op.d.name, f, true).WithUnit(sz), nil
}

func pairs[T Real](b []byte, sz int) []ValIndex[T] {
	return unsafe.Slice((*ValIndex[T])(unsafe.Pointer(unsafe.SliceData(b))), len(b)/sz)
}

func pairBytes[T Real](p []ValIndex[T]) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(p))), len(p)*int(unsafe.Sizeof(ValIndex[T]{})))
}

// ReduceLoc reduces value-index pairs with MaxLoc or MinLoc into root's
// recvbuf, element-wise like Reduce: element i of the result is the
// largest (smallest) Val among the ranks' element i, with the lowest
// Index among equal values.
func ReduceLoc[T Real](c *Comm, sendbuf, recvbuf []ValIndex[T], op Op, root int) error {
	bop, err := locOp[T](op)
	if err != nil {
		return err
	}
	return Reduce(c, pairBytes(sendbuf), pairBytes(recvbuf), bop, root)
}

// AllreduceLoc is ReduceLoc with the result on every rank.
func AllreduceLoc[T Real](c *Comm, sendbuf, recvbuf []ValIndex[T], op Op) error {
	bop, err := locOp[T](op)
	if err != nil {
		return err
	}
	return Allreduce(c, pairBytes(sendbuf), pairBytes(recvbuf), bop)
}
