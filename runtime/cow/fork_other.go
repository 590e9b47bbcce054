//go:build !linux

package cow

import (
	"fmt"
	"os"
	"runtime"
)

// Without Linux's fork-based snapshot, Make's memory is an ordinary Go
// allocation (kept reachable by the arenas table until Free).
func mapAnon(size uintptr) ([]byte, error) { return make([]byte, size), nil }

func unmap([]byte) error { return nil }

func snapshot(*os.File, []Region, Options) (*Snap, error) {
	return nil, fmt.Errorf("%w on %s", ErrUnavailable, runtime.GOOS)
}

// Private is false: there is no snapshot to capture memory for.
func Private([]byte) bool { return false }
