//go:build linux

package mpi

import (
	"os"
	"testing"
)

// BenchmarkCMARead4M is the ceiling of the same-host rendezvous: one
// process_vm_readv of 4 MiB (here from this process itself).
func BenchmarkCMARead4M(b *testing.B) {
	src := make([]byte, 4<<20)
	dst := make([]byte, 4<<20)
	for i := range src {
		src[i] = byte(i)
	}
	b.SetBytes(int64(len(src)))
	for i := 0; i < b.N; i++ {
		if err := cmaRead(os.Getpid(), bufAddr(src), dst); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCopy4M is a plain 4 MiB memcpy for scale.
func BenchmarkCopy4M(b *testing.B) {
	src := make([]byte, 4<<20)
	dst := make([]byte, 4<<20)
	b.SetBytes(int64(len(src)))
	for i := 0; i < b.N; i++ {
		copy(dst, src)
	}
}
