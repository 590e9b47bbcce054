// Package e2e runs the real gompiexec and gompi-proxy binaries the way users do.
package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "gompi-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	build := exec.Command("go", "build", "-o", dir+"/",
		"github.com/gompi/gompi/cmd/gompiexec", "github.com/gompi/gompi/cmd/gompi-proxy",
		"github.com/gompi/gompi/test/e2e/progs/rankprog", "github.com/gompi/gompi/examples/hello")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building binaries:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func bin(name string) string { return filepath.Join(binDir, name) }

type result struct {
	stdout, stderr string
	code           int
	elapsed        time.Duration
}

// job is a gompiexec run under test; marker tags every rank's environment so
// leftovers can be found even after they are reparented.
type job struct {
	t      *testing.T
	cmd    *exec.Cmd
	marker string
	stdout syncBuffer
	stderr syncBuffer
	start  time.Time
}

// syncBuffer lets tests read output while the job is still writing it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var markerSeq int

func newJob(t *testing.T, stdin string, args ...string) *job {
	t.Helper()
	markerSeq++
	marker := fmt.Sprintf("gompi-test-%d-%d", os.Getpid(), markerSeq)
	full := append([]string{"-genv", "GOMPI_TEST_MARKER", marker}, args...)
	cmd := exec.Command(bin("gompiexec"), full...)
	// The marker in gompiexec's own environment reaches every proxy too,
	// including those that proxies start in a launch tree.
	cmd.Env = append(os.Environ(), "GOMPI_TEST_MARKER="+marker)
	j := &job{t: t, cmd: cmd, marker: marker}
	cmd.Stdout, cmd.Stderr = &j.stdout, &j.stderr
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	t.Cleanup(func() { killMarked(marker) })
	return j
}

func (j *job) startJob() {
	j.t.Helper()
	j.start = time.Now()
	if err := j.cmd.Start(); err != nil {
		j.t.Fatal(err)
	}
}

func (j *job) wait(limit time.Duration) result {
	j.t.Helper()
	done := make(chan error, 1)
	go func() { done <- j.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(limit):
		syscall.Kill(-j.cmd.Process.Pid, syscall.SIGKILL)
		killMarked(j.marker)
		<-done
		j.t.Fatalf("gompiexec did not finish within %s\nstdout:\n%s\nstderr:\n%s", limit, j.stdout.String(), j.stderr.String())
	}
	return result{j.stdout.String(), j.stderr.String(), j.cmd.ProcessState.ExitCode(), time.Since(j.start)}
}

func runJob(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	j := newJob(t, stdin, args...)
	j.startJob()
	r := j.wait(60 * time.Second)
	j.assertNoLeftovers(2 * time.Second)
	return r
}

// markedProcs lists live processes whose environment carries marker.
func markedProcs(marker string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	needle := []byte("GOMPI_TEST_MARKER=" + marker + "\x00")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !bytes.Contains(append(env, 0), needle) {
			continue
		}
		if st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil {
			// Zombies are already dead; their parent just has not reaped them.
			if f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+1:])); len(f) > 0 && f[0] == "Z" {
				continue
			}
		}
		pids = append(pids, pid)
	}
	return pids
}

// proxiesOf lists gompi-proxy processes started by the gompiexec with pid.
func childrenNamed(ppid int, name string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(st)
		comm := s[strings.IndexByte(s, '(')+1 : strings.LastIndexByte(s, ')')]
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 && comm == name && f[1] == strconv.Itoa(ppid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func killMarked(marker string) {
	for _, p := range markedProcs(marker) {
		syscall.Kill(p, syscall.SIGKILL)
	}
}

// assertNoLeftovers fails unless every process of the job is gone within d.
func (j *job) assertNoLeftovers(d time.Duration) {
	j.t.Helper()
	deadline := time.Now().Add(d)
	for {
		var left []int
		for _, p := range markedProcs(j.marker) {
			if j.cmd.Process == nil || p != j.cmd.Process.Pid {
				left = append(left, p)
			}
		}
		if j.cmd.Process != nil {
			left = append(left, childrenNamed(j.cmd.Process.Pid, "gompi-proxy")...)
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			j.t.Fatalf("processes of the job still alive after %s: %v", d, left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitRanks waits until n ranks of the job are running and returns their pids.
func (j *job) waitRanks(n int) []int {
	j.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var ranks []int
		for _, p := range markedProcs(j.marker) {
			if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p)); strings.TrimSpace(string(b)) == "rankprog" {
				ranks = append(ranks, p)
			}
		}
		if len(ranks) >= n && strings.Count(j.stdout.String(), "ready") >= n {
			return ranks
		}
		if time.Now().After(deadline) {
			j.t.Fatalf("only %d of %d ranks came up; stdout %q stderr %q", len(ranks), n, j.stdout.String(), j.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRankEnvironmentAndOutput(t *testing.T) {
	r := runJob(t, "", "-genv", "GOMPI_TEST_VAR", "v1", "-n", "4", bin("rankprog"), "env", "a", "b")
	if r.code != 0 {
		t.Fatalf("exit %d, stderr %s", r.code, r.stderr)
	}
	for i := 0; i < 4; i++ {
		want := fmt.Sprintf("rank=%d size=4 local=%d/4 app=0 args=a,b marker=v1\n", i, i)
		if !strings.Contains(r.stdout, want) {
			t.Errorf("missing %q in\n%s", want, r.stdout)
		}
	}
}

func TestPrependRankKeepsLinesWhole(t *testing.T) {
	const lines = 3000
	r := runJob(t, "", "-l", "-n", "4", bin("rankprog"), "spam", strconv.Itoa(lines))
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	re := regexp.MustCompile(`^\[(\d)\] rank (\d) line (\d+) x+ end$`)
	next := map[string]int{}
	out := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	for _, l := range out {
		m := re.FindStringSubmatch(l)
		if m == nil || m[1] != m[2] {
			t.Fatalf("mangled line %q", l)
		}
		if n, _ := strconv.Atoi(m[3]); n != next[m[1]] {
			t.Fatalf("rank %s: line %d out of order (want %d)", m[1], n, next[m[1]])
		}
		next[m[1]]++
	}
	if len(out) != 4*lines {
		t.Fatalf("got %d lines, want %d", len(out), 4*lines)
	}
}

func TestOutputIsByteExactWithoutPrefix(t *testing.T) {
	r := runJob(t, "", "-n", "1", bin("rankprog"), "bytes")
	var want []byte
	for k := 0; k < 4; k++ {
		for i := 0; i < 256; i++ {
			want = append(want, byte(i))
		}
	}
	if r.stdout != string(want) {
		t.Fatalf("got %d bytes %q..., want the 1024 raw bytes", len(r.stdout), r.stdout[:min(len(r.stdout), 40)])
	}
}

func TestFinalPartialLineFlushed(t *testing.T) {
	r := runJob(t, "", "-n", "2", "/bin/sh", "-c", `printf "no newline $PMI_RANK"`)
	if !strings.Contains(r.stdout, "no newline 0") || !strings.Contains(r.stdout, "no newline 1") {
		t.Fatalf("partial lines lost: %q", r.stdout)
	}
	r = runJob(t, "", "-l", "-n", "1", "/bin/sh", "-c", `printf "tail"`)
	if r.stdout != "[0] tail\n" {
		t.Fatalf("-l partial line: %q", r.stdout)
	}
}

func TestStdinGoesToRankZero(t *testing.T) {
	input := strings.Repeat("0123456789abcdef\n", 10000)
	r := runJob(t, input, "-n", "3", bin("rankprog"), "cat")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if !strings.Contains(r.stdout, fmt.Sprintf("rank 0 read %d bytes", len(input))) {
		t.Fatalf("rank 0 did not read all of stdin: %q", r.stdout[len(r.stdout)-200:])
	}
	for _, rk := range []string{"1", "2"} {
		if !strings.Contains(r.stdout, "rank "+rk+" read 0 bytes") {
			t.Fatalf("rank %s should read nothing", rk)
		}
	}
}

func TestExitCodes(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		code     int
		summary  string
		duration time.Duration
	}{
		{"exit code", []string{"-n", "4", bin("rankprog"), "exit", "7", "2"}, 7, "RANK 2", 5 * time.Second},
		{"signal", []string{"-n", "3", bin("rankprog"), "selfkill", "1"}, 128 + 9, "KILLED BY SIGNAL: 9 (SIGKILL)", 5 * time.Second},
		{"all good", []string{"-n", "3", "/bin/true"}, 0, "", 5 * time.Second},
		{"missing on start", []string{"-n", "2", "/bin/false"}, 1, "EXIT CODE: 1", 5 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := runJob(t, "", tc.args...)
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", r.code, tc.code, r.stderr)
			}
			if tc.summary != "" && (!strings.Contains(r.stderr, "BAD TERMINATION") || !strings.Contains(r.stderr, tc.summary)) {
				t.Fatalf("summary missing %q:\n%s", tc.summary, r.stderr)
			}
			if r.elapsed > tc.duration {
				t.Fatalf("took %s", r.elapsed)
			}
		})
	}
}

func TestPrintAllExitCodes(t *testing.T) {
	r := runJob(t, "", "-print-all-exitcodes", "-n", "3", "/bin/sh", "-c", `[ $PMI_RANK = 2 ] && sleep 0.5 && exit 5; exit 0`)
	if r.code != 5 || !strings.Contains(r.stderr, "Exit codes: [localhost] 0:0,1:0,2:5") {
		t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
	}
}

func TestMPMD(t *testing.T) {
	r := runJob(t, "", "-n", "1", bin("rankprog"), "env", "first", ":", "-n", "2", "-env", "GOMPI_TEST_VAR", "seg2", bin("rankprog"), "env", "second")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, want := range []string{
		"rank=0 size=3 local=0/3 app=0 args=first marker=\n",
		"rank=1 size=3 local=1/3 app=1 args=second marker=seg2\n",
		"rank=2 size=3 local=2/3 app=1 args=second marker=seg2\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("missing %q in\n%s", want, r.stdout)
		}
	}
}

func TestSixtyFourRanksOnTwoCores(t *testing.T) {
	r := runJob(t, "", "-n", "64", bin("rankprog"), "env")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for i := 0; i < 64; i++ {
		if !strings.Contains(r.stdout, fmt.Sprintf("rank=%d size=64 local=%d/64 ", i, i)) {
			t.Fatalf("rank %d missing", i)
		}
	}
}

func TestCommandLineErrorsStartNothing(t *testing.T) {
	noexec := filepath.Join(t.TempDir(), "noexec")
	os.WriteFile(noexec, []byte("#!/bin/sh\n"), 0o644)
	badhosts := filepath.Join(t.TempDir(), "hosts")
	os.WriteFile(badhosts, []byte("a:2\nb:zero\n"), 0o644)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"-n", "2", "./does-not-exist"}, "program ./does-not-exist not found"},
		{[]string{"-n", "2", noexec}, "is not executable"},
		{[]string{"-bogus", "-n", "2", "/bin/true"}, "unknown option -bogus"},
		{[]string{"-n", "0", "/bin/true"}, "-n \"0\": need at least 1 process"},
		{[]string{"-f", badhosts, "-n", "2", "/bin/true"}, badhosts + ":2: bad slot count"},
		{[]string{"-n", "2"}, "no program given"},
		{[]string{"-wdir", "/nonexistent", "/bin/true"}, "-wdir /nonexistent: not a directory"},
	}
	for _, tc := range tests {
		r := runJob(t, "", tc.args...)
		if r.code != 255 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 255 and %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}

func TestSingleAndDoubleDashLongOptions(t *testing.T) {
	for _, flag := range []string{"-prepend-rank", "--prepend-rank"} {
		r := runJob(t, "", flag, "--n", "1", "-genv=GOMPI_TEST_VAR=x", bin("rankprog"), "env")
		if r.code != 0 || !strings.HasPrefix(r.stdout, "[0] rank=0") || !strings.Contains(r.stdout, "marker=x") {
			t.Fatalf("%s: exit %d out %q err %q", flag, r.code, r.stdout, r.stderr)
		}
	}
}

func TestHelpAndVersion(t *testing.T) {
	out, err := exec.Command(bin("gompiexec"), "--help").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Examples:") || !strings.Contains(string(out), "-genvlist") {
		t.Fatalf("help: %v %s", err, out)
	}
	out, err = exec.Command(bin("gompiexec"), "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "gompiexec version") {
		t.Fatalf("version: %v %s", err, out)
	}
	out, err = exec.Command(bin("gompiexec"), "completion", "bash").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "complete") {
		t.Fatalf("completion: %v %.200s", err, out)
	}
}

func TestEnvironmentModes(t *testing.T) {
	t.Setenv("GOMPI_TEST_VAR", "inherited")
	r := runJob(t, "", "-n", "1", bin("rankprog"), "env")
	if !strings.Contains(r.stdout, "marker=inherited") {
		t.Fatalf("-genvall: %q", r.stdout)
	}
	r = runJob(t, "", "-genvnone", "-n", "1", bin("rankprog"), "env")
	if !strings.Contains(r.stdout, "marker=\n") {
		t.Fatalf("-genvnone: %q", r.stdout)
	}
	r = runJob(t, "", "-genvlist", "GOMPI_TEST_VAR", "-n", "1", bin("rankprog"), "env")
	if !strings.Contains(r.stdout, "marker=inherited") {
		t.Fatalf("-genvlist: %q", r.stdout)
	}
}

func TestSeveralProxies(t *testing.T) {
	hosts := filepath.Join(t.TempDir(), "hosts")
	os.WriteFile(hosts, []byte("# three hosts, forked locally\nnodeA:2\nnodeB slots=1\nnodeC:3\n"), 0o644)
	r := runJob(t, "", "-launcher", "fork", "-f", hosts, "-n", "6", bin("rankprog"), "env")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, want := range []string{"rank=0 size=6 local=0/2", "rank=1 size=6 local=1/2", "rank=2 size=6 local=0/1",
		"rank=3 size=6 local=0/3", "rank=5 size=6 local=2/3"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("missing %q in\n%s", want, r.stdout)
		}
	}
	// -ppn and -rr change the placement.
	r = runJob(t, "", "-launcher", "fork", "-hosts", "x,y", "-rr", "-n", "4", bin("rankprog"), "env")
	if !strings.Contains(r.stdout, "rank=2 size=4 local=1/2") || !strings.Contains(r.stdout, "rank=1 size=4 local=0/2") {
		t.Fatalf("-rr placement:\n%s", r.stdout)
	}
}

func TestOneOfSeveralProxiesKilled(t *testing.T) {
	j := newJob(t, "", "-launcher", "fork", "-hosts", "h1:2,h2:2", "-n", "4", bin("rankprog"), "sleep", "60s")
	j.startJob()
	j.waitRanks(4)
	proxies := childrenNamed(j.cmd.Process.Pid, "gompi-proxy")
	if len(proxies) != 2 {
		t.Fatalf("want 2 proxies, found %v", proxies)
	}
	syscall.Kill(proxies[1], syscall.SIGKILL)
	r := j.wait(10 * time.Second)
	if r.code == 0 || !strings.Contains(r.stderr, "lost connection to gompi-proxy on h") {
		t.Fatalf("exit %d, stderr %s", r.code, r.stderr)
	}
	j.assertNoLeftovers(2 * time.Second)
}

func TestWorkingDirectory(t *testing.T) {
	dir := t.TempDir()
	r := runJob(t, "", "-wdir", dir, "-n", "1", "/bin/sh", "-c", "pwd")
	if strings.TrimSpace(r.stdout) != dir {
		t.Fatalf("pwd %q, want %q", r.stdout, dir)
	}
}
