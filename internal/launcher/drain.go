package launcher

import (
	"errors"
	"io"
	"sync/atomic"
	"syscall"
)

// ReadToEnd wraps a proxy's byte stream, on the launcher's side, so that
// everything the proxy sent is read even when the proxy has already
// exited. A proxy exits as soon as its `done` has left its host
// (docs/control.md, "Order and failure" step 3); a write of the launcher's
// that comes later (a yamux window update while it reads the last output,
// rank 0's stdin) meets a closed pipe or the proxy's reset. yamux takes a
// failed write as the end of the session and closes the stream under it,
// before its reader has read what the kernel still holds: Linux keeps
// received data readable after a reset, and a pipe's after its writer
// closed, but not after we close our end. So once a write has failed
// because the peer is gone, later writes report success and go nowhere,
// and the reader runs on to the stream's end (EOF or the reset), which
// ends the session only after the proxy's last frame.
//
// It does so once armed (Arm, after the job has been sent): a proxy that
// could not even take its job failed to start, and that failure, with its
// launcher's exit status, is what the caller must report.
type ReadToEnd struct {
	Proc
	armed, gone atomic.Bool
}

// Arm starts swallowing writes that fail because the peer is gone.
func (c *ReadToEnd) Arm() { c.armed.Store(true) }

func (c *ReadToEnd) Write(b []byte) (int, error) {
	if c.gone.Load() {
		return len(b), nil
	}
	n, err := c.Proc.Write(b)
	if err != nil && c.armed.Load() && PeerGone(err) {
		c.gone.Store(true)
		return len(b), nil
	}
	return n, err
}

// PeerGone reports whether a write failed because the other end of the
// stream has closed it: a pipe whose reader exited (EPIPE), a TCP
// connection the peer reset (ECONNRESET, then EPIPE), an SSH channel the
// remote side closed (io.EOF), an in-memory pipe (io.ErrClosedPipe). What
// the peer sent before remains readable in each case. Not our own close,
// nor a backend's verdict that the connection was lost (an SSH keepalive
// timeout): reading would fail too.
func PeerGone(err error) bool {
	return errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrClosedPipe)
}
