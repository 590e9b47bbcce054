package proxy

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/gompi/gompi/internal/launcher"
	"github.com/gompi/gompi/internal/shm"
	"golang.org/x/sys/unix"
)

// Every local rank runs in one process group, and so does everything a rank
// starts unless it leaves the group (setsid, setpgid). The group's leader
// is a guard: a child of the proxy (a shell, guardScript, which becomes
// gompi-proxy -guard when it is needed) that ignores the signals the proxy
// forwards to the group and waits for its stdin, a pipe from the proxy, to
// end. That happens when the proxy exits for any
// reason, SIGKILL included (and the proxy is SIGKILLed with gompiexec by
// the fork launcher's Pdeathsig); the guard then SIGKILLs the group, itself
// included. So a rank's children die whichever of gompiexec, proxy or rank
// dies first. Because the guard leads the group until the group is killed,
// the group's id cannot be recycled while the proxy may still signal it.
//
// Ranks are reaped by one goroutine (wait4 on the group, prompted by
// SIGCHLD), not one blocked thread per rank, so a host can run as many
// ranks as its process and file limits allow.

// GuardArg is the argument that makes gompi-proxy run GuardMain.
const GuardArg = "-guard"

// GuardName is the guard's process name (comm), so that it is not taken
// for a proxy by ps or pgrep.
const GuardName = "gompi-guard"

// GuardMain is the guard process; args are the job id and the directories
// of its shared-memory rendezvous files. It returns only by being killed.
func GuardMain(stdin io.Reader, args []string) int {
	unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&append([]byte(GuardName), 0)[0])), 0, 0, 0)
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2,
		syscall.SIGPIPE, syscall.SIGQUIT, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU)
	io.Copy(io.Discard, stdin)
	// The proxy is gone and cannot sweep the job's segments: kill the
	// group but this process, wait until none of it can run, sweep,
	// then go with the rest.
	me := os.Getpid()
	for round := 0; round < 200; round++ {
		live := groupMembers(me)
		if len(live) == 0 {
			break
		}
		for _, pid := range live {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if len(args) > 0 {
		for _, d := range args[1:] {
			shm.SweepJob(d, args[0])
		}
	}
	syscall.Kill(0, syscall.SIGKILL)
	return 1
}

// groupMembers lists the processes of pgid other than itself that may
// still run (zombies cannot).
func groupMembers(pgid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == pgid {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 3 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		if g, err := strconv.Atoi(f[2]); err == nil && g == pgid {
			out = append(out, pid)
		}
	}
	return out
}

// guardScript is the guard until its stdin ends: a POSIX shell that ignores
// the signals the proxy forwards to the group, reads its job (the job id,
// then the directories of the job's shared-memory files, one per line, up
// to an empty line; tellGuard) and waits for EOF, then becomes GuardMain
// (gompi-proxy -guard, $0) to kill the group and sweep the job's segments.
// A shell starts in a fraction of a Go program's time, and a guard starts
// with every job on every host, on the way to the first rank; the Go part
// runs only when the proxy has died. If that exec fails (the proxy's
// executable was removed), the shell exits and its EXIT trap still kills
// the group. Learning the job on its stdin lets the proxy start the guard
// before the job has arrived (StartGuard).
const guardScript = `trap '' INT TERM HUP USR1 USR2 PIPE QUIT TSTP TTIN TTOU
trap 'kill -KILL 0' EXIT
set --
while IFS= read -r a && [ -n "$a" ]; do set -- "$@" "$a"; done
while read -r _; do :; done
exec "$0" ` + GuardArg + ` "$@" </dev/null`

// guardShell runs guardScript.
const guardShell = "/bin/sh"

// startGuard starts the guard as the leader of a new process group and
// returns its pid (the group id) and the pipe that keeps it waiting (give
// it its job with tellGuard). path is the gompi-proxy executable the guard
// becomes when the pipe ends.
func startGuard(path string) (int, *os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return 0, nil, err
	}
	defer r.Close()
	// stdout and stderr: /dev/null, so it never holds the session.
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		w.Close()
		return 0, nil, fmt.Errorf("start guard: %w", err)
	}
	defer null.Close()
	// The connect-back secret stays with the proxy (it may still be in the
	// environment when StartGuard runs).
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, launcher.ConnectSecretEnv+"=") && !strings.HasPrefix(kv, launcher.ConnectEnv+"=") {
			env = append(env, kv)
		}
	}
	// syscall.ForkExec rather than os/exec: the guard is reaped by the
	// reaper, so it needs no pidfd, and os/exec's first start would first
	// check whether pidfds work (a vfork and a wait) on the way to the
	// guard's fork; launcher.WarmProcStart makes that check alongside, for the
	// ranks. No Pdeathsig: the guard must outlive the proxy to do its job.
	pid, err := syscall.ForkExec(guardShell, []string{guardShell, "-c", guardScript, path}, &syscall.ProcAttr{
		Env:   env,
		Files: []uintptr{r.Fd(), null.Fd(), null.Fd()},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	})
	if err != nil {
		w.Close()
		return 0, nil, fmt.Errorf("start guard: %w", &os.PathError{Op: "fork/exec", Path: guardShell, Err: err})
	}
	return pid, w, nil
}

// tellGuard gives the guard on w its job: the job id and the directories
// it sweeps for the job's files when the proxy has died. A directory whose
// name holds a newline cannot be told and is left out.
func tellGuard(w io.Writer, jobID string, shmDirs []string) error {
	var b strings.Builder
	if jobID != "" && !strings.Contains(jobID, "\n") {
		b.WriteString(jobID + "\n")
		for _, d := range shmDirs {
			if d != "" && !strings.Contains(d, "\n") {
				b.WriteString(d + "\n")
			}
		}
	}
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// Guard is a guard started before its job is known (StartGuard), so that
// its fork and exec overlap the connect-back and the job's arrival
// instead of delaying the first rank.
type Guard struct {
	done chan struct{}
	pid  int
	w    *os.File
	err  error
}

// StartGuard starts the guard of the ranks' group in the background; path
// is the gompi-proxy executable (Config.Guard). Pass it as Config.Started:
// Run gives it the job, or ends it when no rank starts.
func StartGuard(path string) *Guard {
	g := &Guard{done: make(chan struct{})}
	launcher.WarmProcStart()
	go func() {
		defer close(g.done)
		g.pid, g.w, g.err = startGuard(path)
	}()
	return g
}

func (g *Guard) wait() (int, *os.File, error) {
	<-g.done
	return g.pid, g.w, g.err
}

// Abandon ends a guard that no job has adopted and reaps it. (The guard
// would also go by itself when the proxy exits, but through GuardMain, a
// second Go program's start.)
func (g *Guard) Abandon() {
	pid, w, err := g.wait()
	if err != nil {
		return
	}
	syscall.Kill(pid, syscall.SIGKILL)
	w.Close()
	var ws syscall.WaitStatus
	syscall.Wait4(pid, &ws, 0, nil)
}

// reaper waits for the ranks.
type reaper struct {
	mu      sync.Mutex
	pgid    int
	waiting map[int]chan reaped
	early   map[int]reaped // reaped before registered
	stop    chan struct{}
	once    sync.Once
}

func newReaper() *reaper {
	r := &reaper{waiting: map[int]chan reaped{}, early: map[int]reaped{}, stop: make(chan struct{})}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGCHLD)
	go func() {
		defer signal.Stop(sigs)
		// A rank that left the group is not seen by wait4 on the group:
		// look for each rank now and then.
		scan := time.NewTicker(time.Second)
		defer scan.Stop()
		for {
			select {
			case <-sigs:
				if !r.reapGroup() {
					// Not a child of the group: a rank that left it, or
					// ranks led by the first rank before it was known.
					r.reapEach()
				}
			case <-scan.C:
				r.reapGroup()
				r.reapEach()
			case <-r.stop:
				return
			}
		}
	}()
	return r
}

func (r *reaper) close() { r.once.Do(func() { close(r.stop) }) }

func (r *reaper) setGroup(pgid int) {
	r.mu.Lock()
	r.pgid = pgid
	r.mu.Unlock()
}

// reaped is a child's status and when it was collected.
type reaped struct {
	ws unix.WaitStatus
	at int64 // Unix nanoseconds
}

// register returns the channel that receives pid's status.
func (r *reaper) register(pid int) <-chan reaped {
	ch := make(chan reaped, 1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if st, ok := r.early[pid]; ok {
		delete(r.early, pid)
		ch <- st
		return ch
	}
	r.waiting[pid] = ch
	r.mu.Unlock()
	// It may have ended before it could be found by wait4 on the group
	// (no group yet) and its SIGCHLD been handled already.
	var ws unix.WaitStatus
	if got, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil); err == nil && got == pid {
		r.deliver(pid, ws)
	}
	r.mu.Lock()
	return ch
}

func (r *reaper) deliver(pid int, ws unix.WaitStatus) {
	if !ws.Exited() && !ws.Signaled() {
		return // stopped or continued
	}
	st := reaped{ws, time.Now().UnixNano()}
	r.mu.Lock()
	defer r.mu.Unlock()
	if ch, ok := r.waiting[pid]; ok {
		delete(r.waiting, pid)
		ch <- st
		return
	}
	r.early[pid] = st // the guard, or a rank not registered yet
}

// reapedEarly reports whether pid was reaped without being registered (the
// guard: when it is gone, the group's id may be reused once the group is
// empty, so it is no longer signalled).
func (r *reaper) reapedEarly(pid int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.early[pid]
	return ok
}

// reapGroup reaps the group's children that ended; it reports whether it
// found any.
func (r *reaper) reapGroup() bool {
	r.mu.Lock()
	pgid := r.pgid
	r.mu.Unlock()
	if pgid <= 0 {
		return false
	}
	found := false
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-pgid, &ws, unix.WNOHANG, nil)
		if err == unix.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return found
		}
		found = true
		r.deliver(pid, ws)
	}
}

func (r *reaper) reapEach() {
	r.mu.Lock()
	pids := make([]int, 0, len(r.waiting))
	for pid := range r.waiting {
		pids = append(pids, pid)
	}
	r.mu.Unlock()
	for _, pid := range pids {
		var ws unix.WaitStatus
		if got, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil); err == nil && got == pid {
			r.deliver(pid, ws)
		}
	}
}

// statusOf is a rank's exit code, or the signal that killed it.
func statusOf(ws unix.WaitStatus) (code, sig int) {
	if ws.Signaled() {
		return 0, int(ws.Signal())
	}
	return ws.ExitStatus(), 0
}

// startFailure explains why a rank could not start, naming the limit that
// stopped it when the error is one of the resource errors.
func startFailure(rank int, host string, started, total int, err error) string {
	limit := ""
	var rl unix.Rlimit
	switch {
	case errors.Is(err, syscall.EAGAIN):
		nproc := "?"
		if unix.Getrlimit(unix.RLIMIT_NPROC, &rl) == nil {
			nproc = fmt.Sprint(rl.Cur)
		}
		limit = fmt.Sprintf("the process limit (RLIMIT_NPROC %s for uid %d, kernel.pid_max %s, kernel.threads-max %s, or the cgroup's pids.max)",
			nproc, os.Getuid(), sysctl("kernel/pid_max"), sysctl("kernel/threads-max"))
	case errors.Is(err, syscall.EMFILE):
		nofile := "?"
		if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) == nil {
			nofile = fmt.Sprint(rl.Cur)
		}
		limit = fmt.Sprintf("the open files limit of gompi-proxy (RLIMIT_NOFILE %s; each running rank holds 3 descriptors)", nofile)
	case errors.Is(err, syscall.ENFILE):
		limit = "the system's open files limit (fs.file-max " + sysctl("fs/file-max") + ")"
	case errors.Is(err, syscall.ENOMEM):
		limit = "memory"
	}
	msg := fmt.Sprintf("rank %d on %s could not start: %v", rank, host, err)
	if limit != "" {
		msg += "; limit hit: " + limit
	}
	return msg + fmt.Sprintf("; %d of %d ranks had started on %s and are stopped", started, total, host)
}

func sysctl(name string) string {
	b, err := os.ReadFile("/proc/sys/" + name)
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}

// startFailedCode is the code of the error message for a rank that could
// not start: the launcher exits with it (mpiexec.ExitInternal).
const startFailedCode = 255
