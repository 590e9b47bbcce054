package launcher

import (
	"errors"
	"io"
	"sync"
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
// Both start when the job has been sent (Arm). Before that, a write that
// fails is a proxy that could not even take its job: a failed start, to be
// reported with its launcher's exit status. And the stream's end is held
// back until then: a proxy may run its whole job and exit before the
// goroutine that sent the job is scheduled again, and yamux, seeing the
// end, would fail that send (ErrSessionShutdown) though it was delivered.
type ReadToEnd struct {
	Proc
	gone      atomic.Bool
	armed     chan struct{}
	stopped   chan struct{}
	armOnce   sync.Once
	closeOnce sync.Once
}

// NewReadToEnd wraps p; it is not armed yet.
func NewReadToEnd(p Proc) *ReadToEnd {
	return &ReadToEnd{Proc: p, armed: make(chan struct{}), stopped: make(chan struct{})}
}

// Arm starts swallowing writes that fail because the peer is gone, and
// lets the stream's end through.
func (c *ReadToEnd) Arm() {
	c.armOnce.Do(func() { close(c.armed) })
}

func (c *ReadToEnd) isArmed() bool {
	select {
	case <-c.armed:
		return true
	default:
		return false
	}
}

func (c *ReadToEnd) Read(b []byte) (int, error) {
	n, err := c.Proc.Read(b)
	if err != nil && !c.isArmed() {
		select {
		case <-c.armed:
		case <-c.stopped:
		}
	}
	return n, err
}

func (c *ReadToEnd) Write(b []byte) (int, error) {
	if c.gone.Load() {
		return len(b), nil
	}
	n, err := c.Proc.Write(b)
	if err != nil && PeerGone(err) && c.isArmed() {
		c.gone.Store(true)
		return len(b), nil
	}
	return n, err
}

// Close releases a read held at the stream's end, then closes the stream.
func (c *ReadToEnd) Close() error {
	c.stop()
	return c.Proc.Close()
}

// Kill releases a held read, then kills the proxy.
func (c *ReadToEnd) Kill() error {
	c.stop()
	return c.Proc.Kill()
}

func (c *ReadToEnd) stop() {
	c.closeOnce.Do(func() { close(c.stopped) })
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
