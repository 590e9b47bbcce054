package launcher

import (
	"net"
	"os"
	"sync/atomic"
	"testing"

	"golang.org/x/crypto/ssh/knownhosts"
)

// TestSSHServer is the in-process SSH server of ssh_test.go, for the
// end-to-end tests in package launcher_test: every host name resolves (via
// ~/.ssh/config "Host *") to a relay in front of it, which Freeze stops.
type TestSSHServer struct {
	Home       string // local HOME with .ssh/{config,known_hosts,id_ed25519}
	RemoteHome string // HOME of the commands the server runs
	paused     atomic.Bool
	drop       func()
}

// Freeze stops the relay moving bytes, as a network cut does.
func (s *TestSSHServer) Freeze() { s.paused.Store(true) }

// Drop closes the relayed connections, as sshd does when its own
// ClientAliveInterval gives up on a silent client.
func (s *TestSSHServer) Drop() { s.drop() }

func NewTestSSHServer(t *testing.T) *TestSSHServer {
	e := newClientEnv(t)
	s := &TestSSHServer{Home: e.home, RemoteHome: e.srv.remoteHome}
	addr, drop := relay(t, "127.0.0.1:0", e.srv.addr, &s.paused)
	s.drop = drop
	_, port, _ := net.SplitHostPort(addr)
	e.writeConfig(t, "Host *\n  HostName 127.0.0.1\n  Port "+port+"\n")
	line := knownhosts.Line([]string{knownhosts.Normalize(addr)}, e.srv.hostKeys[0].PublicKey())
	if err := os.WriteFile(e.knownHostsFile(), []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return s
}

// ForkThreadsStarted is how many fork threads StartLocked has started.
func ForkThreadsStarted() int {
	forkThread.mu.Lock()
	defer forkThread.mu.Unlock()
	return forkThread.started
}
