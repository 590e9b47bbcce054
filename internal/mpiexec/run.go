// Package mpiexec is gompiexec's engine: it places ranks, starts one proxy per
// host through a launcher backend, supervises the job over the control
// protocol, forwards stdio and signals, and decides the job's exit code.
package mpiexec

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gompi/gompi/hostfile"
	"github.com/gompi/gompi/internal/control"
	"github.com/gompi/gompi/internal/launcher"
	"github.com/gompi/gompi/pmi"
	"github.com/hashicorp/yamux"
)

// DefaultFanout is Config.Fanout's default: jobs on up to this many hosts
// are started flat, straight from gompiexec.
const DefaultFanout = 32

// Exit codes gompiexec itself chooses (a failing rank's own code otherwise).
const (
	ExitTimeout  = 124 // -timeout / MPIEXEC_TIMEOUT expired
	ExitInternal = 255 // launcher or proxy failure not caused by a rank
)

// Config.Universe's symbolic values (Hydra's -usize INFINITE and SYSTEM).
const (
	UniverseInfinite = -1
	UniverseSystem   = -2
)

// Segment is one MPMD part of the command line.
type Segment struct {
	Argv []string
	// Path is the program to run when it is not Argv[0] (gompiexec's
	// resolution of it); argv[0] stays as the user typed it.
	Path string
	N    int
	Env  []string // -env KEY=VALUE pairs
	Wdir string
	// EnvSet replaces, for this segment's ranks, the environment they
	// inherit from gompiexec (-envall, -envnone, -envlist): Inherit instead
	// of the inherited part of Config.Env, EnvNone instead of
	// Config.EnvNone. Config.Env then holds only the -genv pairs.
	EnvSet  bool
	EnvNone bool
	Inherit []string
}

// Config describes a job.
type Config struct {
	Segments []Segment
	Hosts    []hostfile.Host
	Place    hostfile.Options
	// Env is what ranks inherit from gompiexec (KEY=VALUE), already filtered
	// by -genvall/-genvlist, plus -genv pairs.
	Env []string
	// EnvNone: Env holds only what -genvnone/-genvlist let through; ranks
	// still start from their proxy's environment, as under Hydra.
	EnvNone     bool
	PrependRank bool
	// Timeout ends the job when it expires; 0 means none.
	Timeout time.Duration
	// Grace is how long ranks get between SIGTERM and SIGKILL. Zero means
	// the default, 3s; a negative value means no grace: SIGKILL right after
	// SIGTERM (gompiexec -grace 0).
	Grace             time.Duration
	PrintAllExitCodes bool
	// NoAutoCleanup (-disable-auto-cleanup) keeps the other ranks running
	// when one fails (dac.go); an abort still ends the job.
	NoAutoCleanup bool
	// PMIPort serves PMI over TCP (PMI_PORT, PMI_ID) instead of PMI_FD.
	PMIPort bool
	// PMITrace makes proxies print every PMI exchange to their stderr.
	PMITrace bool
	// Profile prints, after the job, how many PMI requests reached the
	// launcher (fences, name service, aborts: one per proxy each), in
	// Hydra's -profile words.
	Profile bool
	// BindTo is -bind-to (TYPE, TYPE:N or user:..., as package bind
	// parses it); "" binds nothing. A host's binding= replaces it there.
	BindTo string
	// MapBy is -map-by (TYPE or TYPE:N); Membind is -membind.
	MapBy, Membind string
	// Iface is -iface: the network interface ranks advertise, resolved by
	// each proxy on its own host, and the one the Slurm launcher's
	// connect-back listener uses.
	Iface string
	// HostnameProp gives MPICH ranks their host's name as the host list
	// writes it (MPIR_CVAR_CH3_INTERFACE_HOSTNAME), as Hydra does by
	// default; gompiexec turns it off with -iface.
	HostnameProp bool
	// GPUsPerProc is -gpus-per-proc N (control.Job); nil is AUTO.
	GPUsPerProc *int
	// Nameserver is -nameserver HOST:PORT: ranks' MPI_Publish_name and
	// MPI_Lookup_name go to that name server (MPICH's hydra_nameserver or
	// gompi-nameserver), shared with other jobs; "" keeps names in the job.
	Nameserver string
	// IOCacheDirs are node-local MPI-IO cache directories every proxy
	// replays (journal.ReplayDir) before it starts its ranks.
	IOCacheDirs []string
	// ProxyPath is the gompi-proxy command on every host.
	ProxyPath string
	// Backend picks the launcher backend for a host. Default: fork for all.
	Backend func(h hostfile.Host) launcher.Backend
	// Fanout is how many proxies gompiexec, and then each proxy, starts
	// directly; hosts beyond it are started by proxies in a tree, so launch
	// time grows with log(hosts). Hosts whose backend cannot be re-created
	// on another host (a fork for this machine among remote hosts) are
	// always started by gompiexec. Default DefaultFanout.
	Fanout int

	// Output sends output to files, filters it, or prefixes it by a
	// pattern (route.go).
	Output OutputConfig
	// Universe is what PMI get_universe_size reports (-usize): n > 0, or
	// UniverseSystem (the slots of the hosts given ranks); 0 and UniverseInfinite
	// report -1, and MPICH then leaves MPI_UNIVERSE_SIZE unset, as under
	// Hydra's default -usize INFINITE.
	Universe int
	files    map[string]*os.File // output files of all attempts (route.go), set by Run

	Stdin          io.Reader // nil: ranks read /dev/null
	Stdout, Stderr io.Writer
	// Signals delivers signals received by gompiexec.
	Signals <-chan os.Signal
	Log     *slog.Logger

	// Checkpoint/restart (restart.go).
	Restart RestartConfig
	outcome *outcome // filled by one attempt, read by the restart loop
}

func (c *Config) validate() error {
	if len(c.Segments) == 0 {
		return errors.New("no program given")
	}
	for i, s := range c.Segments {
		if len(s.Argv) == 0 {
			return fmt.Errorf("segment %d: no program given", i+1)
		}
		if s.N <= 0 {
			return fmt.Errorf("segment %d (%s): -n %d: need at least 1 process", i+1, s.Argv[0], s.N)
		}
	}
	if c.ProxyPath == "" {
		return errors.New("no gompi-proxy path")
	}
	if c.Grace == 0 {
		c.Grace = 3 * time.Second
	}
	if c.Grace < 0 {
		c.Grace = 0
	}
	if c.Fanout < 0 {
		return fmt.Errorf("fanout %d: need at least 1", c.Fanout)
	}
	if c.Fanout == 0 {
		c.Fanout = DefaultFanout
	}
	if c.Backend == nil {
		c.Backend = func(hostfile.Host) launcher.Backend { return launcher.Fork{} }
	}
	if c.Stdout == nil {
		c.Stdout = io.Discard
	}
	if c.Stderr == nil {
		c.Stderr = io.Discard
	}
	if c.Log == nil {
		c.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return nil
}

// universeSize is what get_universe_size answers. SYSTEM counts, as
// Hydra's proxies do, the slots of the hosts that received ranks (used,
// hosts of the layout), not of every host listed.
func (c *Config) universeSize(used []hostfile.Host) int {
	switch {
	case c.Universe > 0:
		return c.Universe
	case c.Universe == UniverseSystem:
		n := 0
		for _, h := range used {
			n += h.Slots
		}
		return n
	}
	return -1
}

// rankState is what the launcher knows of one rank.
type rankState struct {
	host    int
	pid     int
	exited  bool
	code    int
	signal  int
	failMsg string // start failure
}

// proxyConn is a proxy gompiexec started itself (a top of the launch
// tree); messages for hosts below it travel through it.
type proxyConn struct {
	index int   // host index
	hosts []int // every host of its subtree, itself first
	proc  *launcher.Recording
	sess  *yamux.Session
	conn  *control.Conn
	out   outbox
	fence control.KVSJoin // its fence message being reassembled

	closeOnce sync.Once
}

// close ends the session and the proxy's process (idempotent): the proxy
// takes the end of its session as the end of the job.
func (p *proxyConn) close() {
	p.closeOnce.Do(func() {
		p.sess.Close()
		p.proc.Close()
	})
}

// hostState is what the launcher knows of one host's proxy.
type hostState struct {
	name string
	top  int  // index in job.tops of the proxy that routes to it
	done bool // sent MsgDone or was lost
	// failed: the proxy reported why it cannot go on (an error message
	// for no rank), so its session's end that follows is no news.
	failed bool
}

type event struct {
	top int // the top-level proxy the event came through
	msg control.Msg
	err error // reader ended
}

// runOnce runs one attempt of a job to completion (see Run).
func runOnce(ctx context.Context, cfg Config) (int, error) {
	if err := cfg.validate(); err != nil {
		return ExitInternal, err
	}
	counts := make([]int, len(cfg.Segments))
	for i, s := range cfg.Segments {
		counts[i] = s.N
	}
	layout, err := hostfile.Place(cfg.Hosts, counts, cfg.Place)
	if err != nil {
		return ExitInternal, err
	}
	for i, h := range layout.Hosts {
		cfg.Log.Debug("placement", "host", h.Name, "ranks", layout.RanksOn(i))
	}
	j := &job{cfg: cfg, layout: layout, out: newOutput(cfg.Stdout, cfg.Stderr, cfg.PrependRank || cfg.Output.Prepend != nil)}
	j.outErr = make(chan error, 2)
	start := time.Now()
	if p := cfg.Output.Prepend; p != nil {
		vars := j.patternVars(start)
		j.out.prefix = func(dst []byte, rank int) []byte { return p.Expand(dst, vars(rank)) }
	}
	j.route = j.newRouter(start)
	code, err := j.run(ctx)
	if cfg.Profile {
		j.printProfile()
	}
	return code, err
}

type job struct {
	cfg      Config
	layout   *hostfile.Layout
	out      *output
	route    *router // nil unless output goes to files or is filtered (route.go)
	tops     []*proxyConn
	hosts    []hostState
	ranks    []rankState
	events   chan event
	finished chan struct{} // closed when the supervision loop returns
	kvs      *pmi.Job
	// pmiCalls counts the PMI requests proxies passed up (-profile).
	pmiCalls int
	// doneHosts lists hosts whose every rank has ended, in order.
	doneHosts []int
	ctx       context.Context

	firstFail  int   // rank, -1 if none
	failAt     int64 // when its proxy saw firstFail fail (control.Msg.At)
	abortMsg   string
	lostQuiet  bool // the launcher dropped the sessions itself: their end is no news
	outErr     chan error
	outFailed  bool // the job's output could not be written
	failCode   int
	killing    bool
	timedOut   bool
	proxyError string
	ckptSeq    int64
}

func newJobID() string { return randomHex(8) }

// randomHex is n random bytes, hex-encoded.
func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// newJobSecret is the per-job secret every rank gets as GOMPI_JOB_SECRET:
// the Go runtime authenticates connections between ranks with it.
func newJobSecret() string { return randomHex(32) }

func (j *job) run(ctx context.Context) (int, error) {
	cfg := j.cfg
	jobID := newJobID()
	rankEnv := append(cfg.Env[:len(cfg.Env):len(cfg.Env)], "GOMPI_JOB_SECRET="+newJobSecret())
	j.ranks = make([]rankState, j.layout.Size())
	for i, r := range j.layout.Ranks {
		j.ranks[i].host = r.Host
	}
	j.firstFail = -1
	j.events = make(chan event, 64)
	j.out.onErr = func(fd byte, err error) {
		name := map[byte]string{1: "stdout", 2: "stderr"}[fd]
		select {
		case j.outErr <- fmt.Errorf("cannot write the job's %s (%w)", name, err):
		default:
		}
	}
	j.finished = make(chan struct{})
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	j.ctx = ctx
	mapping, _ := j.layout.ProcessMapping()
	universe := cfg.universeSize(j.layout.Hosts)
	apps := make([]control.App, len(cfg.Segments))
	for i, s := range cfg.Segments {
		apps[i] = control.App{Argv: s.Argv, Path: s.Path, Env: s.Env, Wdir: s.Wdir,
			EnvSet: s.EnvSet, EnvNone: s.EnvNone, Inherit: s.Inherit}
	}
	rankSpecs := func(host int) []control.RankSpec {
		var specs []control.RankSpec
		for _, r := range j.layout.RanksOn(host) {
			lr := j.layout.Ranks[r]
			specs = append(specs, control.RankSpec{Rank: r, LocalRank: lr.LocalRank, AppNum: lr.AppNum})
		}
		return specs
	}
	tops := planTree(j.layout.Hosts, cfg.Backend, cfg.Fanout, rankSpecs)
	announceBatches(j.layout.Hosts, cfg.Backend, tops)
	j.hosts = make([]hostState, len(j.layout.Hosts))
	for i, h := range j.layout.Hosts {
		j.hosts[i].name = h.Name
	}
	for ti, t := range tops {
		for _, h := range t.sub.Hosts() {
			j.hosts[h].top = ti
		}
	}
	j.kvs = pmi.NewJob(len(tops))
	defer j.kvs.Close(nil)

	// Start every top-level proxy concurrently (each starts its own
	// subtree): launch time must not grow with hosts.
	j.tops = make([]*proxyConn, len(tops))
	errs := make([]error, len(tops))
	var started sync.WaitGroup
	for ti, t := range tops {
		started.Add(1)
		go func(ti int, t plannedTop) {
			defer started.Done()
			h := j.layout.Hosts[t.sub.Index]
			jb := &control.Job{
				Version: control.Version, JobID: jobID, Host: h.Name, Size: j.layout.Size(),
				GraceMS: int(cfg.Grace / time.Millisecond), Apps: apps, Ranks: t.sub.Ranks,
				Env: rankEnv, EnvNone: cfg.EnvNone, BindTo: cfg.BindTo, HostBindTo: t.sub.BindTo,
				MapBy: cfg.MapBy, Membind: cfg.Membind, Iface: cfg.Iface,
				KVSName: "kvs_" + jobID, ProcessMapping: mapping, UniverseSize: universe,
				PMIPort: cfg.PMIPort, PMITrace: cfg.PMITrace, IOCacheDirs: cfg.IOCacheDirs,
				Index: t.sub.Index, Children: t.sub.Children, ProxyPath: cfg.ProxyPath,
				GPUsPerProc: cfg.GPUsPerProc,
			}
			if cfg.HostnameProp {
				jb.Hostname = h.Name
			}
			if len(t.sub.Children) > 0 {
				jb.Launch = &t.recipe
			}
			j.tops[ti], errs[ti] = j.startProxy(ctx, h, jb)
			if j.tops[ti] != nil {
				j.tops[ti].hosts = t.sub.Hosts()
			}
		}(ti, t)
	}
	started.Wait()
	for ti, err := range errs {
		if err != nil {
			j.abortAll()
			for _, p := range j.tops {
				if p != nil {
					p.proc.Wait()
				}
			}
			return ExitInternal, fmt.Errorf("host %s: %w", j.layout.Hosts[tops[ti].sub.Index].Name, err)
		}
	}
	for ti, p := range j.tops {
		p.out.init()
		go p.out.run(p.conn, j.finished)
		go j.readProxy(ti, p)
	}
	if cfg.Stdin != nil {
		if r0 := j.tops[j.hosts[j.layout.Ranks[0].Host].top]; r0 != nil {
			go j.forwardStdin(r0)
		}
	}
	code := j.loop(ctx)
	close(j.finished)
	if j.route != nil {
		j.route.flushAll()
	} else {
		j.out.flushAll()
	}
	j.report()
	for _, p := range j.tops {
		p.close()
		p.proc.Wait()
	}
	return code, nil
}

func (j *job) startProxy(ctx context.Context, h hostfile.Host, jb *control.Job) (*proxyConn, error) {
	be := j.cfg.Backend(h)
	j.cfg.Log.Debug("starting proxy", "host", h.Name, "launcher", be.Name(), "proxy", j.cfg.ProxyPath)
	started, err := be.Start(ctx, launcher.Spec{
		Host: h.Name, User: h.User, Argv: []string{j.cfg.ProxyPath}, Env: launcher.ProxyEnv(be),
		Stderr: prefixWriter(j.cfg.Stderr, "gompi-proxy@"+h.Name+": "),
	})
	if err != nil {
		return nil, err
	}
	proc, sess, conn, err := control.Attach(started, jb)
	if err != nil {
		return nil, err
	}
	return &proxyConn{index: jb.Index, proc: proc, sess: sess, conn: conn}, nil
}

// readProxy delivers one proxy's frames: output straight to the terminal,
// messages to the supervision loop.
func (j *job) readProxy(ti int, p *proxyConn) {
	for {
		f, err := p.conn.Recv()
		ev := event{top: ti, err: err}
		switch {
		case err == nil && f.Type == control.FrameOutput:
			if j.route != nil {
				j.route.write(f.Rank, f.FD, f.Data)
			} else {
				j.out.write(f.Rank, f.FD, f.Data)
			}
			continue
		case err == nil:
			ev.msg = f.Msg
		}
		select {
		case j.events <- ev:
		case <-j.finished: // the supervision loop is gone; nobody will read
			return
		}
		if err != nil {
			return
		}
	}
}

func (j *job) forwardStdin(p *proxyConn) {
	st, err := p.sess.Open()
	if err != nil {
		return
	}
	defer st.Close()
	if _, err := st.Write([]byte{control.StreamStdin}); err != nil {
		return
	}
	io.Copy(st, j.cfg.Stdin)
}

// loop supervises the job until every proxy is done or lost.
func (j *job) loop(ctx context.Context) int {
	var timeout <-chan time.Time
	if j.cfg.Timeout > 0 {
		t := time.NewTimer(j.cfg.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	var lastInt time.Time
	var forceKill <-chan time.Time
	var termSig syscall.Signal // a forwarded SIGTERM/SIGHUP that forceKill enforces
	remaining := len(j.hosts)
	ended := func(h int) bool {
		if j.hosts[h].done {
			return false
		}
		j.hosts[h].done = true
		remaining--
		return true
	}
	ctxDone := ctx.Done()
	for remaining > 0 {
		select {
		case ev := <-j.events:
			top := j.tops[ev.top]
			if ev.err != nil {
				for _, h := range top.hosts {
					if ended(h) && !j.lostQuiet {
						why := fmt.Sprintf("lost connection to gompi-proxy on %s (%v)", j.hosts[top.index].name, top.proc.Reason(ev.err))
						if j.hosts[h].failed {
							why = ""
						}
						j.proxyLost(h, why)
					}
				}
				j.release(ev.top)
				continue
			}
			host := ev.msg.Host
			if host < 0 || host >= len(j.hosts) || j.hosts[host].top != ev.top {
				j.internalFailure(fmt.Sprintf("proxy on %s sent a %q message for unknown host %d", j.hosts[top.index].name, ev.msg.T, host))
				continue
			}
			hs := &j.hosts[host]
			switch ev.msg.T {
			case control.MsgStarted:
				j.cfg.Log.Debug("ranks started", "host", hs.name, "pids", ev.msg.Pids)
				ranks := j.layout.RanksOn(host)
				for k, pid := range ev.msg.Pids {
					if k < len(ranks) {
						j.ranks[ranks[k]].pid = pid
					}
				}
			case control.MsgExit:
				j.cfg.Log.Debug("rank exited", "rank", ev.msg.Rank, "code", ev.msg.Code, "signal", ev.msg.Signal)
				j.rankExited(ev.msg.Rank, ev.msg.Code, ev.msg.Signal, ev.msg.Error, ev.msg.At)
			case control.MsgFence:
				m, whole := j.tops[ev.top].fence.Add(ev.msg)
				if !whole {
					break
				}
				j.pmiCalls++
				// Recorded here, not in the goroutine, so that checkFence
				// sees every arrival the loop has received.
				f, err := j.kvs.Arrive(ev.top, m.KVS)
				go j.fence(ev.top, f, err)
				j.checkFence()
			case control.MsgAbort:
				j.pmiCalls++
				j.aborted(host, ev.msg)
			case control.MsgName:
				j.pmiCalls++
				j.nameService(host, ev.msg)
			case control.MsgLost:
				if ended(host) {
					j.proxyLost(host, ev.msg.Error)
				}
			case control.MsgError:
				if ev.msg.Rank >= 0 && ev.msg.Rank < len(j.ranks) {
					fmt.Fprintf(j.cfg.Stderr, "gompiexec: %s\n", ev.msg.Error)
					// 127 as a shell would, unless the proxy chose the
					// code (255: the host could not start the rank).
					code := 127
					if ev.msg.Code != 0 {
						code = ev.msg.Code
					}
					j.rankExited(ev.msg.Rank, code, 0, ev.msg.Error, ev.msg.At)
				} else {
					hs.failed = true
					msg := ev.msg.Error
					if !strings.Contains(msg, hs.name) {
						msg = fmt.Sprintf("proxy on %s: %s", hs.name, msg)
					}
					j.internalFailure(msg)
				}
			case control.MsgDone:
				if ended(host) {
					j.doneHosts = append(j.doneHosts, host)
					j.checkFence()
				}
			}
			j.release(ev.top)
		case sig := <-j.cfg.Signals:
			s, _ := sig.(syscall.Signal)
			if j.checkpointRequest(s) {
				continue
			}
			j.userSignal(s)
			if s == syscall.SIGINT {
				if !lastInt.IsZero() && time.Since(lastInt) < 3*time.Second {
					fmt.Fprintln(j.cfg.Stderr, "gompiexec: Ctrl-C caught again... killing the job")
					j.internalFailure("")
					if j.failCode == 0 {
						j.failCode = 128 + int(syscall.SIGINT)
					}
					j.abortAll()
					continue
				}
				lastInt = time.Now()
				fmt.Fprintln(j.cfg.Stderr, "gompiexec: sending Ctrl-C to processes as requested (press Ctrl-C again within 3s to force abort)")
			}
			j.broadcast(control.Msg{T: control.MsgSignal, Sig: int(s)})
			if s == syscall.SIGTERM || s == syscall.SIGHUP {
				// Ranks that ignore it are killed after the grace period.
				forceKill = time.After(j.cfg.Grace + time.Second)
				termSig = s
			}
		case <-timeout:
			fmt.Fprintf(j.cfg.Stderr, "gompiexec: APPLICATION TIMED OUT, TIMEOUT = %s; killing the job\n", j.cfg.Timeout)
			j.timedOut = true
			j.kill()
			forceKill = time.After(j.cfg.Grace + 2*time.Second)
		case err := <-j.outErr:
			// Lost output is lost data: end the job, as Hydra does.
			fmt.Fprintf(j.cfg.Stderr, "gompiexec: %v; ending the job\n", err)
			j.outFailed = true
			j.kill()
		case <-forceKill:
			if termSig != 0 && !j.killing {
				// The ranks outlived the signal and are killed now: the
				// job did not succeed, whatever they would have exited
				// with. Their proxies SIGKILL them and report as usual,
				// so what they wrote before still arrives; dropping the
				// sessions is left for proxies that do not answer.
				j.survivedSignal(termSig)
				termSig = 0
				j.killing = true
				j.broadcast(control.Msg{T: control.MsgSignal, Sig: int(syscall.SIGKILL)})
				forceKill = time.After(2 * time.Second)
				continue
			}
			j.abortAll()
		case <-ctxDone:
			ctxDone = nil
			j.kill()
			forceKill = time.After(j.cfg.Grace + 2*time.Second)
		}
		if j.killing && forceKill == nil {
			forceKill = time.After(j.cfg.Grace + 2*time.Second)
		}
	}
	switch {
	case j.timedOut:
		return ExitTimeout
	case j.outFailed:
		return ExitInternal
	case j.failCode != 0:
		return j.failCode
	case j.proxyError != "":
		return ExitInternal
	}
	return 0
}

// release lets a top-level proxy go as soon as every host it routes for
// is done, without waiting for the rest of the job: its output and exit
// reports came before its MsgDone on the same stream, and nothing is sent
// down to finished hosts. It exits as Hydra's proxies do when their
// processes have, so its host's share of the teardown (its node's part of
// an srun step, an ssh session) overlaps the hosts still running.
func (j *job) release(ti int) {
	p := j.tops[ti]
	for _, h := range p.hosts {
		if !j.hosts[h].done {
			return
		}
	}
	go p.close()
}

// fence waits for every top-level proxy to fence (each on behalf of its
// subtree) and pushes the round's pairs down.
func (j *job) fence(top int, f pmi.Arrival, err error) {
	var kvs map[string]string
	if err == nil {
		kvs, err = f.Wait(j.ctx)
	}
	p := j.tops[top]
	m := control.Msg{T: control.MsgFenceDone, Host: p.index, KVS: make([]pmi.KV, 0, len(kvs))}
	for k, v := range kvs {
		m.KVS = append(m.KVS, pmi.KV{Key: k, Value: v})
	}
	if err != nil {
		m = control.Msg{T: control.MsgFenceDone, Host: p.index, Error: err.Error()}
	}
	for _, part := range control.SplitKVS(m) {
		p.out.push(part)
	}
}

// checkFence ends the job when a fence round is under way that a host
// whose ranks have all ended has not reached through its top-level proxy:
// that round can never complete (Hydra waits forever: a host whose ranks
// are not MPI programs, or finished early). A proxy's own host reports it
// below itself (pmi.Node.Left, ErrBarrierBroken).
func (j *job) checkFence() {
	if j.killing {
		return
	}
	for _, h := range j.doneHosts {
		if !j.kvs.Pending(j.hosts[h].top) {
			continue
		}
		rank := -1
		if rs := j.layout.RanksOn(h); len(rs) > 0 {
			rank = rs[0]
		}
		msg := fmt.Sprintf("PMI barrier can never complete: every rank on %s (rank %d first) ended without entering it", j.hosts[h].name, rank)
		fmt.Fprintf(j.cfg.Stderr, "gompiexec: %s\n", msg)
		j.kvs.Close(pmi.ErrJobClosed)
		j.firstFail, j.failCode, j.abortMsg = rank, 1, "EXITED WITHOUT ENTERING THE PMI BARRIER THE OTHER RANKS WAIT IN"
		j.kill()
		return
	}
}

func (j *job) aborted(host int, m control.Msg) {
	if m.Rank < 0 || m.Rank >= len(j.ranks) {
		return
	}
	fmt.Fprintf(j.cfg.Stderr, "gompiexec: rank %d on %s called abort with exit code %d%s\n",
		m.Rank, j.hosts[host].name, m.Code, optional(": ", m.Error))
	abortMsg := fmt.Sprintf("ABORTED WITH EXIT CODE %d", m.Code)
	if j.killing {
		j.earlier(m.Rank, m.Code, abortMsg, m.At)
		return
	}
	j.firstFail, j.failCode, j.failAt = m.Rank, m.Code, m.At
	j.abortMsg = abortMsg
	j.kvs.Close(pmi.ErrJobClosed)
	j.kill()
}

// earlier blames rank instead of the rank blamed so far when its proxy saw
// it fail before the other's did: reports from different proxies arrive in
// any order (a proxy waits for a finished rank's output before reporting
// it), so the first to arrive need not be the first failure. Times from
// different hosts compare as well as their clocks agree; a failure the
// launcher's kill caused happens after the failure that caused the kill.
func (j *job) earlier(rank, code int, abortMsg string, at int64) {
	if j.firstFail < 0 || at == 0 || j.failAt == 0 || at >= j.failAt {
		return
	}
	j.firstFail, j.failCode, j.failAt, j.abortMsg = rank, code, at, abortMsg
}

func optional(prefix, s string) string {
	if s == "" {
		return ""
	}
	return prefix + s
}

func (j *job) rankExited(rank, code, sig int, msg string, at int64) {
	if rank < 0 || rank >= len(j.ranks) || j.ranks[rank].exited {
		return
	}
	r := &j.ranks[rank]
	r.exited, r.code, r.signal, r.failMsg = true, code, sig, msg
	if j.route != nil {
		j.route.flush(rank)
	} else {
		j.out.flush(rank)
	}
	if code == 0 && sig == 0 {
		return
	}
	if sig != 0 {
		code = 128 + sig
	}
	if j.killing {
		j.earlier(rank, code, "", at)
		return
	}
	if j.cfg.NoAutoCleanup {
		j.survive(rank, code, at)
		return
	}
	j.kvs.Close(pmi.ErrJobClosed)
	j.firstFail, j.failCode, j.failAt = rank, code, at
	j.kill()
}

// proxyLost handles a host whose proxy went away before reporting done:
// ranks it never reported are gone with it, and the job ends naming the
// host.
func (j *job) proxyLost(host int, why string) {
	lost := false
	for i := range j.ranks {
		if j.ranks[i].host == host && !j.ranks[i].exited {
			lost = true
		}
	}
	if lost {
		j.hostLost(host)
		if why != "" && !strings.Contains(why, j.hosts[host].name) {
			why = fmt.Sprintf("host %s: %s", j.hosts[host].name, why)
		}
		j.internalFailure(why)
	}
}

func (j *job) internalFailure(msg string) {
	if msg != "" {
		fmt.Fprintf(j.cfg.Stderr, "gompiexec: %s\n", msg)
		if j.proxyError == "" {
			j.proxyError = msg
		}
	}
	j.kill()
}

// kill asks every proxy to terminate its ranks (SIGTERM, SIGKILL after grace).
func (j *job) kill() {
	if j.killing {
		return
	}
	j.cfg.Log.Debug("terminating the job", "grace", j.cfg.Grace)
	j.killing = true
	j.broadcast(control.Msg{T: control.MsgKill})
}

// survivedSignal reports ranks still running after a forwarded signal and
// its grace period, and makes the job's exit code 128+sig.
func (j *job) survivedSignal(sig syscall.Signal) {
	left, first := 0, -1
	for i := range j.ranks {
		if !j.ranks[i].exited {
			if first < 0 {
				first = i
			}
			left++
		}
	}
	if first < 0 {
		return
	}
	fmt.Fprintf(j.cfg.Stderr, "gompiexec: %d rank(s) still running %s after %s (first: rank %d on %s); killing them\n",
		left, j.cfg.Grace, sigName(int(sig)), first, j.hosts[j.ranks[first].host].name)
	if j.failCode == 0 {
		j.failCode = 128 + int(sig)
	}
}

// abortAll drops every proxy at once; proxies kill their ranks with SIGKILL
// when their session ends.
func (j *job) abortAll() {
	j.killing = true
	j.lostQuiet = true
	for _, p := range j.tops {
		if p != nil {
			p.close()
		}
	}
}

// broadcast sends m to every top-level proxy that still has live hosts
// below it; each passes it down its subtree.
func (j *job) broadcast(m control.Msg) {
	for _, p := range j.tops {
		live := false
		for _, h := range p.hosts {
			live = live || !j.hosts[h].done
		}
		if live {
			m.Host = p.index
			p.out.push(m)
		}
	}
}
