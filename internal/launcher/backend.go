// Package launcher starts gompi-proxy processes on hosts. Every backend
// (fork, ssh, rsh agent) hands back the same thing: a byte stream wired to
// the proxy's stdin and stdout, over which gompiexec runs one yamux session.
// Everything above this interface is identical for local and remote hosts.
package launcher

import (
	"context"
	"io"
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
