// Package launcher starts gompi-proxy processes on hosts. Every backend
// (fork, ssh, rsh agent) hands back the same thing: a byte stream wired to
// the proxy's stdin and stdout, over which gompiexec runs one yamux session.
// Everything above this interface is identical for local and remote hosts.
package launcher

import (
	"context"
	"io"
	"time"
)

// Spec describes one proxy to start.
type Spec struct {
	// Host is the host name as given in the host list.
	Host string
	// User is the remote login name; empty means the backend's default.
	User string
	// Argv is the proxy command line; Argv[0] is the gompi-proxy path on Host.
	Argv []string
	// Env holds extra KEY=VALUE pairs for the proxy process.
	Env []string
	// Stderr receives the proxy's own diagnostics (not rank output, which
	// travels inside the session). Nil discards them.
	Stderr io.Writer
}

// Proc is a started proxy. Read returns the proxy's stdout, Write feeds its
// stdin, and Close closes stdin, which the proxy takes as loss of its
// launcher.
type Proc interface {
	io.ReadWriteCloser
	// Wait blocks until the proxy (or the channel to it) has ended.
	Wait() error
	// Kill ends the proxy forcibly; its ranks die with it.
	Kill() error
}

// Backend starts proxies on hosts.
type Backend interface {
	// Name is the -launcher name of this backend ("fork", "ssh", "rsh").
	Name() string
	// Start launches the proxy described by spec. Cancelling ctx aborts a
	// start still in progress; it does not end a proxy that has started.
	Start(ctx context.Context, spec Spec) (Proc, error)
}

// HeartbeatEnv, in a proxy's environment, makes it ping its launcher over
// the session at that interval and end the job on its host when pings go
// unanswered. Over a pipe (fork) loss is seen at once; over a network a
// silent cut may go unnoticed by the remote sshd for hours, and the ranks
// behind it would be left running.
const HeartbeatEnv = "GOMPI_PROXY_HEARTBEAT"

// DefaultHeartbeat is the interval remote proxies are started with; a
// proxy gives up after about three intervals without an answer.
const DefaultHeartbeat = 5 * time.Second

// ProxyEnv is the environment a proxy started by be needs beyond its
// own: the heartbeat for every backend that crosses a network.
func ProxyEnv(be Backend) []string {
	if be.Name() == "fork" {
		return nil
	}
	return []string{HeartbeatEnv + "=" + DefaultHeartbeat.String()}
}
