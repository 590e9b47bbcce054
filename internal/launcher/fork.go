package launcher

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// WarmProcStart has Go's os package find out now, in the background,
// whether pidfds work. It does so once per process, at the first start
// through os/exec otherwise (a vfork of a child that exits at once, and a
// wait), which is on a launch's critical path: gompiexec's first proxy or
// srun, a proxy's first rank.
func WarmProcStart() {
	go func() {
		if p, err := os.FindProcess(os.Getpid()); err == nil {
			p.Release()
		}
	}()
}

// Fork starts proxies as local child processes.
type Fork struct{}

// Name implements Backend.
func (Fork) Name() string { return "fork" }

// Start implements Backend.
func (Fork) Start(ctx context.Context, spec Spec) (Proc, error) {
	if len(spec.Argv) == 0 {
		return nil, errors.New("fork: empty proxy command")
	}
	return startLocal(ctx, spec.Argv, spec)
}

// ProxyPipeSize is the size asked for the pipe a local proxy writes to.
const ProxyPipeSize = 1 << 20

// startLocal runs argv as a local child whose stdin/stdout are the Proc.
func startLocal(ctx context.Context, argv []string, spec Spec) (Proc, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	// All of the proxy's output and messages come through this pipe. At
	// the default 64 KiB a full output frame (64 KiB and its headers)
	// never went in one write: each took two or three writes with a
	// wait for gompiexec between them. 1 MiB (the default
	// fs.pipe-max-size) lets the proxy run a yamux window ahead.
	GrowPipe(outR, ProxyPipeSize)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), spec.Env...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, spec.Stderr
	// Own process group: a terminal's Ctrl-C reaches only gompiexec, which
	// forwards it, and Kill can take the whole group (an rsh agent's
	// children too). Pdeathsig: it dies with gompiexec, even on SIGKILL.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err = StartLocked(cmd)
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	return &forkProc{cmd: cmd, in: inW, out: outR}, nil
}

type forkProc struct {
	cmd       *exec.Cmd
	in, out   *os.File
	closeOnce sync.Once
	waitOnce  sync.Once
	waitErr   error
}

func (p *forkProc) Read(b []byte) (int, error)  { return p.out.Read(b) }
func (p *forkProc) Write(b []byte) (int, error) { return p.in.Write(b) }

func (p *forkProc) Close() error {
	p.closeOnce.Do(func() {
		p.in.Close()
		p.out.Close()
	})
	return nil
}

func (p *forkProc) Wait() error {
	p.waitOnce.Do(func() { p.waitErr = p.cmd.Wait() })
	return p.waitErr
}

func (p *forkProc) Kill() error {
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	err := p.cmd.Process.Kill()
	if errors.Is(err, os.ErrProcessDone) {
		return nil
	}
	return err
}

// forkThread runs every fork on a few locked OS threads. Linux delivers
// Pdeathsig when the *thread* that forked the child exits, and the Go
// runtime may retire idle threads; threads that live as long as the
// process make Pdeathsig mean "parent process died".
//
// More than one, so that concurrent StartLocked calls fork concurrently: a
// fork blocks its thread until the child has exec'd (vfork), which on a
// busy host waits for the child to be scheduled; a proxy starting its
// ranks one at a time paid that wait once per rank. Each is started when
// a fork finds none idle, not all at the first fork: gompiexec under the
// slurm launcher forks srun alone, and three more threads' creation sat
// on the way to it (every proxy's start waits for srun).
var forkThread = struct {
	mu      sync.Mutex
	started int // fork threads
	pending int // StartLocked calls under way
	reqs    chan func()
}{reqs: make(chan func())}

// ForkThreads is how many forks StartLocked runs at once.
const ForkThreads = 4

// StartLocked starts cmd from one of the process's dedicated fork threads.
func StartLocked(cmd *exec.Cmd) error { return startLocked(cmd, nil) }

// StartLockedWith is StartLocked with around run on the fork thread in
// place of cmd.Start: around calls start, and may change the thread's
// state the child inherits (its CPU affinity) before, and restore it after.
func StartLockedWith(cmd *exec.Cmd, around func(start func() error) error) error {
	return startLocked(cmd, around)
}

func startLocked(cmd *exec.Cmd, around func(start func() error) error) error {
	forkThread.mu.Lock()
	forkThread.pending++
	if forkThread.pending > forkThread.started && forkThread.started < ForkThreads {
		forkThread.started++
		go forkLoop()
	}
	forkThread.mu.Unlock()
	defer func() {
		forkThread.mu.Lock()
		forkThread.pending--
		forkThread.mu.Unlock()
	}()
	errc := make(chan error, 1)
	forkThread.reqs <- func() {
		if around == nil {
			errc <- cmd.Start()
			return
		}
		errc <- around(cmd.Start)
	}
	return <-errc
}

// forkLoop is a fork thread: it never unlocks, so its thread lives as long
// as the process.
func forkLoop() {
	runtime.LockOSThread()
	for f := range forkThread.reqs {
		f()
	}
}
