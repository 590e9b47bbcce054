//go:build !linux

package proxy

import (
	"io"
	"time"
)

// waitSent, without Linux's count of a socket's unsent bytes, waits for
// the launcher to close the session (bounded), as every proxy did before
// the launcher read a stream to its end.
func waitSent(rw io.ReadWriteCloser, lost <-chan error, bound time.Duration) {
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case <-lost:
	case <-t.C:
	}
}
