package launcher

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/gompi/gompi/internal/atomicfile"

	"golang.org/x/crypto/ssh"

	"github.com/gompi/gompi/internal/persist"
)

// PersistCacheDir, under the local home, records how to reach the
// persistent proxies of hosts: one file per user, host, proxy and build.
const PersistCacheDir = ".cache/gompi/persist"

// persistHandshake bounds the handshake with a host's persistent proxy.
const persistHandshake = 10 * time.Second

// persistFile is where the launcher records t's persistent proxy for the
// proxy command and local build sum.
func (b *SSH) persistFile(t *sshTarget, proxy, sum string) string {
	h := sha256.Sum256([]byte(strings.Join([]string{t.user, t.addr, proxy, sum}, "\x00")))
	return filepath.Join(b.cfg.Home, PersistCacheDir, hex.EncodeToString(h[:16]))
}

// recordPersistent stores the answer of gompi-proxy -persist-start that a
// login session printed, for the next launch on t.
func (b *SSH) recordPersistent(t *sshTarget, proxy, sum, line string) {
	in, err := persist.ParseInfo(line)
	if err != nil {
		b.cfg.Log.Warn("no persistent proxy", "host", t.alias, "err", err)
		return
	}
	f := b.persistFile(t, proxy, sum)
	// Atomically: launches from several machines may share this home.
	err = os.MkdirAll(filepath.Dir(f), 0o700)
	if err == nil {
		err = atomicfile.Write(f, []byte(persist.FormatInfo(in, nil)+"\n"), 0o600)
	}
	if err != nil {
		b.cfg.Log.Warn("cannot record the persistent proxy", "host", t.alias, "err", err)
		return
	}
	b.cfg.Log.Debug("persistent proxy recorded", "host", t.alias, "socket", in.Sock)
}

// startPersistent starts the job's proxy through t's persistent proxy, if
// one was recorded and still answers with the recorded token. On failure
// the record is dropped (the next login starts or finds the daemon again)
// and the connection is left as it was.
func (b *SSH) startPersistent(client *ssh.Client, via []*ssh.Client, t *sshTarget, spec Spec, sum string) (Proc, error) {
	f := b.persistFile(t, spec.Argv[0], sum)
	line, err := os.ReadFile(f)
	if err != nil {
		return nil, err
	}
	in, err := persist.ParseInfo(strings.TrimSpace(string(line)))
	if err != nil {
		os.Remove(f)
		return nil, fmt.Errorf("%s: %w", f, err)
	}
	p, err := b.dialPersistent(client, via, t, spec, in)
	if err != nil {
		os.Remove(f)
		var oc *ssh.OpenChannelError
		if errors.Is(err, persist.ErrAuth) || errors.Is(err, persist.ErrProtocol) {
			// Not a daemon that has gone (that is routine), but a socket
			// that does not know our token: worth a word.
			b.cfg.Log.Warn("refusing a persistent proxy socket", "host", t.alias, "socket", in.Sock, "err", err)
		} else if !errors.As(err, &oc) {
			b.cfg.Log.Debug("persistent proxy failed", "host", t.alias, "err", err)
		}
		return nil, err
	}
	b.cfg.Log.Debug("ssh persistent proxy", "host", t.alias, "socket", in.Sock)
	return p, nil
}

// dialPersistent opens the job's stderr and main channels to the daemon's
// socket (concurrently: each costs a round trip) and runs the handshakes.
func (b *SSH) dialPersistent(client *ssh.Client, via []*ssh.Client, t *sshTarget, spec Spec, in persist.Info) (Proc, error) {
	nonceE, err := persist.NewNonce()
	if err != nil {
		return nil, err
	}
	nonceM, err := persist.NewNonce()
	if err != nil {
		return nil, err
	}
	type result struct {
		c   net.Conn
		err error
	}
	open := func(role, nonce string, req persist.Request, out chan<- result) {
		c, err := client.Dial("unix", in.Sock)
		if err != nil {
			out <- result{nil, fmt.Errorf("ssh %s: persistent proxy %s: %w", t.alias, in.Sock, err)}
			return
		}
		// The handshake must not hang on a socket that never answers;
		// closing the channel unblocks it.
		tm := time.AfterFunc(persistHandshake, func() { c.Close() })
		_, err = persist.Dial(c, in.Token, role, nonce, req)
		if !tm.Stop() && err != nil {
			err = fmt.Errorf("no answer within %v: %w", persistHandshake, err)
		}
		if err != nil {
			c.Close()
			out <- result{nil, fmt.Errorf("ssh %s: persistent proxy %s: %w", t.alias, in.Sock, err)}
			return
		}
		out <- result{c, nil}
	}
	errCh, mainCh := make(chan result, 1), make(chan result, 1)
	go open(persist.RoleStderr, nonceE, persist.Request{}, errCh)
	go open(persist.RoleMain, nonceM, persist.Request{Env: spec.Env, Idle: b.cfg.Persist.String(), Stderr: nonceE}, mainCh)
	e, m := <-errCh, <-mainCh
	if e.err != nil || m.err != nil {
		if e.c != nil {
			e.c.Close()
		}
		if m.c != nil {
			m.c.Close()
		}
		return nil, errors.Join(m.err, e.err)
	}
	w := spec.Stderr
	if w == nil {
		w = io.Discard
	}
	run := &persistRun{main: m.c, exited: make(chan struct{})}
	go func() {
		// The proxy's stderr ends when it exits.
		io.Copy(w, e.c)
		e.c.Close()
		close(run.exited)
	}()
	p := &sshProc{host: t.alias, log: b.cfg.Log, client: client, via: via, sess: run,
		stdin: halfCloser{m.c}, stdout: m.c, done: make(chan struct{})}
	go func() { client.Wait(); p.shutdown(nil) }()
	if b.cfg.KeepaliveInterval > 0 {
		go p.keepalive(b.cfg.KeepaliveInterval, b.cfg.KeepaliveCountMax)
	}
	return p, nil
}

// persistRun is a proxy a persistent proxy started, as sshProc sees it.
type persistRun struct {
	main   net.Conn
	exited chan struct{} // its stderr has ended: it has exited
	once   sync.Once
}

// Wait returns when the proxy has exited (or the connection is gone); its
// exit status does not travel, its report to gompiexec does.
func (r *persistRun) Wait() error {
	<-r.exited
	return nil
}

// Signal can only hang up: the proxy takes that as loss of its launcher
// and ends its ranks.
func (r *persistRun) Signal(ssh.Signal) error {
	r.once.Do(func() { r.main.Close() })
	return nil
}

// halfCloser's Close sends EOF, leaving the other direction open: the
// proxy still reports after its launcher closed its stdin.
type halfCloser struct{ c net.Conn }

func (h halfCloser) Write(b []byte) (int, error) { return h.c.Write(b) }
func (h halfCloser) Close() error {
	if cw, ok := h.c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return h.c.Close()
}
