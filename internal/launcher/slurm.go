package launcher

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"github.com/gompi/gompi/internal/portrange"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Slurm starts every proxy of a job in one srun step, as Hydra's slurm
// bootstrap does: processes stay inside the allocation (accounting,
// cgroups, scancel). srun forwards stdin to one task only and merges the
// tasks' output, so proxies connect back to gompiexec over TCP
// (connectback.go) instead of speaking over their stdio.
type Slurm struct {
	cfg    SlurmConfig
	secret []byte
	ln     net.Listener

	mu       sync.Mutex
	hosts    []string // what the step runs on, set by Expect
	waiting  map[string]chan net.Conn
	started  bool
	startErr error
	open     int // procs not yet closed
	closed   int // procs closed; the step is over when all hosts' are
	srun     *exec.Cmd
	srunDone chan struct{} // closed when srun has exited
	srunErr  error
	tail     *tailBuffer
}

// SlurmConfig configures the slurm backend.
type SlurmConfig struct {
	// Srun is the srun command. Default "srun".
	Srun string
	// Args go to srun before the proxy command (e.g. --partition).
	Args []string
	// Listen is the address proxies connect back to. Default ":0": every
	// address, a free port.
	Listen string
	// Ports confines the listener's port to a firewall's range
	// (portrange.FromEnv); its zero value leaves it to Listen's port.
	Ports portrange.Range
	// Advertise are the host:port addresses proxies try in order. Default:
	// the srun node's address as Slurm gives it to tasks
	// ($SLURM_LAUNCH_NODE_IPADDR), then every non-loopback address here.
	Advertise []string
	// AdvertiseHost, when Advertise is empty, is the one name or address
	// proxies connect back to, with the listener's port (gompiexec
	// -localhost, Hydra's name of the launch host).
	AdvertiseHost string
	// ConnectTimeout bounds the wait for every proxy to connect back once
	// srun has started. Default 60s (srun may queue for a moment).
	ConnectTimeout time.Duration
	// JobNodes are the nodes of the allocation srun runs in (expanded
	// $SLURM_JOB_NODELIST), JobID its id: a host outside them fails at once,
	// named, instead of as srun's "Requested node configuration is not
	// available". Empty: not checked (no allocation yet, or a het job).
	JobNodes []string
	JobID    string
	// Stderr receives srun's own output and the proxies' diagnostics.
	Stderr io.Writer
	Log    *slog.Logger
}

// Batcher is a Backend that starts every proxy in one step: it must learn
// all hosts before the first Start.
type Batcher interface {
	Backend
	// Expect names every host Start will be called for.
	Expect(hosts []string)
}

// NewSlurm sets up the listener proxies will connect back to.
func NewSlurm(cfg SlurmConfig) (*Slurm, error) {
	if cfg.Srun == "" {
		cfg.Srun = "srun"
	}
	if cfg.Listen == "" {
		cfg.Listen = ":0"
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 60 * time.Second
	}
	if cfg.Stderr == nil {
		cfg.Stderr = io.Discard
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if _, err := exec.LookPath(cfg.Srun); err != nil {
		return nil, fmt.Errorf("slurm launcher: %s not found: %w", cfg.Srun, err)
	}
	var ln net.Listener
	var err error
	if cfg.Ports.Any() {
		ln, err = net.Listen("tcp", cfg.Listen)
	} else {
		host, _, serr := net.SplitHostPort(cfg.Listen)
		if serr != nil {
			return nil, fmt.Errorf("slurm launcher: listen address %q: %w", cfg.Listen, serr)
		}
		ln, err = cfg.Ports.Listen(host)
	}
	if err != nil {
		return nil, fmt.Errorf("slurm launcher: listen for proxies: %w", err)
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		ln.Close()
		return nil, err
	}
	s := &Slurm{cfg: cfg, secret: secret, ln: ln, waiting: map[string]chan net.Conn{}, srunDone: make(chan struct{})}
	if len(s.cfg.Advertise) == 0 {
		a := ln.Addr().(*net.TCPAddr)
		if cfg.AdvertiseHost != "" {
			s.cfg.Advertise = []string{net.JoinHostPort(cfg.AdvertiseHost, strconv.Itoa(a.Port))}
		} else if a.IP.IsUnspecified() {
			s.cfg.Advertise = advertise(a.Port)
		} else {
			s.cfg.Advertise = []string{a.String()}
		}
	}
	go s.acceptLoop()
	return s, nil
}

// advertise lists ":port" (the srun node's address, as Slurm tells each
// task), every non-loopback address of this host with port, and last the
// loopback address (an allocation of this one node).
func advertise(port int) []string {
	p := strconv.Itoa(port)
	out := []string{":" + p}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.IsLoopback() || ipn.IP.IsLinkLocalUnicast() {
			continue
		}
		out = append(out, net.JoinHostPort(ipn.IP.String(), p))
	}
	return append(out, net.JoinHostPort("127.0.0.1", p))
}

// Name implements Backend.
func (s *Slurm) Name() string { return "slurm" }

// Advertised are the addresses proxies are told to connect back to.
func (s *Slurm) Advertised() []string { return s.cfg.Advertise }

// Expect implements Batcher.
func (s *Slurm) Expect(hosts []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range hosts {
		if _, ok := s.waiting[h]; !ok {
			s.waiting[h] = make(chan net.Conn, 1)
			s.hosts = append(s.hosts, h)
		}
	}
}

// acceptLoop authenticates connections and hands each to the Start waiting
// for its host. A connection that cannot prove the secret, or comes from a
// host no Start waits for (or a second time from one), is dropped; the job
// does not notice.
func (s *Slurm) acceptLoop() {
	for {
		conn, err := s.ln.Accept()
		if err != nil {
			return
		}
		go func() {
			var ch chan net.Conn
			name, err := AcceptConnectBack(conn, s.secret, func(h string) bool {
				s.mu.Lock()
				defer s.mu.Unlock()
				c, ok := s.waiting[h]
				if ok && c != nil {
					ch = c
					s.waiting[h] = nil // one proxy per host
					return true
				}
				return false
			}, 10*time.Second)
			if err != nil {
				s.cfg.Log.Debug("slurm launcher: dropped a connection", "from", conn.RemoteAddr(), "host", name, "err", err)
				conn.Close()
				return
			}
			s.cfg.Log.Debug("slurm launcher: proxy connected", "host", name, "from", conn.RemoteAddr())
			setLiveness(conn, ConnectLiveness)
			ch <- conn
		}()
	}
}

// Start implements Backend: the first call starts the srun step for every
// expected host; each call then waits for its host's proxy to connect.
func (s *Slurm) Start(ctx context.Context, spec Spec) (Proc, error) {
	if len(spec.Argv) == 0 {
		return nil, errors.New("slurm: empty proxy command")
	}
	s.mu.Lock()
	ch, ok := s.waiting[spec.Host]
	if !ok {
		s.mu.Unlock()
		return nil, fmt.Errorf("slurm launcher: host %s was not announced to the step", spec.Host)
	}
	if !s.started {
		s.started = true
		if s.startErr = s.checkJobNodes(); s.startErr == nil {
			s.startErr = s.startSrun(spec)
		}
	}
	err := s.startErr
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	t := time.NewTimer(s.cfg.ConnectTimeout)
	defer t.Stop()
	select {
	case conn := <-ch:
		s.mu.Lock()
		s.open++
		s.mu.Unlock()
		return &slurmProc{Conn: conn, s: s}, nil
	case <-s.srunDone:
		return nil, fmt.Errorf("srun ended before the proxy on %s connected back (%v)%s", spec.Host, s.srunErr, s.tail.summary(s.cfg.Stderr != io.Discard))
	case <-t.C:
		return nil, fmt.Errorf("proxy on %s did not connect back within %s (tried %s)%s",
			spec.Host, s.cfg.ConnectTimeout, strings.Join(s.cfg.Advertise, ","), s.tail.summary(s.cfg.Stderr != io.Discard))
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// ErrNotInJob: a host the step should run on is not a node of the
// allocation.
var ErrNotInJob = errors.New("not a node of the Slurm job")

// checkJobNodes fails naming the first expected host that is not one of
// the job's nodes (s.mu held). srun takes only Slurm's node names, and a
// proxy names itself by $SLURMD_NODENAME, so an address or another
// spelling of a node would fail too.
func (s *Slurm) checkJobNodes() error {
	if len(s.cfg.JobNodes) == 0 {
		return nil
	}
	in := make(map[string]bool, len(s.cfg.JobNodes))
	for _, n := range s.cfg.JobNodes {
		in[n] = true
	}
	for _, h := range s.hosts {
		if !in[h] {
			return fmt.Errorf("slurm launcher: host %s: %w %s (its nodes: %s); -hosts and -f name the job's nodes as Slurm does (scontrol show hostnames)",
				h, ErrNotInJob, s.cfg.JobID, strings.Join(s.cfg.JobNodes, ","))
		}
	}
	return nil
}

// OverlapEnv is in srun's environment: srun --overlap (Slurm 20.11 and
// later; an older srun ignores the variable, where it would refuse the
// option). By default a step holds all of the job's memory on its nodes, so
// a step asked for just after the previous job's step ended waits until
// that step's completion has reached slurmctld; on the test cluster (Slurm
// 22.05) that wait outlasted ConnectTimeout about once in 40 to 110
// back-to-back jobs, and never with the variable in 200. The proxies' step
// accounts for none of the ranks' resources anyway, and a rank that runs
// srun itself would otherwise wait for this step to end.
const OverlapEnv = "SLURM_OVERLAP=1"

// SrunArgs is the srun command line for hosts and proxy argv: one task
// per node on exactly those nodes, stdin to none of them, no PMI plugin
// for the proxies, and the step killed when any proxy fails. --export=ALL:
// in a job submitted with --export=NONE (SLURM_EXPORT_ENV=NONE, which srun
// reads) the proxies would get only SLURM_* variables, not the connect-back
// address and secret; Hydra's proxies take theirs on the command line, and
// its ranks get the script's environment either way.
func SrunArgs(srun string, extra []string, hosts []string, argv []string) []string {
	n := strconv.Itoa(len(hosts))
	args := []string{srun, "--nodes=" + n, "--ntasks=" + n, "--ntasks-per-node=1",
		"--nodelist=" + strings.Join(hosts, ","), "--input=none", "--mpi=none",
		"--kill-on-bad-exit=1", "--export=ALL", "--job-name=gompi-proxy"}
	args = append(args, extra...)
	return append(args, argv...)
}

func (s *Slurm) startSrun(spec Spec) error {
	argv := SrunArgs(s.cfg.Srun, s.cfg.Args, s.hosts, spec.Argv)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), spec.Env...)
	cmd.Env = append(cmd.Env, ConnectEnv+"="+strings.Join(s.cfg.Advertise, ","),
		ConnectSecretEnv+"="+fmt.Sprintf("%x", s.secret), OverlapEnv)
	s.tail = &tailBuffer{max: 4096}
	out := io.MultiWriter(s.cfg.Stderr, s.tail)
	cmd.Stdout, cmd.Stderr = out, out
	// srun in its own process group (a terminal's Ctrl-C reaches gompiexec
	// only, which forwards it to the ranks). SIGTERM when gompiexec dies,
	// even by SIGKILL: srun then cancels the step on every node.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	s.cfg.Log.Debug("slurm launcher: starting step", "listen", s.ln.Addr().String(), "argv", strings.Join(argv, " "))
	if err := StartLocked(cmd); err != nil {
		return fmt.Errorf("start %s: %w", s.cfg.Srun, err)
	}
	s.srun = cmd
	go func() {
		s.srunErr = cmd.Wait()
		close(s.srunDone)
	}()
	return nil
}

// Close stops listening and ends the step if it is still running.
func (s *Slurm) Close() error {
	s.ln.Close()
	s.mu.Lock()
	srun := s.srun
	s.mu.Unlock()
	if srun != nil {
		select {
		case <-s.srunDone:
		default:
			srun.Process.Signal(syscall.SIGTERM)
		}
	}
	return nil
}

// procClosed is called once per closed proc. When every host's proxy has
// connected and its proc closed, the proxies are exiting; srun ends with
// them. Give it a moment, then end it. (Not when just none is open: a
// proxy that finished, and closed its connection, before the last one
// connected back must not close the listener on it.)
func (s *Slurm) procClosed() {
	s.mu.Lock()
	s.open--
	s.closed++
	last := s.allClosed()
	s.mu.Unlock()
	if last {
		s.ln.Close()
		go s.reapSrun()
	}
}

// allClosed: every expected host's proxy connected and was closed (s.mu
// held).
func (s *Slurm) allClosed() bool { return s.open == 0 && s.closed == len(s.hosts) }

func (s *Slurm) reapSrun() {
	if s.srun == nil {
		return
	}
	start := time.Now()
	defer func() {
		s.cfg.Log.Debug("slurm launcher: step ended", "after_last_close", time.Since(start), "srun", s.srunErr)
	}()
	select {
	case <-s.srunDone:
	case <-time.After(5 * time.Second):
		s.srun.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.srunDone:
		case <-time.After(5 * time.Second):
			s.srun.Process.Kill()
			<-s.srunDone
		}
	}
}

// slurmProc is one proxy's connection.
type slurmProc struct {
	net.Conn
	s         *Slurm
	closeOnce sync.Once
	closed    chan struct{}
	initOnce  sync.Once
}

func (p *slurmProc) done() chan struct{} {
	p.initOnce.Do(func() { p.closed = make(chan struct{}) })
	return p.closed
}

// Close closes the connection, which the proxy takes as loss of its
// launcher: it kills its ranks and exits.
func (p *slurmProc) Close() error {
	ch := p.done()
	p.closeOnce.Do(func() {
		p.Conn.Close()
		close(ch)
		p.s.procClosed()
	})
	return nil
}

// Wait returns once the connection is closed and, for the last proxy of
// the step, once srun has ended.
func (p *slurmProc) Wait() error {
	<-p.done()
	p.s.mu.Lock()
	last := p.s.allClosed()
	p.s.mu.Unlock()
	if last && p.s.srun != nil {
		select {
		case <-p.s.srunDone:
		case <-time.After(15 * time.Second):
		}
	}
	return nil
}

// Kill drops the connection; the proxy kills its ranks with SIGKILL.
func (p *slurmProc) Kill() error { return p.Close() }

// tailBuffer keeps the last max bytes written, for error messages.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

// summary is srun's last output for an error message, unless it was
// shown already (shown: it went to a real Stderr), where repeating it
// printed every srun error twice.
func (t *tailBuffer) summary(shown bool) string {
	if t == nil {
		return ""
	}
	if shown {
		return " (srun's messages above)"
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s := string(bytes.TrimSpace(t.b))
	if s == "" {
		return ""
	}
	return ": " + s
}
