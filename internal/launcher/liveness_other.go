//go:build !linux

package launcher

import (
	"net"
	"time"
)

// setLiveness: keepalive probes only (TCP_USER_TIMEOUT is Linux's).
func setLiveness(c net.Conn, d time.Duration) {
	if tc, ok := c.(*net.TCPConn); ok {
		step := d / 4
		tc.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: step, Interval: step, Count: 3})
	}
}
