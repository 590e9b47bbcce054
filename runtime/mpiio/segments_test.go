package mpiio

import (
	"bytes"
	"math/rand"
	"os"
	"path/filepath"
	"testing"
)

// writeSegments: segments in any order, runs longer than IOV_MAX, gaps
// between runs, and zero-length segments all land where they belong.
func TestWriteSegments(t *testing.T) {
	for _, tc := range []struct {
		name   string
		n, gap int // segments; a gap after every gap-th one (0: none)
	}{
		{"one", 1, 0},
		{"beyond-iov-max", 3*iovMax + 7, 0},
		{"gaps", 2500, 300},
		{"every-other", 64, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fd, err := os.Create(filepath.Join(t.TempDir(), "f"))
			if err != nil {
				t.Fatal(err)
			}
			defer fd.Close()
			f := &File{fd: fd, hints: config{syncWrite: true}}
			rng := rand.New(rand.NewSource(int64(tc.n)))
			var want []byte
			var segs []segment
			for i := 0; i < tc.n; i++ {
				b := make([]byte, rng.Intn(700))
				rng.Read(b)
				if tc.gap > 0 && i%tc.gap == 0 {
					want = append(want, make([]byte, 1+rng.Intn(5000))...)
				}
				segs = append(segs, segment{int64(len(want)), b})
				want = append(want, b...)
			}
			rng.Shuffle(len(segs), func(i, j int) { segs[i], segs[j] = segs[j], segs[i] })
			if off, err := f.writeSegments(segs); err != nil {
				t.Fatalf("at %d: %v", off, err)
			}
			got, _ := os.ReadFile(fd.Name())
			if !bytes.Equal(got, want) {
				t.Fatalf("file differs: %d bytes, want %d", len(got), len(want))
			}
		})
	}
}
