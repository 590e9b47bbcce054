// The test fixtures of the SSH backend: an in-process SSH server that runs
// commands locally, a client home with keys and ssh_config, and a TCP relay
// that can freeze like a cut network.

package launcher

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// testServer is an in-process SSH server on 127.0.0.1 that runs exec
// requests locally with /bin/sh -c, HOME set to its own "remote" home.
type testServer struct {
	t          *testing.T
	ln         net.Listener
	addr       string
	port       string
	hostKeys   []ssh.Signer
	authorized ssh.PublicKey
	remoteHome string

	mu     sync.Mutex
	cmds   []string
	users  []string
	active int // SSH connections being served
	tunnel int // direct-tcpip channels opened
	// direct-streamlocal channels opened
	streamlocal int
	wg          sync.WaitGroup
	conns       []net.Conn
}

func newSigner(t *testing.T, kind string) ssh.Signer {
	t.Helper()
	var key any
	switch kind {
	case "ed25519":
		_, k, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		key = k
	case "ecdsa":
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		key = k
	}
	s, err := ssh.NewSignerFromKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// startServer listens on 127.0.0.1 with the given host key types.
func startServer(t *testing.T, authorized ssh.PublicKey, hostKeyTypes ...string) *testServer {
	t.Helper()
	if len(hostKeyTypes) == 0 {
		hostKeyTypes = []string{"ed25519"}
	}
	s := &testServer{t: t, authorized: authorized, remoteHome: t.TempDir()}
	os.Mkdir(s.remoteHome+"/tmp", 0o700)
	for _, k := range hostKeyTypes {
		s.hostKeys = append(s.hostKeys, newSigner(t, k))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.ln, s.addr = ln, ln.Addr().String()
	_, s.port, _ = net.SplitHostPort(s.addr)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() { defer s.wg.Done(); s.serve(c) }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *testServer) commands() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.cmds...)
}

func (s *testServer) serve(c net.Conn) {
	cfg := &ssh.ServerConfig{
		PublicKeyCallback: func(md ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			s.mu.Lock()
			s.users = append(s.users, md.User())
			s.mu.Unlock()
			if s.authorized != nil && string(key.Marshal()) == string(s.authorized.Marshal()) {
				return nil, nil
			}
			return nil, errors.New("not authorized")
		},
	}
	for _, k := range s.hostKeys {
		cfg.AddHostKey(k)
	}
	sc, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		c.Close()
		return
	}
	defer sc.Close()
	s.mu.Lock()
	s.active++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.active--
		s.mu.Unlock()
	}()
	go func() {
		// Like OpenSSH: keepalive@openssh.com gets a failure reply, which
		// still proves the server alive.
		for r := range reqs {
			r.Reply(false, nil)
		}
	}()
	var wg sync.WaitGroup
	for nc := range chans {
		// Forwarding: connect as sshd would (onwards for a jump host, to
		// the Unix socket as the user), and splice.
		var network, addr string
		switch nc.ChannelType() {
		case "direct-tcpip":
			var p struct {
				Host     string
				Port     uint32
				OrigHost string
				OrigPort uint32
			}
			if ssh.Unmarshal(nc.ExtraData(), &p) == nil {
				network, addr = "tcp", net.JoinHostPort(p.Host, fmt.Sprint(p.Port))
			}
		case "direct-streamlocal@openssh.com":
			var p struct {
				Path      string
				Reserved0 string
				Reserved1 uint32
			}
			if ssh.Unmarshal(nc.ExtraData(), &p) == nil {
				network, addr = "unix", p.Path
			}
		case "session":
		default:
			nc.Reject(ssh.UnknownChannelType, "no")
			continue
		}
		if nc.ChannelType() != "session" {
			if network == "" {
				nc.Reject(ssh.ConnectionFailed, "bad request")
				continue
			}
			up, err := net.Dial(network, addr)
			if err != nil {
				nc.Reject(ssh.ConnectionFailed, err.Error())
				continue
			}
			ch, creqs, err := nc.Accept()
			if err != nil {
				up.Close()
				continue
			}
			s.mu.Lock()
			if network == "tcp" {
				s.tunnel++
			} else {
				s.streamlocal++
			}
			s.mu.Unlock()
			go ssh.DiscardRequests(creqs)
			wg.Add(2)
			go func() {
				defer wg.Done()
				io.Copy(up, ch)
				up.(interface{ CloseWrite() error }).CloseWrite()
			}()
			go func() { defer wg.Done(); io.Copy(ch, up); ch.Close(); up.Close() }()
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); s.session(ch, creqs) }()
	}
	wg.Wait()
}

func (s *testServer) session(ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer ch.Close()
	var cmd *exec.Cmd
	exited := make(chan struct{})
	for {
		var r *ssh.Request
		var ok bool
		select {
		case r, ok = <-reqs:
		case <-exited:
			return
		}
		if !ok {
			// The client hung up. Like sshd, the command sees EOF on
			// stdin (the copy above ends); one ignoring it is killed.
			if cmd != nil {
				select {
				case <-exited:
				case <-time.After(5 * time.Second):
					syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
					<-exited
				}
			}
			return
		}
		switch r.Type {
		case "exec":
			var p struct{ Command string }
			if ssh.Unmarshal(r.Payload, &p) != nil || cmd != nil {
				r.Reply(false, nil)
				continue
			}
			s.mu.Lock()
			s.cmds = append(s.cmds, p.Command)
			s.mu.Unlock()
			cmd = exec.Command("/bin/sh", "-c", p.Command)
			cmd.Env = []string{"HOME=" + s.remoteHome, "PATH=/usr/bin:/bin", "TMPDIR=" + s.remoteHome + "/tmp"}
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			cmd.Stdout, cmd.Stderr = ch, ch.Stderr()
			in, _ := cmd.StdinPipe()
			if err := cmd.Start(); err != nil {
				r.Reply(false, nil)
				return
			}
			r.Reply(true, nil)
			go func() { io.Copy(in, ch); in.Close() }()
			go func() {
				err := cmd.Wait()
				status := 0
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
						status = 128 + int(ws.Signal())
					} else {
						status = ee.ExitCode()
					}
				}
				ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{uint32(status)}))
				close(exited)
			}()
		case "signal":
			var p struct{ Signal string }
			ssh.Unmarshal(r.Payload, &p)
			if cmd != nil && p.Signal == "KILL" {
				syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			}
			if r.WantReply {
				r.Reply(true, nil)
			}
		default:
			r.Reply(false, nil)
		}
	}
}

// clientEnv is a local home with an identity the server accepts, a
// known_hosts entry for it and an ssh_config naming it "testhost".
type clientEnv struct {
	home   string
	srv    *testServer
	signer ssh.Signer
}

func writeKey(t *testing.T, path string, key any, passphrase string) {
	t.Helper()
	var blk *pem.Block
	var err error
	if passphrase == "" {
		blk, err = ssh.MarshalPrivateKey(key, "")
	} else {
		blk, err = ssh.MarshalPrivateKeyWithPassphrase(key, "", []byte(passphrase))
	}
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Dir(path), 0o700)
	if err := os.WriteFile(path, pem.EncodeToMemory(blk), 0o600); err != nil {
		t.Fatal(err)
	}
}

func newClientEnv(t *testing.T, hostKeyTypes ...string) *clientEnv {
	t.Helper()
	home := t.TempDir()
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	writeKey(t, filepath.Join(home, ".ssh", "id_ed25519"), priv, "")
	signer, _ := ssh.NewSignerFromKey(priv)
	srv := startServer(t, signer.PublicKey(), hostKeyTypes...)
	e := &clientEnv{home: home, srv: srv, signer: signer}
	e.writeConfig(t, "Host testhost\n  HostName 127.0.0.1\n  Port "+srv.port+"\n")
	for _, k := range srv.hostKeys {
		e.addKnown(t, k.PublicKey())
	}
	return e
}

func (e *clientEnv) writeConfig(t *testing.T, s string) {
	if err := os.WriteFile(filepath.Join(e.home, ".ssh", "config"), []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

func (e *clientEnv) knownHostsFile() string { return filepath.Join(e.home, ".ssh", "known_hosts") }

func (e *clientEnv) addKnown(t *testing.T, k ssh.PublicKey) { e.addKnownAt(t, e.srv.addr, k) }

func (e *clientEnv) addKnownAt(t *testing.T, addr string, k ssh.PublicKey) {
	f, err := os.OpenFile(e.knownHostsFile(), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(f, knownhosts.Line([]string{knownhosts.Normalize(addr)}, k))
	f.Close()
}

func (e *clientEnv) backend(t *testing.T, mod func(*SSHConfig)) *SSH {
	t.Helper()
	// Generous: the machine may be loaded (race detector, other jobs).
	cfg := SSHConfig{Home: e.home, AgentSocket: "none", ConnectTimeout: 20 * time.Second}
	if mod != nil {
		mod(&cfg)
	}
	b, err := NewSSH(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func startOK(t *testing.T, b *SSH, spec Spec) Proc {
	t.Helper()
	if spec.Host == "" {
		spec.Host = "testhost"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := b.Start(ctx, spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { p.Kill(); p.Wait() })
	return p
}

// relay forwards TCP from listen to target; while *paused is set it stops
// moving bytes, as a cut network does.
func relay(t *testing.T, listen, target string, paused *atomic.Bool) (string, func()) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		t.Error(err)
		return "", func() {}
	}
	return serveRelay(t, ln, target, paused)
}

func serveRelay(t *testing.T, ln net.Listener, target string, paused *atomic.Bool) (string, func()) {
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	dropAll := func() {
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	}
	t.Cleanup(func() {
		close(done)
		ln.Close()
		dropAll()
	})
	pipe := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			for paused != nil && paused.Load() {
				select {
				case <-done:
					return
				case <-time.After(10 * time.Millisecond):
				}
			}
			if n > 0 {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				dst.Close()
				return
			}
		}
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, u)
			mu.Unlock()
			go pipe(u, c)
			go pipe(c, u)
		}
	}()
	return ln.Addr().String(), dropAll
}
