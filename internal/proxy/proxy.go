// Package proxy is gompi-proxy's engine: it receives a job from the launcher
// over a yamux session on its stdin/stdout, forks the local ranks in one
// process group it owns, relays their output and exits, and kills them all
// when told to or when it loses the launcher.
package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gompi/gompi/internal/control"
	"github.com/gompi/gompi/internal/launcher"
	"github.com/gompi/gompi/internal/shm"
	"github.com/gompi/gompi/pmi"
	"github.com/hashicorp/yamux"
)

// ErrLauncherLost means the session to gompiexec ended before the job did.
var ErrLauncherLost = errors.New("proxy: lost connection to launcher")

// ErrReported marks an error Run has already sent to the launcher, which
// shows it: gompi-proxy need not print it again.
var ErrReported = errors.New("proxy: error reported to the launcher")

// fail reports err to the launcher for no rank in particular and returns
// it, marked ErrReported when the launcher got it.
func (p *proxy) fail(err error) error {
	if p.send(control.Msg{T: control.MsgError, Rank: -1, Error: err.Error()}) == nil {
		return fmt.Errorf("%w: %w", ErrReported, err)
	}
	return err
}

// Config tunes a proxy.
type Config struct {
	// Log receives diagnostics; nil discards them.
	Log *slog.Logger
	// OutputWait bounds how long a finished rank's output is awaited when a
	// detached grandchild keeps its pipes open. Default 500ms.
	OutputWait time.Duration
	// Stderr receives the diagnostics of proxies this one starts in a
	// launch tree. Nil discards them.
	Stderr io.Writer
	// Heartbeat, when positive, pings the launcher at this interval and
	// treats about three unanswered intervals as loss of the launcher
	// (launcher.HeartbeatEnv). Zero: rely on the transport to report loss.
	Heartbeat time.Duration
	// Guard is the gompi-proxy executable, run with GuardArg by the
	// leader of the ranks' process group (a shell until then) to kill the
	// group when the proxy dies (procs.go). Empty: no guard; the first rank leads the group,
	// and what ranks start may outlive a proxy that is SIGKILLed.
	Guard string
	// Started is the guard already started with StartGuard(Guard), whose
	// fork overlapped the session's start: Run gives it the job's ranks,
	// or ends it (Abandon) when it returns before starting any. Nil: Run
	// starts the guard itself when the job's ranks are about to start.
	Started *Guard
	// Topo is the topology lookup started with PrefetchTopo while the
	// session was set up. Nil: Run starts it before it waits for the job.
	Topo *Topo
	// ReplayIOCache brings the unflushed extents of a node-local MPI-IO
	// cache directory to their files (the job's IOCacheDirs, before any
	// rank starts). The command supplies runtime/mpiio/journal.ReplayDir:
	// the proxy's packages do not link the rank runtime's. Nil: a job
	// that names cache directories is refused.
	ReplayIOCache func(dir string) error
	// Terminate delivers the SIGTERM or SIGHUP sent to the proxy itself
	// (scancel, a Slurm time limit, a shutdown): its ranks get SIGTERM
	// and, after the job's grace period, SIGKILL, while their output and
	// exit statuses still reach the launcher; Run then returns
	// ErrTerminated. Nil: no such signal is awaited.
	Terminate <-chan os.Signal
}

// ErrTerminated: the proxy was asked to end (Config.Terminate) and its
// ranks have ended.
var ErrTerminated = errors.New("proxy: terminated by a signal")

type rank struct {
	spec     control.RankSpec
	pid      int           // 0: did not start
	exit     <-chan reaped // from the reaper
	exited   bool          // reaped (p.mu): its pid may be reused
	stdin    *os.File      // write end of rank 0's stdin pipe
	events   *os.File      // write end of the rank's event channel (events.go)
	outs     []*os.File    // read ends of its stdout and stderr
	outputWG sync.WaitGroup
}

type proxy struct {
	ctx   context.Context
	cfg   Config
	log   *slog.Logger
	conn  *control.Conn
	job   *control.Job
	ranks []*rank
	pgid  int // process group of all local ranks
	// bind is, per rank, the fork wrapper that sets its CPUs and memory
	// policy (-bind-to, -membind); nil without binding.
	bind map[int]func(start func() error) error
	// ifaceEnv is what -iface sets in every rank's environment.
	ifaceEnv []string
	// guardPipe keeps the group's guard waiting; groupKilled: SIGKILL went
	// to the group, whose id may be reused once it is empty.
	guardPipe    *os.File
	groupKilled  bool
	guardAdopted bool // cfg.Started was taken for this job's ranks
	reaper       *reaper
	sweptDead    chan struct{} // closed when sweepDeadShm is done

	up          *uplink
	tree        *tree
	node        *pmi.Node
	pmiListener net.Listener // PMI_PORT mode only

	mu         sync.Mutex
	killing    bool
	noFinalize map[int]bool     // ranks whose PMI connection closed without finalize
	appEnv     map[int]*envList // merged base environment per app
	appPaths   map[int]appPath  // each app's executable, searched once
	topo       []string         // shares the node's hwloc topology with ranks (topo.go)
	// barrierBroken: a rank's ErrBarrierBroken was reported (once per node).
	barrierBroken bool
}

// Run serves one job over rw (the proxy's stdin/stdout) and returns when the
// job has ended, or with ErrLauncherLost after killing every rank.
func Run(ctx context.Context, rw io.ReadWriteCloser, cfg Config) error {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.OutputWait == 0 {
		cfg.OutputWait = 500 * time.Millisecond
	}
	if cfg.Stderr == nil {
		cfg.Stderr = io.Discard
	}
	ycfg := yamux.DefaultConfig()
	ycfg.LogOutput = io.Discard
	ycfg.EnableKeepAlive = false // a pipe reports loss itself
	if cfg.Heartbeat > 0 {
		// yamux closes the session when a ping is unanswered for
		// ConnectionWriteTimeout.
		ycfg.EnableKeepAlive = true
		ycfg.KeepAliveInterval = cfg.Heartbeat
		ycfg.ConnectionWriteTimeout = 2 * cfg.Heartbeat
	}
	sess, err := yamux.Server(control.Coalesce(rw), ycfg)
	if err != nil {
		return fmt.Errorf("proxy: session: %w", err)
	}
	defer sess.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if cfg.Topo == nil {
		cfg.Topo = PrefetchTopo()
	}
	p := &proxy{cfg: cfg, log: cfg.Log, ctx: ctx, noFinalize: map[int]bool{}}
	defer func() {
		if cfg.Started != nil && !p.guardAdopted {
			cfg.Started.Abandon()
		}
	}()

	ctl, err := acceptKind(sess, control.StreamControl)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrLauncherLost, err)
	}
	p.conn = control.NewConn(ctl)
	f, err := p.conn.Recv()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrLauncherLost, err)
	}
	if f.Type != control.FrameMsg || f.Msg.T != control.MsgJob || f.Msg.Job == nil {
		return errors.New("proxy: first message is not a job")
	}
	p.job = f.Msg.Job
	if p.job.Version != control.Version {
		return p.fail(fmt.Errorf("proxy: protocol version %d, launcher speaks %d (install matching gompi-proxy)", control.Version, p.job.Version))
	}

	done := make(chan struct{})
	p.tree = newTree(p)
	defer p.tree.close()
	p.up = newUplink(p.send, p.tree.fence)
	if err := p.setupPMI(ctx); err != nil {
		return p.fail(err)
	}
	// Children first: their start crosses the network while ours forks.
	p.tree.start(ctx)
	if err := p.start(); err != nil {
		err = p.fail(err)
		p.killAll(syscall.SIGKILL)
		return err
	}
	go p.acceptStdin(sess)

	exited := make(chan struct{})
	go func() {
		p.waitAll()
		close(exited)
	}()
	cmds := make(chan control.Msg)
	lost := make(chan error, 1)
	go func() {
		for {
			f, err := p.conn.Recv()
			if err != nil {
				lost <- err
				return
			}
			if f.Type == control.FrameMsg {
				select {
				case cmds <- f.Msg:
				case <-done:
					return
				}
			}
		}
	}()
	defer close(done)
	term, terminated := cfg.Terminate, false
	ended := func() error {
		if terminated {
			return ErrTerminated
		}
		return nil
	}
	for {
		select {
		case <-exited:
			if err := p.send(control.Msg{T: control.MsgDone}); err != nil {
				// Every local rank has ended, so nothing is left to kill
				// here. The send fails too when the launcher read MsgDone
				// and closed the session before the write had completed
				// here (it releases a proxy as soon as its hosts are
				// done): that is success, and an exit status of 1 would
				// make srun report a failed task and kill the step.
				p.log.Debug("launcher gone after the last rank ended", "err", err)
				return ended()
			}
			// Keep relaying for the proxies below until they are done.
			// Then this proxy's part is over once what it wrote has left
			// this host: the launcher reads a stream to its end even when
			// its own writes to an exited proxy fail (launcher.ReadToEnd),
			// so there is no need to wait for it to close the session.
			for {
				select {
				case <-p.tree.allDone:
					waitSent(rw, lost, 10*time.Second)
					return ended()
				case <-lost:
					return ended()
				case m := <-cmds:
					p.command(m, false)
				}
			}
		case err := <-lost:
			p.log.Debug("launcher lost", "err", err)
			p.killAll(syscall.SIGKILL)
			<-exited
			return fmt.Errorf("%w: %v", ErrLauncherLost, err)
		case <-ctx.Done():
			p.killAll(syscall.SIGKILL)
			<-exited
			return ctx.Err()
		case <-term:
			// As Hydra's ranks under scancel or the time limit: they get
			// to run their SIGTERM handlers and say so.
			term, terminated = nil, true
			p.terminate()
		case m := <-cmds:
			p.command(m, true)
		}
	}
}

// command acts on a message from above and passes it on to the proxies
// below. ranksLive is false once every local rank has been reaped, so no
// signal can reach a recycled process group.
func (p *proxy) command(m control.Msg, ranksLive bool) {
	switch m.T {
	case control.MsgSignal:
		if ranksLive {
			p.signal(syscall.Signal(m.Sig))
		}
		p.tree.down(m, true)
	case control.MsgKill:
		if ranksLive {
			p.terminate()
		}
		p.tree.down(m, true)
	case control.MsgEvent:
		if ranksLive {
			p.deliverEvent(m)
		}
		p.tree.down(m, true)
	case control.MsgDead:
		if p.node != nil {
			p.node.MarkDead(m.Rank)
		}
		p.tree.down(m, true)
	case control.MsgFenceDone:
		p.up.deliver(m)
		p.tree.down(m, true)
	case control.MsgNameReply:
		if m.Host == p.job.Index {
			p.up.deliver(m)
		} else {
			p.tree.down(m, false)
		}
	}
}

// send stamps a message with this proxy's host index and sends it up.
func (p *proxy) send(m control.Msg) error {
	m.Host = p.job.Index
	return p.conn.Send(m)
}

func acceptKind(sess *yamux.Session, kind byte) (io.ReadWriteCloser, error) {
	st, err := sess.Accept()
	if err != nil {
		return nil, err
	}
	var b [1]byte
	if _, err := io.ReadFull(st, b[:]); err != nil {
		return nil, err
	}
	if b[0] != kind {
		st.Close()
		return nil, fmt.Errorf("unexpected stream kind %q", b[0])
	}
	return st, nil
}

// acceptStdin takes the launcher's stdin stream for rank 0.
func (p *proxy) acceptStdin(sess *yamux.Session) {
	st, err := acceptKind(sess, control.StreamStdin)
	if err != nil {
		return
	}
	defer st.Close()
	var r0 *rank
	for _, r := range p.ranks {
		if r.spec.Rank == 0 && r.stdin != nil {
			r0 = r
		}
	}
	if r0 == nil {
		io.Copy(io.Discard, st)
		return
	}
	io.Copy(r0.stdin, st)
	r0.stdin.Close()
}

func (p *proxy) start() error {
	for _, rs := range p.job.Ranks {
		if rs.AppNum < 0 || rs.AppNum >= len(p.job.Apps) {
			return fmt.Errorf("proxy: rank %d: bad app %d", rs.Rank, rs.AppNum)
		}
	}
	// Data a crashed job's write acknowledged reaches the shared file
	// before any rank can read it.
	for _, dir := range p.job.IOCacheDirs {
		if p.cfg.ReplayIOCache == nil {
			return fmt.Errorf("proxy: host %s: this gompi-proxy cannot replay MPI-IO caches (-io-cache %s)", p.job.Host, dir)
		}
		if err := p.cfg.ReplayIOCache(dir); err != nil {
			return fmt.Errorf("proxy: host %s: replaying the MPI-IO cache %s: %w", p.job.Host, dir, err)
		}
	}
	if p.job.BindTo != "" || p.job.HostBindTo != "" || p.job.Membind != "" {
		if err := p.planBinding(); err != nil {
			return err
		}
	}
	var err error
	if p.ifaceEnv, err = ifaceEnv(p.job); err != nil {
		return err
	}
	p.topo = topoEnv(p.ctx, p.job.Env, p.cfg.Topo)
	p.sweptDead = make(chan struct{})
	go func() { p.sweepDeadShm(); close(p.sweptDead) }()
	p.reaper = newReaper()
	if g := p.cfg.Started; g != nil || p.cfg.Guard != "" {
		if g == nil {
			g = StartGuard(p.cfg.Guard)
		}
		p.guardAdopted = true
		pid, w, err := g.wait()
		if err != nil {
			return err
		}
		if err := tellGuard(w, p.job.JobID, p.shmDirs()); err != nil {
			g.Abandon()
			return fmt.Errorf("guard: %w", err)
		}
		p.pgid, p.guardPipe = pid, w
		p.reaper.setGroup(pid)
	}
	pids := make([]int, len(p.job.Ranks))
	for i := range pids {
		pids[i] = -1
	}
	ranks, errs := p.startRanks()
	started := 0
	for i, r := range ranks {
		if r != nil {
			p.ranks = append(p.ranks, r)
			pids[i] = r.pid
			started++
		}
	}
	for i, err := range errs {
		if err != nil {
			// The first rank that cannot start ends the start: the
			// launcher names it, with the limit hit, and ends the job
			// (exit 255); the ranks started so far are stopped.
			rs := p.job.Ranks[i]
			msg := startFailure(rs.Rank, p.job.Host, started, len(p.job.Ranks), err)
			p.send(control.Msg{T: control.MsgError, Rank: rs.Rank, Code: startFailedCode, Error: msg, At: time.Now().UnixNano()})
			p.ranks = append(p.ranks, &rank{spec: rs})
			p.killAll(syscall.SIGKILL)
			break
		}
	}
	if err := p.send(control.Msg{T: control.MsgStarted, Pids: pids}); err != nil {
		// The launcher went away while we were starting (another host
		// failed): not an error of this host's.
		return fmt.Errorf("%w: %v", ErrLauncherLost, err)
	}
	return nil
}

// startRanks starts the local ranks, launcher.ForkThreads at a time when a
// guard leads their group (else the first rank must lead it before the
// others can join). It stops at the first failure: ranks[i] is nil where
// rank i did not start, errs[i] why (only the first failure is reported;
// ranks already forking when it happened still start, and are stopped
// with the rest).
func (p *proxy) startRanks() (ranks []*rank, errs []error) {
	n := len(p.job.Ranks)
	ranks, errs = make([]*rank, n), make([]error, n)
	par := launcher.ForkThreads
	if p.pgid == 0 {
		par = 1
	}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed bool
	)
	sem := make(chan struct{}, par)
	for i, rs := range p.job.Ranks {
		sem <- struct{}{}
		mu.Lock()
		stop := failed
		mu.Unlock()
		if stop {
			break
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			r, err := p.startRank(rs)
			mu.Lock()
			ranks[i], errs[i] = r, err
			failed = failed || err != nil
			mu.Unlock()
		}()
		if par == 1 {
			wg.Wait() // the first rank's pid becomes the group's id
		}
	}
	wg.Wait()
	return ranks, errs
}

func (p *proxy) startRank(rs control.RankSpec) (*rank, error) {
	app := p.job.Apps[rs.AppNum]
	if len(app.Argv) == 0 {
		return nil, fmt.Errorf("rank %d: empty command", rs.Rank)
	}
	prog := app.Argv[0]
	if app.Path != "" {
		prog = app.Path
	}
	path, err := p.appPath(rs.AppNum, prog)
	if err != nil {
		return nil, err
	}
	cmd := &exec.Cmd{Path: path, Args: app.Argv, Dir: app.Wdir}
	r := &rank{spec: rs}
	var closeAfter []*os.File
	defer func() {
		for _, f := range closeAfter {
			f.Close()
		}
	}()
	pmiEnv, pmiFile, err := p.pmiForRank(p.ctx, rs.Rank)
	if err != nil {
		return nil, err
	}
	if pmiFile != nil {
		cmd.ExtraFiles = []*os.File{pmiFile}
		closeAfter = append(closeAfter, pmiFile)
	}
	cmd.Env = append(p.rankEnv(rs, app), pmiEnv...)
	if evr, err := p.eventChannel(r, cmd); err == nil {
		closeAfter = append(closeAfter, evr)
	} else {
		p.log.Debug("no event channel", "rank", rs.Rank, "err", err)
	}
	if rs.Rank == 0 {
		rd, wr, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		cmd.Stdin, r.stdin = rd, wr
		closeAfter = append(closeAfter, rd)
	}
	var readers []*os.File
	for fd := 1; fd <= 2; fd++ {
		rd, wr, err := os.Pipe()
		if err != nil {
			for _, f := range readers {
				f.Close()
			}
			return nil, err
		}
		readers = append(readers, rd)
		closeAfter = append(closeAfter, wr)
		if fd == 1 {
			cmd.Stdout = wr
		} else {
			cmd.Stderr = wr
		}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: p.pgid, Pdeathsig: syscall.SIGKILL}
	start := launcher.StartLocked
	if p.bind != nil {
		if around := p.bind[rs.Rank]; around != nil {
			start = func(c *exec.Cmd) error { return launcher.StartLockedWith(c, around) }
		}
	}
	err = start(cmd)
	if errors.Is(err, syscall.ENOEXEC) && !isBinary(cmd.Path) {
		cmd = shellFallback(cmd)
		err = start(cmd)
	}
	if err != nil {
		for _, f := range readers {
			f.Close()
		}
		if r.stdin != nil {
			r.stdin.Close()
		}
		if r.events != nil {
			r.events.Close()
		}
		return nil, err
	}
	r.pid = cmd.Process.Pid
	r.exit = p.reaper.register(r.pid)
	// The reaper waits for it; the handle (a pidfd) would cost a
	// descriptor per rank.
	cmd.Process.Release()
	if p.pgid == 0 {
		p.pgid = r.pid
		p.reaper.setGroup(r.pid)
	}
	r.outs = readers
	for i, rd := range readers {
		r.outputWG.Add(1)
		go p.relay(r, byte(i+1), rd)
	}
	return r, nil
}

// shellFallback is cmd run by /bin/sh, as execvp runs a file that exec
// refused with ENOEXEC (a script without a #! line): Hydra's proxy execs
// ranks with execvp, so such scripts run there. Only that failure pays.
func shellFallback(cmd *exec.Cmd) *exec.Cmd {
	// A fresh Cmd: a started one (even a failed start) cannot start again.
	return &exec.Cmd{Path: "/bin/sh", Args: append([]string{"/bin/sh", cmd.Path}, cmd.Args[1:]...),
		Dir: cmd.Dir, Env: cmd.Env, Stdin: cmd.Stdin, Stdout: cmd.Stdout, Stderr: cmd.Stderr,
		ExtraFiles: cmd.ExtraFiles, SysProcAttr: cmd.SysProcAttr}
}

// isBinary reports whether the file starts with a NUL byte in its first
// 80 bytes, as bash decides that a file exec refused is a binary (another
// architecture's) and not a script: the shell would call it a syntax error.
func isBinary(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	b := make([]byte, 80)
	n, _ := io.ReadFull(f, b)
	return bytes.IndexByte(b[:n], 0) >= 0
}

func (p *proxy) waitAll() {
	var wg sync.WaitGroup
	for _, r := range p.ranks {
		if r.pid == 0 {
			continue
		}
		wg.Add(1)
		go func(r *rank) {
			defer wg.Done()
			st := <-r.exit
			unfinished := false
			if p.node != nil {
				// Barriers it has not entered can no longer complete.
				p.node.Left(r.spec.Rank)
				unfinished = p.node.Unfinished(r.spec.Rank)
			}
			p.closeEvents(r)
			at := st.at // when it ended, not when its report leaves
			code, sig := statusOf(st.ws)
			msg := ""
			p.mu.Lock()
			r.exited = true
			if code == 0 && sig == 0 && (p.noFinalize[r.spec.Rank] || unfinished) {
				// Hydra's rule: a rank that spoke PMI but left without
				// finalize has failed, or the others would wait forever.
				code, msg = 1, "exited without calling MPI_Finalize/PMI finalize"
			}
			p.mu.Unlock()
			outDone := make(chan struct{})
			go func() { r.outputWG.Wait(); close(outDone) }()
			select {
			case <-outDone:
			case <-time.After(p.cfg.OutputWait):
			}
			if code != 0 || sig != 0 {
				p.log.Debug("rank failed", "rank", r.spec.Rank, "code", code, "signal", sig)
			}
			p.send(control.Msg{T: control.MsgExit, Rank: r.spec.Rank, Code: code, Signal: sig, Error: msg, At: at})
		}(r)
	}
	wg.Wait()
	// Every rank has ended: what they started and left in the group goes
	// too (a detached child holding a rank's stdout would otherwise keep
	// the job alive), and the guard with it. Then the output of anything
	// that escaped the group is awaited a bounded time.
	p.killGroup()
	allOut := make(chan struct{})
	go func() {
		for _, r := range p.ranks {
			r.outputWG.Wait()
		}
		close(allOut)
	}()
	select {
	case <-allOut:
	case <-time.After(p.cfg.OutputWait):
		for _, r := range p.ranks {
			for _, f := range r.outs {
				f.Close()
			}
		}
		<-allOut
	}
	if p.reaper != nil {
		p.reaper.close()
	}
	if p.sweptDead != nil {
		<-p.sweptDead
	}
	p.sweepShm()
}

// killGroup SIGKILLs the ranks' group once, if a guard leads it (else its
// id may already be another group's).
func (p *proxy) killGroup() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.guardPipe == nil || p.groupKilled {
		return
	}
	p.groupKilled = true
	if p.reaper.reapedEarly(p.pgid) {
		// Someone killed the guard: the group's id is safe to signal only
		// while the group has members (an empty group's id may be reused).
		p.guardPipe.Close()
		if len(groupMembers(p.pgid)) > 0 {
			syscall.Kill(-p.pgid, syscall.SIGKILL)
		}
		return
	}
	syscall.Kill(-p.pgid, syscall.SIGKILL)
	p.guardPipe.Close()
}

// shmDirs are the directories where the job's ranks may put
// shared-memory rendezvous files.
func (p *proxy) shmDirs() []string {
	dirs := []string{shm.DefaultDir()}
	if d := os.Getenv("GOMPI_SHM_DIR"); d != "" {
		dirs = append(dirs, d)
	}
	env := p.job.Env
	for _, a := range p.job.Apps {
		env = append(env[:len(env):len(env)], a.Inherit...)
	}
	for _, kv := range env {
		if d, ok := strings.CutPrefix(kv, "GOMPI_SHM_DIR="); ok && d != "" {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// sweepShm removes the job's shared-memory rendezvous files once every
// local rank has exited. The runtime unlinks each file as soon as both
// ranks mapped it, so only a rank killed while connecting leaves one.
func (p *proxy) sweepShm() {
	for _, d := range p.shmDirs() {
		if n, err := shm.SweepJob(d, p.job.JobID); n > 0 || (err != nil && !errors.Is(err, os.ErrNotExist)) {
			p.log.Debug("swept shared-memory files", "dir", d, "removed", n, "err", err)
		}
	}
}

// sweepDeadShm removes, when a job starts, the rendezvous files of any job
// of this user whose creator is gone: a job whose proxy was SIGKILLed
// could not sweep its own (shm.SweepDead).
func (p *proxy) sweepDeadShm() {
	for _, d := range p.shmDirs() {
		if n, err := shm.SweepDead(d, time.Minute); n > 0 || (err != nil && !errors.Is(err, os.ErrNotExist)) {
			p.log.Debug("swept dead jobs' shared-memory files", "dir", d, "removed", n, "err", err)
		}
	}
}

func (p *proxy) signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.signalLocked(sig)
}

func (p *proxy) signalLocked(sig syscall.Signal) {
	if p.pgid <= 0 || p.groupKilled {
		return
	}
	if sig == syscall.SIGKILL && p.guardPipe != nil {
		p.groupKilled = true
		defer p.guardPipe.Close()
	}
	syscall.Kill(-p.pgid, sig)
}

// killAll signals the group and every rank not reaped yet (one that left
// the group too).
func (p *proxy) killAll(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.signalLocked(sig)
	for _, r := range p.ranks {
		if r.pid > 0 && !r.exited {
			syscall.Kill(r.pid, sig)
		}
	}
}

// terminate sends SIGTERM now and SIGKILL after the grace period.
func (p *proxy) terminate() {
	p.mu.Lock()
	if p.killing {
		p.mu.Unlock()
		return
	}
	p.killing = true
	p.mu.Unlock()
	p.killAll(syscall.SIGTERM)
	grace := time.Duration(p.job.GraceMS) * time.Millisecond
	time.AfterFunc(grace, func() { p.killAll(syscall.SIGKILL) })
}

// appPath is an app's executable as exec.Command finds it: a bare name
// is searched in the proxy's PATH, the same for every rank of the app, so
// once per app rather than once per rank.
type appPath struct {
	path string
	err  error
}

func (p *proxy) appPath(app int, name string) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if a, ok := p.appPaths[app]; ok {
		return a.path, a.err
	}
	a := appPath{path: name}
	if filepath.Base(name) == name {
		lp, err := exec.LookPath(name)
		if lp != "" {
			a.path = lp
		}
		a.err = err
	}
	if p.appPaths == nil {
		p.appPaths = map[int]appPath{}
	}
	p.appPaths[app] = a
	return a.path, a.err
}

func (p *proxy) rankEnv(rs control.RankSpec, app control.App) []string {
	// The merged base (proxy or minimal environment, job env, app env) is
	// the same for every rank of an app: build it once.
	p.mu.Lock()
	if p.appEnv == nil {
		p.appEnv = map[int]*envList{}
	}
	base := p.appEnv[rs.AppNum]
	if base == nil {
		// The proxy's own environment first, whatever -genvnone says, as
		// Hydra's proxies do: -genvnone and -genvlist only hold back
		// gompiexec's (Job.Env, App.Inherit). So a forked proxy passes
		// everything, and over SSH ranks keep the remote login's variables.
		base = &envList{}
		for _, kv := range os.Environ() {
			base.set(kv)
		}
		for _, kv := range app.Inherit {
			base.set(kv)
		}
		for _, kv := range p.job.Env {
			base.set(kv)
		}
		for _, kv := range app.Env {
			base.set(kv)
		}
		if !base.has("HWLOC_XMLFILE") && !base.has("GOMPI_TOPO") {
			for _, kv := range p.topo {
				base.set(kv)
			}
		}
		for _, kv := range p.ifaceEnv {
			base.set(kv)
		}
		for _, kv := range hostnameEnv(p.job) {
			base.set(kv)
		}
		// As Hydra: gfortran ranks otherwise buffer their output to our
		// pipes and it arrives late or, at a crash, never.
		base.set("GFORTRAN_UNBUFFERED_PRECONNECTED=y")
		p.appEnv[rs.AppNum] = base
	}
	p.mu.Unlock()
	env := base.clone()
	local := len(p.job.Ranks)
	env.set("PMI_RANK=" + strconv.Itoa(rs.Rank))
	env.set("PMI_SIZE=" + strconv.Itoa(p.job.Size))
	env.set("MPI_LOCALRANKID=" + strconv.Itoa(rs.LocalRank))
	env.set("MPI_LOCALNRANKS=" + strconv.Itoa(local))
	if g := p.job.GPUsPerProc; g != nil {
		env.set("CUDA_VISIBLE_DEVICES=" + cudaDevices(*g, rs.LocalRank))
	}
	env.set("GOMPI_JOBID=" + p.job.JobID)
	env.set("GOMPI_APPNUM=" + strconv.Itoa(rs.AppNum))
	return env.list()
}
