package control

import (
	"encoding/binary"
	"io"
)

// yamux (v0.1.x) writes every frame with two writes, its 12-byte header
// and then its body. Over a TCP connection (the slurm launcher's
// connect-back, TCP_NODELAY as Go sets it) or a pipe each is a segment or
// a wake-up of its own, so the reader typically wakes once for the header
// and again for the body: every control message, output chunk and exit
// report paid two of the receiver's wake-ups, the launch's critical path
// among them. coalesceConn holds a data frame's header back until its body
// comes and writes both at once. Both ends of a session use it (Coalesce).

// yamuxHeaderSize, yamuxVersion and yamuxTypeData are yamux's wire format
// (version, type, flags, stream id, length).
const (
	yamuxHeaderSize = 12
	yamuxVersion    = 0
	yamuxTypeData   = 0
)

// coalesceConn is the byte stream under a yamux session (every Write comes
// from the session's one send goroutine).
type coalesceConn struct {
	io.ReadWriteCloser
	hdr  [yamuxHeaderSize]byte
	held bool
	buf  []byte
}

// Coalesce wraps rw, the byte stream of a yamux session, so that each data
// frame leaves in one write.
func Coalesce(rw io.ReadWriteCloser) io.ReadWriteCloser {
	return &coalesceConn{ReadWriteCloser: rw}
}

// Write holds the header of a data frame with a body (yamux writes that
// body next, always: a sender that gives up leaves it a copy) and writes
// it in front of the next write; everything else passes through at once:
// window updates, pings and go-aways have no body to wait for.
func (c *coalesceConn) Write(p []byte) (int, error) {
	if c.held {
		c.held = false
		c.buf = append(append(c.buf[:0], c.hdr[:]...), p...)
		n, err := c.ReadWriteCloser.Write(c.buf)
		n -= yamuxHeaderSize
		if n < 0 {
			n = 0
		}
		return n, err
	}
	if len(p) == yamuxHeaderSize && p[0] == yamuxVersion && p[1] == yamuxTypeData && binary.BigEndian.Uint32(p[8:]) > 0 {
		copy(c.hdr[:], p)
		c.held = true
		return len(p), nil
	}
	return c.ReadWriteCloser.Write(p)
}
