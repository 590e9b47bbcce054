// Package testkit is the support shared by gompi's end-to-end test packages
// (test/e2e, test/rt, test/cluster, test/mpich): building the module's
// binaries once, a goroutine-safe output buffer, finding and killing the
// processes of a job by a marker in their environment, waiting for them to
// be gone, and running a launcher with a time limit.
//
// It does not import package testing: its functions return errors and
// leftovers, and each test package decides how to report them. Process
// discovery reads /proc, so it works on Linux only.
package testkit

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Module is the import path of the gompi module; Pkg joins it with a
// package directory, e.g. Pkg("cmd/gompiexec").
const Module = "github.com/gompi/gompi"

// Pkg returns the import path of the module's package at rel.
func Pkg(rel string) string { return Module + "/" + rel }

// Build builds the packages (import paths) with `go build -o dir/`, so each
// main package becomes dir/<last element>. The error carries go's output.
func Build(dir string, pkgs ...string) error {
	cmd := exec.Command("go", append([]string{"build", "-o", dir + "/"}, pkgs...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("building %s: %v\n%s", strings.Join(pkgs, " "), err, out)
	}
	return nil
}

// BuildTemp creates a fresh directory with os.MkdirTemp(parent, pattern)
// and builds the packages into it. On error nothing is left behind; on
// success the caller removes the directory when done.
func BuildTemp(parent, pattern string, pkgs ...string) (string, error) {
	dir, err := os.MkdirTemp(parent, pattern)
	if err != nil {
		return "", err
	}
	if err := Build(dir, pkgs...); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// Runner is what TestMain is given (*testing.M).
type Runner interface{ Run() int }

// MainWithBinaries is the body of a TestMain that needs binaries: it builds
// the packages into a fresh temporary directory (BuildTemp("", pattern,
// ...)), stores its path in *dir, runs m, removes the directory and
// returns the exit code for os.Exit. A build error is printed to stderr
// and makes the code 1 without running any test.
func MainWithBinaries(m Runner, dir *string, pattern string, pkgs ...string) int {
	d, err := BuildTemp("", pattern, pkgs...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(d)
	*dir = d
	return m.Run()
}

// Buffer is a bytes.Buffer that a process may write while a test reads it.
// The zero value is ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// MarkerVar is the environment variable that tags every process of a job
// under test, so its processes are found even once they are reparented.
const MarkerVar = "GOMPI_TEST_MARKER"

var markerSeq atomic.Int64

// NewMarker returns a marker unique to this test process:
// prefix-<pid>-<sequence>.
func NewMarker(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), markerSeq.Add(1))
}

// Proc is what /proc/PID/stat says of a process.
type Proc struct {
	Pid, PPid int
	Comm      string // the command name, without the parentheses
	State     string // "R", "S", "Z", ...
}

// Pids lists the processes in /proc.
func Pids() []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// ReadProc reads /proc/pid/stat.
func ReadProc(pid int) (Proc, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return Proc{}, err
	}
	return parseStat(pid, b)
}

// parseStat parses a /proc/PID/stat line: "pid (comm) state ppid ...".
// The command name may hold spaces and parentheses; it ends at the last ')'.
func parseStat(pid int, b []byte) (Proc, error) {
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return Proc{}, fmt.Errorf("/proc/%d/stat: no command name in %q", pid, b)
	}
	f := strings.Fields(string(b[end+1:]))
	if len(f) < 2 {
		return Proc{}, fmt.Errorf("/proc/%d/stat: too short: %q", pid, b)
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return Proc{}, fmt.Errorf("/proc/%d/stat: parent %q: %v", pid, f[1], err)
	}
	return Proc{Pid: pid, PPid: ppid, Comm: string(b[open+1 : end]), State: f[0]}, nil
}

// MarkedProcs lists the live processes whose environment holds exactly
// MarkerVar=marker. Zombies are left out: they are already dead, their
// parent just has not reaped them.
func MarkedProcs(marker string) []int {
	var pids []int
	needle := []byte("\x00" + MarkerVar + "=" + marker + "\x00")
	for _, pid := range Pids() {
		env, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "environ"))
		if err != nil || !bytes.Contains(append(append([]byte{0}, env...), 0), needle) {
			continue
		}
		if p, err := ReadProc(pid); err == nil && p.State == "Z" {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

// KillMarked sends SIGKILL to every process MarkedProcs(marker) lists.
func KillMarked(marker string) {
	for _, p := range MarkedProcs(marker) {
		syscall.Kill(p, syscall.SIGKILL)
	}
}

// WaitGone polls list every 20 ms until it returns nothing, and returns
// nil; if it still lists processes after d, it returns the last list.
func WaitGone(d time.Duration, list func() []int) []int {
	deadline := time.Now().Add(d)
	for {
		left := list()
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return left
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Result is how a Job ended.
type Result struct {
	Stdout, Stderr string
	Code           int // exit code; -1 when killed by a signal
	Elapsed        time.Duration
}

// Job is one launcher process under test (gompiexec with its arguments),
// in its own process group, tagged with a marker. Set Cmd's fields before
// Start to change its environment or attributes.
type Job struct {
	Cmd    *exec.Cmd
	Marker string
	Stdout Buffer
	Stderr Buffer

	start   time.Time
	started bool
	done    chan struct{}
}

// NewJob prepares path with args and, unless empty, stdin. A marker
// (none if empty) is put in the process's environment, after os.Environ();
// passing it on to the ranks (gompiexec -genv) is up to args.
func NewJob(marker, stdin, path string, args ...string) *Job {
	cmd := exec.Command(path, args...)
	cmd.Env = os.Environ()
	if marker != "" {
		cmd.Env = append(cmd.Env, MarkerVar+"="+marker)
	}
	j := &Job{Cmd: cmd, Marker: marker, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = &j.Stdout, &j.Stderr
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return j
}

// Start starts the job with exec.Cmd.Start.
func (j *Job) Start() error { return j.StartWith(nil) }

// StartWith starts the job with start (exec.Cmd.Start when nil), then
// reaps it in the background: Done is closed once it has exited.
func (j *Job) StartWith(start func(*exec.Cmd) error) error {
	if start == nil {
		start = (*exec.Cmd).Start
	}
	j.start = time.Now()
	if err := start(j.Cmd); err != nil {
		return err
	}
	j.started = true
	go func() { j.Cmd.Wait(); close(j.done) }()
	return nil
}

// Done is closed when the started job has exited and been reaped.
func (j *Job) Done() <-chan struct{} { return j.done }

// Kill sends SIGKILL to the job's process group and waits for the job to
// exit (if it was started), then kills whatever marked process is left.
func (j *Job) Kill() {
	if j.started {
		syscall.Kill(-j.Cmd.Process.Pid, syscall.SIGKILL)
		<-j.done
	}
	if j.Marker != "" {
		KillMarked(j.Marker)
	}
}

// Fataler is the part of testing.TB that MustWait uses.
type Fataler interface {
	Helper()
	Fatal(args ...any)
}

// MustWait is Wait that ends the test t with the error on a timeout.
func (j *Job) MustWait(t Fataler, limit time.Duration) Result {
	t.Helper()
	r, err := j.Wait(limit)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Wait waits up to limit for the started job to exit. Past the limit it
// kills the job (Kill) and returns an error naming the limit, with the
// output so far.
func (j *Job) Wait(limit time.Duration) (Result, error) {
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case <-j.done:
	case <-timer.C:
		j.Kill()
		return j.result(), fmt.Errorf("%s did not finish within %s\nstdout:\n%s\nstderr:\n%s",
			filepath.Base(j.Cmd.Path), limit, j.Stdout.String(), j.Stderr.String())
	}
	return j.result(), nil
}

func (j *Job) result() Result {
	return Result{j.Stdout.String(), j.Stderr.String(), j.Cmd.ProcessState.ExitCode(), time.Since(j.start)}
}

// MainLocalMPICH is a TestMain body for packages that run MPICH programs
// with every rank on this machine: it makes a temporary directory, hands
// it to setup, runs the tests and removes the directory, returning the
// exit code. MPICH's UCX is kept to the loopback: left to itself it lists
// every interface and opens each later, while test/cluster (run in
// parallel by go test ./...) creates and deletes veth links in this
// namespace, and MPI_Init once failed with UCX's "init_worker No such
// device" for a link listed and then gone.
func MainLocalMPICH(m *testing.M, prefix string, setup func(dir string)) int {
	if os.Getenv("UCX_NET_DEVICES") == "" {
		os.Setenv("UCX_NET_DEVICES", "lo")
	}
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	setup(dir)
	return m.Run()
}
