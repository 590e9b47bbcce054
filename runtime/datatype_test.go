package mpi

import (
	"errors"
	"reflect"
	"testing"
)

// naive emits every byte offset of d's type map, in order, one at a time,
// straight from the constructor's definition in the MPI standard.
func naive(d *dtype, base int64, emit func(int64)) {
	switch d.kind {
	case kNamed:
		for b := int64(0); b < d.size; b++ {
			emit(base + b)
		}
	case kContiguous:
		for i := 0; i < d.count; i++ {
			naive(d.olds[0], base+int64(i)*d.olds[0].extent, emit)
		}
	case kVector, kHvector:
		o := d.olds[0]
		for i := 0; i < d.count; i++ {
			for j := 0; j < d.blocklen; j++ {
				off := int64(i)*d.stride*o.extent + int64(j)*o.extent
				if d.kind == kHvector {
					off = int64(i)*d.stride + int64(j)*o.extent
				}
				naive(o, base+off, emit)
			}
		}
	case kIndexed, kHindexed, kStruct:
		for i, n := range d.lens {
			o := d.olds[0]
			if d.kind == kStruct {
				o = d.olds[i]
			}
			for j := 0; j < n; j++ {
				off := d.displs[i] + int64(j)*o.extent
				if d.kind == kIndexed {
					off = (d.displs[i] + int64(j)) * o.extent
				}
				naive(o, base+off, emit)
			}
		}
	case kResized:
		naive(d.olds[0], base, emit)
	case kSubarray:
		n := len(d.lens)
		idx := make([]int, n)
		total := 1
		for _, s := range d.sub {
			total *= s
		}
		for e := 0; e < total; e++ {
			// idx is the e-th element in storage order.
			r := e
			for k := 0; k < n; k++ {
				dim := n - 1 - k
				if d.order == OrderFortran {
					dim = k
				}
				idx[dim] = r % d.sub[dim]
				r /= d.sub[dim]
			}
			lin, mul := int64(0), int64(1)
			for k := 0; k < n; k++ {
				dim := n - 1 - k
				if d.order == OrderFortran {
					dim = k
				}
				lin += int64(d.starts[dim]+idx[dim]) * mul
				mul *= int64(d.lens[dim])
			}
			naive(d.olds[0], base+lin*d.olds[0].extent, emit)
		}
	}
}

func expand(bs []Block) []int64 {
	var out []int64
	for _, b := range bs {
		for i := int64(0); i < b.Len; i++ {
			out = append(out, b.Off+i)
		}
	}
	return out
}

func checkFlat(t *testing.T, dt Datatype) {
	t.Helper()
	var want []int64
	naive(dt.d, 0, func(o int64) { want = append(want, o) })
	got := expand(dt.Blocks())
	if len(got) != len(want) || (len(want) > 0 && !reflect.DeepEqual(got, want)) {
		t.Fatalf("%v: flattened %v\nnaive %v", dt, got, want)
	}
	if dt.Size() != int64(len(want)) {
		t.Fatalf("%v: size %d, naive walk has %d bytes", dt, dt.Size(), len(want))
	}
	bs := dt.Blocks()
	for i := 1; i < len(bs); i++ {
		if bs[i-1].Off+bs[i-1].Len == bs[i].Off {
			t.Fatalf("%v: adjacent blocks %v %v not merged", dt, bs[i-1], bs[i])
		}
	}
	for _, b := range bs {
		if b.Len <= 0 {
			t.Fatalf("%v: empty block %v", dt, b)
		}
	}
}

func TestDatatypes(t *testing.T) {
	must := func(dt Datatype, err error) Datatype {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return dt
	}
	i32 := Int32
	vec := must(Vector(3, 2, 4, i32))
	sub := must(Subarray([]int{4, 6}, []int{2, 3}, []int{1, 2}, OrderC, Float64))
	subF := must(Subarray([]int{4, 6}, []int{2, 3}, []int{1, 2}, OrderFortran, Float64))
	res := must(Resized(vec, -4, 100))
	st := must(Struct([]int{1, 2}, []int64{0, 8}, []Datatype{Int32, Float64}))
	tests := []struct {
		name       string
		dt         Datatype
		size, lb   int64
		extent     int64
		blocks     []Block
		contiguous bool
	}{
		{"byte", Byte, 1, 0, 1, []Block{{0, 1}}, true},
		{"contiguous", must(Contiguous(5, i32)), 20, 0, 20, []Block{{0, 20}}, true},
		{"empty", must(Contiguous(0, i32)), 0, 0, 0, []Block{}, true},
		{"vector", vec, 24, 0, 40, []Block{{0, 8}, {16, 8}, {32, 8}}, false},
		{"vector of vector", must(Contiguous(2, vec)), 48, 0, 80, []Block{{0, 8}, {16, 8}, {32, 16}, {56, 8}, {72, 8}}, false},
		{"hvector", must(Hvector(2, 1, 12, i32)), 8, 0, 16, []Block{{0, 4}, {12, 4}}, false},
		{"negative stride", must(Hvector(2, 1, -12, i32)), 8, -12, 16, []Block{{0, 4}, {-12, 4}}, false},
		{"indexed", must(Indexed([]int{2, 1}, []int{3, 0}, i32)), 12, 0, 20, []Block{{12, 8}, {0, 4}}, false},
		{"hindexed", must(Hindexed([]int{1, 1}, []int64{4, 8}, i32)), 8, 4, 8, []Block{{4, 8}}, true},
		{"subarray C", sub, 48, 0, 192, []Block{{64, 24}, {112, 24}}, false},
		{"subarray Fortran", subF, 48, 0, 192, []Block{{72, 16}, {104, 16}, {136, 16}}, false},
		{"resized", res, 24, -4, 100, vec.Blocks(), false},
		{"struct", st, 20, 0, 24, []Block{{0, 4}, {8, 16}}, false},
		{"tiles of resized", must(Contiguous(2, must(Resized(i32, 0, 8)))), 8, 0, 16, []Block{{0, 4}, {8, 4}}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dt := tc.dt
			if dt.Size() != tc.size || dt.LB() != tc.lb || dt.Extent() != tc.extent {
				t.Errorf("%v: size %d lb %d extent %d, want %d %d %d", dt, dt.Size(), dt.LB(), dt.Extent(), tc.size, tc.lb, tc.extent)
			}
			if len(tc.blocks) != len(dt.Blocks()) || len(tc.blocks) > 0 && !reflect.DeepEqual(dt.Blocks(), tc.blocks) {
				t.Errorf("%v: blocks %v, want %v", dt, dt.Blocks(), tc.blocks)
			}
			if dt.Contiguous() != tc.contiguous {
				t.Errorf("%v: Contiguous() = %v", dt, dt.Contiguous())
			}
			checkFlat(t, dt)
		})
	}
}

func TestDatatypeErrors(t *testing.T) {
	cases := []struct {
		name string
		f    func() (Datatype, error)
	}{
		{"negative count", func() (Datatype, error) { return Contiguous(-1, Byte) }},
		{"zero old", func() (Datatype, error) { return Contiguous(1, Datatype{}) }},
		{"negative blocklen", func() (Datatype, error) { return Vector(1, -1, 1, Byte) }},
		{"length mismatch", func() (Datatype, error) { return Indexed([]int{1}, []int{1, 2}, Byte) }},
		{"struct mismatch", func() (Datatype, error) { return Struct([]int{1}, []int64{0}, nil) }},
		{"subarray out of range", func() (Datatype, error) { return Subarray([]int{4}, []int{3}, []int{2}, OrderC, Byte) }},
		{"subarray order", func() (Datatype, error) { return Subarray([]int{4}, []int{3}, []int{0}, Order(7), Byte) }},
		{"negative extent", func() (Datatype, error) { return Resized(Byte, 0, -1) }},
		{"too many blocks", func() (Datatype, error) {
			v, _ := Vector(1<<14, 1, 2, Byte)
			return Vector(1<<13, 1, 1<<16, v)
		}},
		{"overflow", func() (Datatype, error) { return Hvector(3, 1, 1<<62, Byte) }},
	}
	for _, c := range cases {
		if _, err := c.f(); !errors.Is(err, ErrArg) {
			t.Errorf("%s: got %v, want ErrArg", c.name, err)
		}
	}
}

func TestTypeOf(t *testing.T) {
	type myf float32
	if TypeOf[float64]() != Float64 || TypeOf[uint8]() != Uint8 || TypeOf[myf]().Size() != 4 {
		t.Fatal("TypeOf mismatch")
	}
}

// fuzzType builds a small datatype from fuzz input; nil when the input runs
// out or a constructor rejects its arguments.
func fuzzType(data []byte, depth int) (Datatype, []byte) {
	next := func() int {
		if len(data) == 0 {
			return 0
		}
		v := int(data[0])
		data = data[1:]
		return v
	}
	if depth > 3 || len(data) == 0 {
		return []Datatype{Byte, Int16, Int32, Float64}[next()%4], data
	}
	k := next() % 10
	if k >= 8 {
		return []Datatype{Byte, Int16, Int32, Float64}[next()%4], data
	}
	old, rest := fuzzType(data, depth+1)
	data = rest
	small := func() int { return next() % 5 }
	sdisp := func() int { return next()%9 - 3 }
	var dt Datatype
	var err error
	switch k {
	case 0:
		dt, err = Contiguous(small(), old)
	case 1:
		dt, err = Vector(small(), small(), sdisp(), old)
	case 2:
		dt, err = Hvector(small(), small(), int64(sdisp()*3), old)
	case 3:
		n := small()
		lens, displs := make([]int, n), make([]int, n)
		for i := range lens {
			lens[i], displs[i] = small(), sdisp()
		}
		dt, err = Indexed(lens, displs, old)
	case 4:
		n := small()
		lens, displs := make([]int, n), make([]int64, n)
		for i := range lens {
			lens[i], displs[i] = small(), int64(sdisp()*5)
		}
		dt, err = Hindexed(lens, displs, old)
	case 5:
		nd := 1 + next()%3
		sizes, subs, starts := make([]int, nd), make([]int, nd), make([]int, nd)
		for i := range sizes {
			sizes[i] = 1 + next()%4
			subs[i] = next() % (sizes[i] + 1)
			starts[i] = next() % (sizes[i] - subs[i] + 1)
		}
		dt, err = Subarray(sizes, subs, starts, Order(next()%2), old)
	case 6:
		dt, err = Resized(old, int64(sdisp()), int64(next()%20))
	case 7:
		o2, rest := fuzzType(data, depth+1)
		data = rest
		dt, err = Struct([]int{small(), small()}, []int64{int64(sdisp()), int64(sdisp() * 7)}, []Datatype{old, o2})
	}
	if err != nil {
		return Datatype{}, data
	}
	return dt, data
}

// FuzzDatatypeFlatten checks every flattening against the naive walk.
func FuzzDatatypeFlatten(f *testing.F) {
	f.Add([]byte{1, 0, 3, 2, 4, 8})
	f.Add([]byte{5, 3, 2, 4, 2, 1, 3, 2, 0, 5, 3, 1, 0, 1})
	f.Add([]byte{7, 6, 1, 9, 2, 3, 4, 5, 6, 7, 8, 2, 2, 2})
	f.Add([]byte{0, 1, 2, 3, 3, 3, 4, 4, 4, 4, 4, 4, 4, 4, 4})
	f.Fuzz(func(t *testing.T, data []byte) {
		dt, _ := fuzzType(data, 0)
		if !dt.Valid() {
			return
		}
		checkFlat(t, dt)
	})
}
