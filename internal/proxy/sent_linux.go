//go:build linux

package proxy

import (
	"io"
	"syscall"
	"time"
	"unsafe"
)

// siocOutqNSD is SIOCOUTQNSD (linux/sockios.h): the bytes of a TCP
// socket's send queue not yet sent.
const siocOutqNSD = 0x894B

// waitSent returns once what was written to rw has left this host, the
// launcher has closed the session (lost), or bound has passed. A proxy
// that exits with data of the launcher's unread (a window update, rank 0's
// stdin) resets its TCP connection, and a reset discards what is still
// unsent in the send queue; what was sent stays readable at the launcher,
// which reads a stream to its end (launcher.ReadToEnd). A pipe, a Unix
// socket or an SSH channel's pipe keeps what was written after the
// writer exits: the write's return was enough.
func waitSent(rw io.ReadWriteCloser, lost <-chan error, bound time.Duration) {
	sc, ok := rw.(syscall.Conn)
	if !ok {
		return
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return
	}
	var deadline time.Time
	delay := 50 * time.Microsecond
	for {
		n, ok := unsent(raw)
		if !ok || n == 0 {
			return
		}
		// The launcher's receive window is full (it is writing a burst
		// of output to a slow terminal): wait for it to read.
		if deadline.IsZero() {
			deadline = time.Now().Add(bound)
		} else if time.Now().After(deadline) {
			return
		}
		t := time.NewTimer(delay)
		select {
		case <-lost:
			t.Stop()
			return
		case <-t.C:
		}
		delay = min(2*delay, 10*time.Millisecond)
	}
}

// unsent is the socket's unsent byte count; ok is false when the
// descriptor is not a TCP socket (the ioctl is refused).
func unsent(raw syscall.RawConn) (n int, ok bool) {
	var v int32
	var errno syscall.Errno
	if err := raw.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, siocOutqNSD, uintptr(unsafe.Pointer(&v)))
	}); err != nil || errno != 0 {
		return 0, false
	}
	return int(v), true
}
