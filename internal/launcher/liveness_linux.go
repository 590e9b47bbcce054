//go:build linux

package launcher

import (
	"net"
	"syscall"
	"time"
)

// tcpUserTimeout is TCP_USER_TIMEOUT (linux/tcp.h), absent from package
// syscall.
const tcpUserTimeout = 0x12

// setLiveness makes a connect-back connection fail within about d when
// its peer's host vanishes (a cut cable, a dead node): keepalive probes
// while idle, and TCP_USER_TIMEOUT while data waits unacknowledged, when
// keepalives are not sent. Pipes and SSH have their own ways; a bare TCP
// connection would otherwise wait for the kernel's minutes-long retries.
func setLiveness(c net.Conn, d time.Duration) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return
	}
	step := d / 4
	tc.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: step, Interval: step, Count: 3})
	if raw, err := tc.SyscallConn(); err == nil {
		raw.Control(func(fd uintptr) {
			syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpUserTimeout, int(d/time.Millisecond))
		})
	}
}
