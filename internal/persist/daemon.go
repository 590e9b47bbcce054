package persist

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gompi/gompi/internal/atomicfile"
	"github.com/gompi/gompi/internal/privdir"
)

// DefaultIdle is how long a daemon waits without jobs before it exits.
const DefaultIdle = 10 * time.Minute

// ServeFlag, as gompi-proxy's first argument, runs the daemon itself:
// gompi-proxy -persist-serve SOCKET IDLE BUILD, its listening socket on
// descriptor 3. Ensure starts it so; users never do.
const ServeFlag = "-persist-serve"

// StartFlag, as gompi-proxy's first argument, finds or starts the daemon
// and prints a FormatInfo line: gompi-proxy -persist-start IDLE [BUILD].
const StartFlag = "-persist-start"

// handshakeTimeout bounds a connection's handshake; stderrWait is how long
// a job's main connection waits for its stderr connection to arrive.
const (
	handshakeTimeout = 10 * time.Second
	stderrWait       = 3 * time.Second
)

// Config locates and shapes a host's daemon.
type Config struct {
	// Dir holds the daemon's socket, token, lock and log. It must be a
	// directory of the current user that nobody else can enter; it is
	// created if missing. Default: $TMPDIR/gompi-<uid> (node-local).
	Dir string
	// Build identifies the executable (its sha256, hex); daemons of
	// different builds live side by side. Required.
	Build string
	// Idle is the daemon's lifetime without jobs. Default DefaultIdle.
	Idle time.Duration
	// Exe is the program the daemon is and runs per job. Default: this
	// executable.
	Exe string
}

func (c *Config) fill() error {
	if !isHex(c.Build, 64) {
		return fmt.Errorf("persistent proxy: build %q is not a sha256", trunc(c.Build))
	}
	if c.Idle < 0 {
		return fmt.Errorf("persistent proxy: negative idle time %v", c.Idle)
	}
	if c.Idle == 0 {
		c.Idle = DefaultIdle
	}
	if c.Dir == "" {
		c.Dir = privdir.Default()
	}
	if c.Exe == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("persistent proxy: %w", err)
		}
		c.Exe = exe
	}
	return nil
}

// paths of a daemon's files.
type paths struct{ sock, token, lock, log, pid string }

func (c *Config) paths() paths {
	return pathsOf(filepath.Join(c.Dir, "p-"+c.Build[:16]))
}

func pathsOf(base string) paths {
	return paths{base + ".sock", base + ".token", base + ".lock", base + ".log", base + ".pid"}
}

// PIDFile is the file holding the process ID of the daemon whose socket
// is sock.
func PIDFile(sock string) string { return pathsOf(strings.TrimSuffix(sock, ".sock")).pid }

// Info is how a launcher reaches a daemon.
type Info struct {
	Sock  string // the socket's path on the host
	Token string // the shared secret (hex)
}

// InfoPrefix starts the line Ensure's caller prints for the launcher.
const InfoPrefix = "gompi-persist: "

// FormatInfo is the line gompi-proxy -persist-start prints: "ok SOCK
// TOKEN", or "error MESSAGE" when err is not nil.
func FormatInfo(in Info, err error) string {
	if err != nil {
		return InfoPrefix + "error " + strings.ReplaceAll(err.Error(), "\n", " ")
	}
	return InfoPrefix + "ok " + in.Sock + " " + in.Token
}

// ParseInfo reads a FormatInfo line (without its newline).
func ParseInfo(line string) (Info, error) {
	rest, ok := strings.CutPrefix(line, InfoPrefix)
	if !ok {
		return Info{}, fmt.Errorf("%w: info line %q", ErrProtocol, trunc(line))
	}
	if msg, ok := strings.CutPrefix(rest, "error "); ok {
		return Info{}, fmt.Errorf("persistent proxy: the host could not start one: %s", msg)
	}
	f := strings.Fields(rest)
	if len(f) != 3 || f[0] != "ok" || !strings.HasPrefix(f[1], "/") || !isHex(f[2], 64) {
		return Info{}, fmt.Errorf("%w: info line %q", ErrProtocol, trunc(line))
	}
	return Info{Sock: f[1], Token: f[2]}, nil
}

// privateDir creates dir (mode 0700) or checks that an existing one
// belongs to us alone: a directory someone else made under /tmp could
// hold a socket of theirs.
func privateDir(dir string) error {
	if err := privdir.Ensure(dir); err != nil {
		return fmt.Errorf("persistent proxy: %w", err)
	}
	return nil
}

// Ensure returns the daemon of cfg's build on this host, starting one when
// none answers. Concurrent calls (two launches at once) agree on one daemon.
func Ensure(cfg Config) (Info, error) {
	if err := cfg.fill(); err != nil {
		return Info{}, err
	}
	if err := privateDir(cfg.Dir); err != nil {
		return Info{}, err
	}
	p := cfg.paths()
	if len(p.sock) >= len(syscall.RawSockaddrUnix{}.Path) {
		return Info{}, fmt.Errorf("persistent proxy: socket path %s is too long; set TMPDIR to a shorter directory", p.sock)
	}
	lk, err := os.OpenFile(p.lock, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return Info{}, fmt.Errorf("persistent proxy: %w", err)
	}
	defer lk.Close() // releases the lock
	if err := syscall.Flock(int(lk.Fd()), syscall.LOCK_EX); err != nil {
		return Info{}, fmt.Errorf("persistent proxy: lock %s: %w", p.lock, err)
	}
	if tok, err := os.ReadFile(p.token); err == nil {
		in := Info{Sock: p.sock, Token: strings.TrimSpace(string(tok))}
		if ping(in, cfg.Idle) == nil {
			return in, nil
		}
	}
	tok, err := NewToken()
	if err != nil {
		return Info{}, err
	}
	os.Remove(p.sock)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: p.sock, Net: "unix"})
	if err != nil {
		return Info{}, fmt.Errorf("persistent proxy: %w", err)
	}
	ln.SetUnlinkOnClose(false) // the daemon's copy lives on
	defer ln.Close()
	if err := spawn(cfg, p, ln, tok); err != nil {
		os.Remove(p.sock)
		return Info{}, fmt.Errorf("persistent proxy: %w", err)
	}
	return Info{Sock: p.sock, Token: tok}, nil
}

// spawn writes the token file and starts the daemon on ln.
func spawn(cfg Config, p paths, ln *net.UnixListener, tok string) error {
	if err := atomicfile.Write(p.token, []byte(tok+"\n"), 0o600); err != nil {
		return err
	}
	lf, err := ln.File()
	if err != nil {
		return err
	}
	defer lf.Close()
	logf, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(cfg.Exe, ServeFlag, p.sock, cfg.Idle.String(), cfg.Build)
	cmd.ExtraFiles = []*os.File{lf}
	cmd.Stderr = logf
	// Its own session: the login session that started it may end, and
	// with it its process group, at any time.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	// The PID file exists before Ensure returns (the daemon writes it
	// again when it serves): whoever reads it next finds the daemon.
	atomicfile.Write(p.pid, fmt.Appendf(nil, "%d\n", cmd.Process.Pid), 0o600)
	return cmd.Process.Release()
}

// Main runs the persistent proxy's command lines (StartFlag, ServeFlag)
// for gompi-proxy's main: handled says whether args (os.Args[1:]) were
// one, code is then the exit status.
func Main(args []string, stdout io.Writer) (code int, handled bool) {
	if len(args) == 0 {
		return 0, false
	}
	switch args[0] {
	case StartFlag:
		return StartMain(args[1:], stdout), true
	case ServeFlag:
		return ServeMain(args[1:]), true
	}
	return 0, false
}

// StartMain is gompi-proxy -persist-start IDLE [BUILD]: it runs Ensure for
// this executable and prints the FormatInfo line to w. The exit status is
// 0 even when no daemon could be had (the line says why; the launch goes
// on without one), 2 for bad arguments.
func StartMain(args []string, w io.Writer) int {
	if len(args) < 1 || len(args) > 2 {
		fmt.Fprintf(w, "usage: gompi-proxy %s IDLE [SHA256]\n", StartFlag)
		return 2
	}
	idle, err := time.ParseDuration(args[0])
	var in Info
	if err == nil {
		build := ""
		if len(args) == 2 {
			build = args[1]
		} else {
			build, err = ExecutableSum()
		}
		if err == nil {
			in, err = Ensure(Config{Build: build, Idle: idle})
		}
	}
	fmt.Fprintln(w, FormatInfo(in, err))
	return 0
}

// ServeMain is gompi-proxy -persist-serve SOCKET IDLE BUILD, the daemon
// Ensure starts, logging to stderr (the daemon's log file). SIGTERM and
// SIGINT end it cleanly (its files removed); jobs it started run on.
func ServeMain(args []string) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if len(args) != 3 {
		log.Error("usage: gompi-proxy " + ServeFlag + " SOCKET IDLE SHA256")
		return 2
	}
	// SIGHUP is no reason to go: a daemon has no terminal. (Caught, not
	// ignored, so the proxies it starts do not inherit SIG_IGN.)
	signal.Notify(make(chan os.Signal, 1), syscall.SIGHUP)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := ServeInherited(ctx, args[0], args[1], args[2], log); err != nil {
		log.Error("persistent proxy", "err", err)
		return 1
	}
	return 0
}

// ExecutableSum is the sha256 (hex) of the running executable: the build
// identity gompi-proxy -version prints and the ssh launcher names uploaded
// copies by.
func ExecutableSum() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	return FileSum(exe)
}

// FileSum is the sha256 (hex) of a file's content.
func FileSum(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// ping proves a daemon alive and sets its idle time.
func ping(in Info, idle time.Duration) error {
	c, err := net.DialTimeout("unix", in.Sock, 2*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(handshakeTimeout))
	nonce, err := NewNonce()
	if err != nil {
		return err
	}
	_, err = Dial(c, in.Token, RolePing, nonce, Request{Idle: idle.String()})
	return err
}

// Daemon serves jobs on a listening socket until it has been idle long
// enough, its socket file is replaced or removed, or Close is called.
type Daemon struct {
	cfg   Config
	token string
	ln    *net.UnixListener
	ino   uint64 // the socket file's inode, to notice its replacement
	log   *slog.Logger

	replaced atomic.Bool // the socket file is no longer ours: leave it

	mu     sync.Mutex
	active int
	last   time.Time
	slots  map[string]chan *net.UnixConn // stderr connections by nonce

	closeOnce sync.Once
	done      chan struct{}
}

// NewDaemon serves ln, whose socket file is sock, with the token in the
// token file beside it.
func NewDaemon(cfg Config, ln *net.UnixListener, sock string, log *slog.Logger) (*Daemon, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	cfg.Dir = filepath.Dir(sock)
	tok, err := os.ReadFile(pathsOf(strings.TrimSuffix(sock, ".sock")).token)
	if err != nil {
		return nil, fmt.Errorf("persistent proxy: %w", err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(sock, &st); err != nil {
		return nil, fmt.Errorf("persistent proxy: %w", err)
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Daemon{cfg: cfg, token: strings.TrimSpace(string(tok)), ln: ln, ino: st.Ino, log: log,
		last: time.Now(), slots: map[string]chan *net.UnixConn{}, done: make(chan struct{})}, nil
}

// ServeInherited is the daemon started by Ensure: its listener is
// descriptor 3. Cancelling ctx ends it.
func ServeInherited(ctx context.Context, sock, idle, build string, log *slog.Logger) error {
	d, err := time.ParseDuration(idle)
	if err != nil {
		return fmt.Errorf("persistent proxy: idle %q: %w", idle, err)
	}
	l, err := net.FileListener(os.NewFile(3, "listener"))
	if err != nil {
		return fmt.Errorf("persistent proxy: %w", err)
	}
	ul, ok := l.(*net.UnixListener)
	if !ok {
		l.Close()
		return fmt.Errorf("persistent proxy: descriptor 3 is not a Unix socket listener")
	}
	dm, err := NewDaemon(Config{Build: build, Idle: d}, ul, sock, log)
	if err != nil {
		ul.Close()
		return err
	}
	stop := context.AfterFunc(ctx, dm.Close)
	defer stop()
	return dm.Serve()
}

// Close stops the daemon; jobs it started run on.
func (d *Daemon) Close() {
	d.closeOnce.Do(func() {
		close(d.done)
		d.ln.Close()
	})
}

// Serve accepts jobs until the daemon ends; it removes its socket and
// token files then, unless another daemon has taken their place.
func (d *Daemon) Serve() error {
	d.ln.SetUnlinkOnClose(false)
	// For users who want it gone now: kill $(cat PIDFILE).
	atomicfile.Write(PIDFile(d.ln.Addr().String()), fmt.Appendf(nil, "%d\n", os.Getpid()), 0o600)
	go d.watch()
	defer d.cleanup()
	for {
		c, err := d.ln.AcceptUnix()
		if err != nil {
			select {
			case <-d.done:
				return nil
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("persistent proxy: accept: %w", err)
		}
		go d.handle(c)
	}
}

// watch ends the daemon when it has been idle for its idle time or its
// socket file no longer is its own.
func (d *Daemon) watch() {
	tick := time.NewTicker(min(time.Second, d.cfg.Idle/4+time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-d.done:
			return
		case <-tick.C:
		}
		var st syscall.Stat_t
		if err := syscall.Stat(d.ln.Addr().String(), &st); err != nil || st.Ino != d.ino {
			d.log.Info("socket file gone or replaced; exiting")
			d.replaced.Store(true)
			d.Close()
			return
		}
		d.mu.Lock()
		idle := d.active == 0 && time.Since(d.last) >= d.cfg.Idle
		d.mu.Unlock()
		if idle {
			d.log.Info("idle; exiting", "idle", d.cfg.Idle)
			d.Close()
			return
		}
	}
}

func (d *Daemon) cleanup() {
	if d.replaced.Load() {
		return
	}
	sock := d.ln.Addr().String()
	p := pathsOf(strings.TrimSuffix(sock, ".sock"))
	// Under Ensure's lock: a successor started meanwhile keeps its files.
	if lk, err := os.OpenFile(p.lock, os.O_RDWR, 0); err == nil {
		defer lk.Close()
		syscall.Flock(int(lk.Fd()), syscall.LOCK_EX)
	}
	var st syscall.Stat_t
	if syscall.Stat(sock, &st) == nil && st.Ino == d.ino {
		os.Remove(p.sock)
		os.Remove(p.token)
		os.Remove(p.pid)
	}
}

// slot is the rendezvous of a job's main and stderr connections.
func (d *Daemon) slot(nonce string) chan *net.UnixConn {
	d.mu.Lock()
	defer d.mu.Unlock()
	ch, ok := d.slots[nonce]
	if !ok {
		ch = make(chan *net.UnixConn, 1)
		d.slots[nonce] = ch
	}
	return ch
}

// dropSlot forgets a rendezvous and closes a connection left in it.
func (d *Daemon) dropSlot(nonce string, ch chan *net.UnixConn) {
	d.mu.Lock()
	if d.slots[nonce] == ch {
		delete(d.slots, nonce)
	}
	d.mu.Unlock()
	select {
	case c := <-ch:
		c.Close()
	default:
	}
}

func (d *Daemon) setIdle(s string) {
	if s == "" {
		return
	}
	if v, err := time.ParseDuration(s); err == nil && v > 0 {
		d.mu.Lock()
		d.cfg.Idle = v
		d.last = time.Now()
		d.mu.Unlock()
	}
}

func (d *Daemon) handle(c *net.UnixConn) {
	c.SetDeadline(time.Now().Add(handshakeTimeout))
	a, err := accept(c, d.token, d.cfg.Build)
	if err != nil {
		d.log.Warn("handshake failed", "err", err)
		c.Close()
		return
	}
	c.SetDeadline(time.Time{})
	d.setIdle(a.req.Idle)
	switch a.role {
	case RolePing:
		io.WriteString(c, "PONG\n")
		c.Close()
	case RoleStderr:
		if _, err := io.WriteString(c, "READY\n"); err != nil {
			c.Close()
			return
		}
		ch := d.slot(a.nonce)
		ch <- c
		time.AfterFunc(stderrWait+time.Second, func() { d.dropSlot(a.nonce, ch) })
	case RoleMain:
		d.run(c, a.req)
	}
}

// run starts a proxy whose stdin and stdout are c and whose stderr is the
// job's stderr connection (or the daemon's log).
func (d *Daemon) run(c *net.UnixConn, req Request) {
	defer c.Close()
	var errc *net.UnixConn
	if req.Stderr != "" {
		ch := d.slot(req.Stderr)
		select {
		case errc = <-ch:
			defer errc.Close()
		case <-time.After(stderrWait):
			d.log.Warn("no stderr connection for a job; its proxy's diagnostics go to this log")
		}
		d.dropSlot(req.Stderr, ch)
	}
	f, err := c.File()
	if err != nil {
		fmt.Fprintf(c, "ERR %v\n", err)
		return
	}
	defer f.Close()
	stderr := os.Stderr
	if errc != nil {
		ef, err := errc.File()
		if err != nil {
			fmt.Fprintf(c, "ERR %v\n", err)
			return
		}
		defer ef.Close()
		stderr = ef
	}
	cmd := exec.Command(d.cfg.Exe)
	cmd.Env = append(jobEnviron(), req.Env...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = f, f, stderr
	// Its own session, like a proxy an sshd starts: a signal to the
	// daemon's group is not one to the job.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	d.mu.Lock()
	d.active++
	d.mu.Unlock()
	// RUN goes first: from the proxy's start on, the bytes are its own.
	_, err = io.WriteString(c, "RUN\n")
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		d.log.Warn("starting a proxy failed", "err", err)
		d.finished()
		return
	}
	go func() {
		cmd.Wait()
		d.finished()
	}()
}

// loginVars describe the login that started the daemon, not the launch a
// proxy serves: they would mislead its ranks.
var loginVars = []string{"SSH_CLIENT=", "SSH_CONNECTION=", "SSH_TTY=", "SSH_ORIGINAL_COMMAND=", "SSH_AUTH_SOCK="}

// jobEnviron is the daemon's environment for a proxy: its own, without the
// variables of the login it came from.
func jobEnviron() []string {
	env := os.Environ()
	return slices.DeleteFunc(env, func(kv string) bool {
		return slices.ContainsFunc(loginVars, func(p string) bool { return strings.HasPrefix(kv, p) })
	})
}

func (d *Daemon) finished() {
	d.mu.Lock()
	d.active--
	d.last = time.Now()
	d.mu.Unlock()
}
