package launcher

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kevinburke/ssh_config"
	"golang.org/x/crypto/ssh"

	"github.com/gompi/gompi/internal/persist"
)

// Defaults of SSHConfig, applied by NewSSH to zero fields.
const (
	DefaultSSHConnectTimeout    = 10 * time.Second
	DefaultSSHRetries           = 3
	DefaultSSHKeepaliveInterval = 2 * time.Second
	DefaultSSHKeepaliveCountMax = 3
	firstRetryBackoff           = 250 * time.Millisecond
)

// SSHConfig configures the built-in SSH backend. The zero value is usable:
// NewSSH fills in every default documented here.
type SSHConfig struct {
	// Home is the local home directory whose .ssh/ holds config,
	// known_hosts and identity files. Default: os.UserHomeDir() ($HOME).
	Home string
	// ConfigFile is the ssh_config(5) file read for HostName, User, Port,
	// IdentityFile, UserKnownHostsFile and StrictHostKeyChecking. Default:
	// Home/.ssh/config, and a missing default file is not an error; "none"
	// reads no file.
	ConfigFile string
	// KnownHosts are the known_hosts files host keys are checked against.
	// Default: Home/.ssh/known_hosts; ssh_config's UserKnownHostsFile adds
	// more. New keys (AcceptNew) are appended to the first
	// UserKnownHostsFile, else to the first of these.
	KnownHosts []string
	// AcceptNew records the key of a host not yet in known_hosts and
	// proceeds, like OpenSSH's StrictHostKeyChecking=accept-new. A changed
	// key is refused regardless.
	AcceptNew bool
	// User is the login name when neither the host list (user@host) nor
	// ssh_config names one. Default: $USER, else the current user.
	User string
	// AgentSocket is the ssh-agent socket. Default: $SSH_AUTH_SOCK; "none"
	// disables the agent.
	AgentSocket string
	// ConnectTimeout bounds, per host, dialling with its retries and the
	// SSH handshake including authentication. Default 10s.
	ConnectTimeout time.Duration
	// Retries is how many more times a refused or reset connection (sshd
	// not up yet) is tried, backing off exponentially from 250ms, within
	// ConnectTimeout. Authentication and host key failures are never
	// retried. Default 3; negative means no retries.
	Retries int
	// KeepaliveInterval is the period of keepalive@openssh.com requests on
	// an established connection. Default 2s; negative disables keepalives.
	KeepaliveInterval time.Duration
	// KeepaliveCountMax is how many keepalives may go unanswered before the
	// connection is closed, ending the proxy's stream. Default 3.
	KeepaliveCountMax int
	// NoProxyUpload disables copying LocalProxy to hosts that lack the
	// proxy command (Spec.Argv[0]) or have a different build of it.
	NoProxyUpload bool
	// LocalProxy is the local gompi-proxy executable uploaded to hosts
	// that need it. Default: Spec.Argv[0] when that file exists locally.
	LocalProxy string
	// Persist, when positive, keeps a persistent proxy (package persist)
	// on every host, which exits after this long without jobs: the first
	// launch on a host starts it, later ones reach it through an SSH
	// direct-streamlocal channel, which runs no login shell on the host.
	// Where to reach it is recorded under Home/.cache/gompi/persist.
	// Default 0: off, every launch logs in.
	Persist time.Duration
	// Log receives connection and upload steps (Debug) and newly recorded
	// host keys and lost connections (Warn). Default: discarded.
	Log *slog.Logger
}

// SSH starts proxies over SSH with a built-in client
// (golang.org/x/crypto/ssh): one connection per host, which first checks
// (and if needed uploads) the proxy, then runs it in a session whose stdin
// and stdout are the Proc. It never prompts.
type SSH struct {
	cfg    SSHConfig
	sshCfg *ssh_config.Config // nil: no file

	mu     sync.Mutex // guards known_hosts appends and hashes
	hashes map[string]fileHash
}

// NewSSH validates cfg, applies its defaults and reads the ssh_config file.
func NewSSH(cfg SSHConfig) (*SSH, error) {
	if cfg.ConnectTimeout < 0 {
		return nil, fmt.Errorf("ssh: negative connect timeout %v", cfg.ConnectTimeout)
	}
	if cfg.Persist < 0 {
		return nil, fmt.Errorf("ssh: negative persistent proxy lifetime %v", cfg.Persist)
	}
	if cfg.KeepaliveCountMax < 0 {
		return nil, fmt.Errorf("ssh: negative keepalive count %d", cfg.KeepaliveCountMax)
	}
	if cfg.Home == "" {
		h, err := os.UserHomeDir()
		if err != nil {
			return nil, fmt.Errorf("ssh: no home directory for ~/.ssh: %w", err)
		}
		cfg.Home = h
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = DefaultSSHConnectTimeout
	}
	switch {
	case cfg.Retries == 0:
		cfg.Retries = DefaultSSHRetries
	case cfg.Retries < 0:
		cfg.Retries = 0
	}
	if cfg.KeepaliveInterval == 0 {
		cfg.KeepaliveInterval = DefaultSSHKeepaliveInterval
	}
	if cfg.KeepaliveCountMax == 0 {
		cfg.KeepaliveCountMax = DefaultSSHKeepaliveCountMax
	}
	if cfg.AgentSocket == "" {
		cfg.AgentSocket = os.Getenv("SSH_AUTH_SOCK")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if len(cfg.KnownHosts) == 0 {
		cfg.KnownHosts = []string{cfg.Home + "/.ssh/known_hosts"}
	}
	b := &SSH{cfg: cfg, hashes: map[string]fileHash{}}
	file, explicit := cfg.ConfigFile, cfg.ConfigFile != ""
	if !explicit {
		file = cfg.Home + "/.ssh/config"
	}
	if file != "none" {
		f, err := os.Open(file)
		switch {
		case err == nil:
			b.sshCfg, err = ssh_config.Decode(f)
			f.Close()
			if err != nil {
				return nil, fmt.Errorf("ssh: %s: %w", file, err)
			}
		case explicit || !errors.Is(err, os.ErrNotExist):
			return nil, fmt.Errorf("ssh: %w", err)
		}
	}
	return b, nil
}

// Name implements Backend.
func (b *SSH) Name() string { return "ssh" }

// Start implements Backend.
func (b *SSH) Start(ctx context.Context, spec Spec) (Proc, error) {
	if len(spec.Argv) == 0 {
		return nil, errors.New("ssh: empty proxy command")
	}
	t, err := b.resolve(spec.Host, spec.User)
	if err != nil {
		return nil, err
	}
	client, via, err := b.dial(ctx, t)
	if err != nil {
		return nil, err
	}
	// Until the proxy runs, cancelling ctx closes the connection, which
	// unblocks the probe, the upload and session setup.
	stop := context.AfterFunc(ctx, func() { closeAll(client, via) })
	fail := func(err error) (Proc, error) {
		stop()
		closeAll(client, via)
		if cerr := ctx.Err(); cerr != nil {
			return nil, fmt.Errorf("ssh %s: %w", t.alias, cerr)
		}
		return nil, err
	}
	sum := ""
	if !b.cfg.NoProxyUpload {
		local := b.cfg.LocalProxy
		if local == "" {
			local = spec.Argv[0]
		}
		sum, _ = b.localHash(local) // no local copy: any proxy there will do
	}
	// Fastest: the host's persistent proxy, reached without a login shell.
	if b.cfg.Persist > 0 {
		p, err := b.startPersistent(client, via, t, spec, sum)
		if err == nil {
			if !stop() {
				p.Kill()
				return fail(ctx.Err())
			}
			return p, nil
		}
		if ctx.Err() != nil {
			return fail(err)
		}
		b.cfg.Log.Debug("persistent proxy not used", "host", t.alias, "reason", err)
	}
	// Fast path, one session: a script that runs the proxy at once when
	// the host has the right one. Every session costs a login shell on the
	// host (often a heavy ~/.bashrc), so probing separately would double
	// the launch time. Otherwise the full probe decides, uploading if need
	// be, and a second session runs the result.
	rs := runSpec{proxy: spec.Argv[0], sum: sum, noUpload: b.cfg.NoProxyUpload, env: spec.Env, args: spec.Argv[1:],
		persist: b.cfg.Persist, build: sum}
	sess, stdin, stdout, ran, err := b.tryRun(client, t, spec, rs)
	if err != nil {
		return fail(err)
	}
	if !ran {
		proxy, build, err := b.ensureProxy(ctx, client, t, spec.Argv[0])
		if err != nil {
			return fail(err)
		}
		rs.proxy, rs.fixed, rs.build = proxy, true, build
		if sess, stdin, stdout, ran, err = b.tryRun(client, t, spec, rs); err == nil && !ran {
			err = fmt.Errorf("ssh %s: %s did not start", t.alias, proxy)
		}
		if err != nil {
			return fail(err)
		}
	}
	if !stop() {
		return fail(ctx.Err())
	}
	p := &sshProc{host: t.alias, log: b.cfg.Log, client: client, via: via, sess: sess, stdin: stdin, stdout: stdout, done: make(chan struct{})}
	go func() { client.Wait(); p.shutdown(nil) }()
	if b.cfg.KeepaliveInterval > 0 {
		go p.keepalive(b.cfg.KeepaliveInterval, b.cfg.KeepaliveCountMax)
	}
	return p, nil
}

// startSession runs cmd in a new session whose stdin and stdout are
// returned; its stderr goes to errw.
func startSession(client *ssh.Client, errw io.Writer, cmd string) (*ssh.Session, io.WriteCloser, io.Reader, error) {
	sess, err := client.NewSession()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("open session: %w", err)
	}
	stdin, err := sess.StdinPipe()
	if err != nil {
		sess.Close()
		return nil, nil, nil, err
	}
	stdout, err := sess.StdoutPipe()
	if err != nil {
		sess.Close()
		return nil, nil, nil, err
	}
	sess.Stderr = errw
	if sess.Stderr == nil {
		sess.Stderr = io.Discard
	}
	if err := sess.Start(cmd); err != nil {
		sess.Close()
		return nil, nil, nil, err
	}
	return sess, stdin, stdout, nil
}

// tryRun starts runScript(rs) in a session. ran says whether the proxy is
// running in sess; if not, the session has ended and the caller probes in
// full.
func (b *SSH) tryRun(client *ssh.Client, t *sshTarget, spec Spec, rs runSpec) (sess *ssh.Session, stdin io.WriteCloser, stdout io.Reader, ran bool, err error) {
	sess, stdin, out, err := startSession(client, spec.Stderr, "/bin/sh -c "+shellQuote(runScript(rs)))
	if err != nil {
		return nil, nil, nil, false, fmt.Errorf("ssh %s: start %s: %w", t.alias, rs.proxy, err)
	}
	br := bufio.NewReader(out)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			sess.Close()
			return nil, nil, nil, false, fmt.Errorf("ssh %s: start %s: no answer from the host's shell (%v)", t.alias, rs.proxy, err)
		}
		// Lines before ours are a login shell's chatter.
		switch {
		case strings.HasPrefix(line, probeRun):
			b.cfg.Log.Debug("ssh proxy", "host", t.alias, "path", strings.TrimSpace(strings.TrimPrefix(line, probeRun)))
			return sess, stdin, br, true, nil
		case strings.HasPrefix(line, probeEnd):
			sess.Wait()
			sess.Close()
			return nil, nil, nil, false, nil
		case strings.HasPrefix(line, persist.InfoPrefix):
			b.recordPersistent(t, spec.Argv[0], rs.sum, strings.TrimRight(line, "\r\n"))
		}
	}
}

// dialer opens the TCP stream an SSH connection runs over: directly, or
// through a jump host's direct-tcpip channel.
type dialer func(ctx context.Context, network, addr string) (net.Conn, error)

// dial connects and authenticates to t, through its ProxyJump hosts if
// any, all within one ConnectTimeout. via are the jump connections, to be
// closed after the returned client.
func (b *SSH) dial(ctx context.Context, t *sshTarget) (client *ssh.Client, via []*ssh.Client, err error) {
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, b.cfg.ConnectTimeout)
	defer cancel()
	var nd net.Dialer
	dial := dialer(nd.DialContext)
	for _, hop := range t.jump {
		ht, err := b.resolveHop(hop)
		if err == nil {
			var c *ssh.Client
			c, err = b.dialHost(parent, ctx, ht, dial)
			if err == nil {
				via = append(via, c)
				dial = c.DialContext
				continue
			}
		}
		closeAll(nil, via)
		return nil, nil, fmt.Errorf("ssh %s: via jump host: %w", t.alias, err)
	}
	client, err = b.dialHost(parent, ctx, t, dial)
	if err != nil {
		closeAll(nil, via)
		if len(via) > 0 {
			return nil, nil, fmt.Errorf("%w (via %s)", err, strings.Join(t.jump, ","))
		}
		return nil, nil, err
	}
	return client, via, nil
}

// closeAll closes client, then the jump connections under it.
func closeAll(client *ssh.Client, via []*ssh.Client) {
	if client != nil {
		client.Close()
	}
	for i := len(via) - 1; i >= 0; i-- {
		via[i].Close()
	}
}

// pastDeadline reports whether ctx has a deadline that has passed.
func pastDeadline(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// dialHost connects to one host, retrying refused or reset connections
// with exponential backoff until ctx (the connect budget) ends.
func (b *SSH) dialHost(parent, ctx context.Context, t *sshTarget, dial dialer) (*ssh.Client, error) {
	auth, notes, closeAgent := b.authMethods(t)
	defer closeAgent()
	start := time.Now()
	backoff := firstRetryBackoff
	for attempt := 1; ; attempt++ {
		client, err := b.dialOnce(ctx, t, auth, dial)
		if err == nil {
			b.cfg.Log.Debug("ssh connected", "host", t.alias, "addr", t.addr, "user", t.user,
				"attempts", attempt, "elapsed", time.Since(start).Round(time.Millisecond))
			return client, nil
		}
		var hk *HostKeyError
		switch {
		case errors.As(err, &hk):
			return nil, hk
		case isAuthFailure(err):
			return nil, &AuthError{Host: t.alias, User: t.user, Addr: t.addr, Notes: notes, Err: err}
		case parent.Err() != nil:
			return nil, fmt.Errorf("ssh %s (%s): %w", t.alias, t.addr, parent.Err())
		case ctx.Err() != nil || pastDeadline(ctx):
			// The dialer stops at ctx's deadline itself ("i/o timeout"),
			// which can be a moment before ctx reports it is done.
			return nil, fmt.Errorf("ssh %s (%s): no connection within %v (%d attempts): %w",
				t.alias, t.addr, b.cfg.ConnectTimeout, attempt, err)
		}
		var oc *ssh.OpenChannelError // a jump host could not connect onwards
		retryable := errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) ||
			(errors.As(err, &oc) && oc.Reason == ssh.ConnectionFailed)
		dl, _ := ctx.Deadline()
		if !retryable || attempt > b.cfg.Retries || time.Until(dl) < backoff {
			return nil, fmt.Errorf("ssh %s (%s): %w (%d attempts in %v)", t.alias, t.addr, err, attempt,
				time.Since(start).Round(time.Millisecond))
		}
		b.cfg.Log.Debug("ssh connect failed, retrying", "host", t.alias, "addr", t.addr, "err", err, "backoff", backoff)
		tm := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			tm.Stop()
			return nil, fmt.Errorf("ssh %s (%s): %w (%d attempts): %w", t.alias, t.addr, err, attempt, ctx.Err())
		case <-tm.C:
		}
		backoff *= 2
	}
}

// dialOnce makes one TCP connection and SSH handshake; ctx's deadline and
// cancellation cover both.
func (b *SSH) dialOnce(ctx context.Context, t *sshTarget, auth []ssh.AuthMethod, dial dialer) (*ssh.Client, error) {
	conn, err := dial(ctx, "tcp", t.addr)
	if err != nil {
		return nil, err
	}
	conn = quickAck(conn)
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	hkcb, algos, err := b.hostKeyCheck(t, conn.RemoteAddr())
	if err != nil {
		stop()
		conn.Close()
		return nil, err
	}
	ccfg := &ssh.ClientConfig{
		User:              t.user,
		Auth:              auth,
		HostKeyCallback:   hkcb.callback,
		HostKeyAlgorithms: algos,
		ClientVersion:     "SSH-2.0-gompi",
	}
	c, chans, reqs, err := ssh.NewClientConn(conn, t.addr, ccfg)
	if !stop() {
		// ctx ended: the connection is closed under the handshake.
		if err == nil {
			c.Close()
		}
		if herr := hkcb.failure(); herr != nil {
			return nil, herr
		}
		return nil, ctx.Err()
	}
	if err != nil {
		conn.Close()
		if herr := hkcb.failure(); herr != nil {
			return nil, herr
		}
		if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
			// The socket deadline (ctx's) fired first: report the
			// context's error, which is about to be set.
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return nil, err
	}
	conn.SetDeadline(time.Time{})
	return ssh.NewClient(c, chans, reqs), nil
}

// remoteRun is the proxy's end of an SSH connection: a session running it,
// or a persistent proxy's (persistRun).
type remoteRun interface {
	Wait() error
	Signal(ssh.Signal) error
}

// ErrConnectionLost is returned by an SSH Proc's Read and Wait once
// keepalives went unanswered and the connection was closed.
var ErrConnectionLost = errors.New("ssh connection lost")

type sshProc struct {
	host   string
	log    *slog.Logger
	client *ssh.Client
	via    []*ssh.Client // ProxyJump connections
	sess   remoteRun
	stdin  io.WriteCloser
	stdout io.Reader

	done     chan struct{}
	downOnce sync.Once
	mu       sync.Mutex
	lost     error

	waitOnce sync.Once
	waitErr  error
}

func (p *sshProc) lostErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lost
}

func (p *sshProc) Read(b []byte) (int, error) {
	n, err := p.stdout.Read(b)
	if err != nil {
		if lost := p.lostErr(); lost != nil {
			return n, lost
		}
	}
	return n, err
}

func (p *sshProc) Write(b []byte) (int, error) {
	n, err := p.stdin.Write(b)
	if err != nil {
		if lost := p.lostErr(); lost != nil {
			return n, lost
		}
	}
	return n, err
}

// Close closes the proxy's stdin; the proxy takes EOF as loss of its
// launcher and ends its ranks.
func (p *sshProc) Close() error {
	p.stdin.Close()
	return nil
}

func (p *sshProc) Wait() error {
	p.waitOnce.Do(func() {
		err := p.sess.Wait()
		p.shutdown(nil)
		var missing *ssh.ExitMissingError
		if lost := p.lostErr(); lost != nil && (err == nil || errors.As(err, &missing) || errors.Is(err, io.EOF)) {
			err = lost
		} else if err != nil {
			err = fmt.Errorf("gompi-proxy on %s: %w", p.host, err)
		}
		p.waitErr = err
	})
	return p.waitErr
}

// Kill signals the proxy and drops the connection; sshd then hangs up the
// proxy, which ends its ranks, even where signals are not supported.
func (p *sshProc) Kill() error {
	p.sess.Signal(ssh.SIGKILL)
	p.shutdown(nil)
	return nil
}

// shutdown closes the connection once; a non-nil reason is what Read and
// Wait report from then on.
func (p *sshProc) shutdown(reason error) {
	p.downOnce.Do(func() {
		if reason != nil {
			p.log.Warn("closing ssh connection", "host", p.host, "reason", reason)
			p.mu.Lock()
			p.lost = reason
			p.mu.Unlock()
		}
		close(p.done)
		closeAll(p.client, p.via)
	})
}

// keepalive sends keepalive@openssh.com every interval; when countMax
// requests in a row go unanswered (a cut network leaves TCP silent for
// minutes) it closes the connection so Read fails and the job ends.
func (p *sshProc) keepalive(interval time.Duration, countMax int) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	replies := make(chan error, 1)
	inflight, missed := false, 0
	for {
		select {
		case <-p.done:
			return
		case err := <-replies:
			inflight = false
			if err != nil {
				p.shutdown(fmt.Errorf("%w to %s: keepalive: %v", ErrConnectionLost, p.host, err))
				return
			}
			missed = 0
		case <-tick.C:
			if inflight {
				missed++
				if missed >= countMax {
					p.shutdown(fmt.Errorf("%w to %s: %d keepalives over %v went unanswered",
						ErrConnectionLost, p.host, missed, time.Duration(missed)*interval))
					return
				}
				continue
			}
			inflight = true
			// Any reply, even a refusal, proves the peer alive. The request
			// returns when the connection closes, so this cannot leak.
			go func() {
				_, _, err := p.client.SendRequest("keepalive@openssh.com", true, nil)
				replies <- err
			}()
		}
	}
}
