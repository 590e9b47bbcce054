package mpiio

import (
	"testing"

	mpi "github.com/gompi/gompi/runtime"
)

// FuzzStreamBytes checks the end-of-file arithmetic of SeekEnd
// (view.streamBytes) against counting stream bytes one by one through
// fileOff, for random strided views (blocks with gaps, a resized extent,
// a displacement) and file sizes.
func FuzzStreamBytes(f *testing.F) {
	f.Add(uint8(2), uint8(3), uint8(5), uint8(7), uint8(0), uint16(40), uint16(100))
	f.Add(uint8(1), uint8(1), uint8(0), uint8(0), uint8(3), uint16(0), uint16(9))
	f.Add(uint8(3), uint8(2), uint8(1), uint8(9), uint8(17), uint16(5), uint16(1000))
	f.Fuzz(func(t *testing.T, nb, blen, gap, pad, lb uint8, disp, size uint16) {
		n := int(nb%4) + 1
		lens := make([]int, n)
		displs := make([]int64, n)
		at := int64(lb % 16)
		for i := range lens {
			lens[i] = int(blen%5) + 1 + i%2
			displs[i] = at
			at += int64(lens[i]) + int64(gap%6)*int64(i%2+1)
		}
		ft, err := mpi.Hindexed(lens, displs, mpi.Byte)
		if err != nil {
			t.Skip(err)
		}
		if ft, err = mpi.Resized(ft, 0, at+int64(pad%8)); err != nil {
			t.Skip(err)
		}
		v, err := newView(int64(disp%64), mpi.Byte, ft)
		if err != nil {
			t.Skip(err)
		}
		sz := int64(size % 400)
		want := int64(0)
		for pos := int64(0); v.fileOff(pos) < sz; pos++ {
			want++
		}
		if got := v.streamBytes(sz); got != want {
			t.Fatalf("view %+v, size %d: streamBytes %d, want %d", v, sz, got, want)
		}
	})
}
