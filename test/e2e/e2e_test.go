// Package e2e runs the real gompiexec and gompi-proxy binaries the way users do.
package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gompi/gompi/internal/testkit"
)

var binDir string

func TestMain(m *testing.M) {
	os.Exit(testkit.MainWithBinaries(m, &binDir, "gompi-e2e-",
		testkit.Pkg("cmd/gompiexec"), testkit.Pkg("cmd/gompi-proxy"),
		testkit.Pkg("test/e2e/progs/rankprog"), testkit.Pkg("examples/hello"), testkit.Pkg("examples/pi")))
}

func bin(name string) string { return filepath.Join(binDir, name) }

type result = testkit.Result

// job is a gompiexec run under test; its marker tags every rank's
// environment so leftovers can be found even after they are reparented.
type job struct {
	*testkit.Job
	t *testing.T
}

func newJob(t *testing.T, stdin string, args ...string) *job {
	t.Helper()
	marker := testkit.NewMarker("gompi-test")
	full := append([]string{"-genv", testkit.MarkerVar, marker}, args...)
	// The marker in gompiexec's own environment reaches every proxy too,
	// including those that proxies start in a launch tree.
	j := &job{Job: testkit.NewJob(marker, stdin, bin("gompiexec"), full...), t: t}
	t.Cleanup(func() { testkit.KillMarked(marker) })
	return j
}

func (j *job) startJob() {
	j.t.Helper()
	if err := j.Start(); err != nil {
		j.t.Fatal(err)
	}
}

func (j *job) wait(limit time.Duration) result {
	j.t.Helper()
	return j.MustWait(j.t, limit)
}

func runJob(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	j := newJob(t, stdin, args...)
	j.startJob()
	r := j.wait(60 * time.Second)
	j.assertNoLeftovers(2 * time.Second)
	return r
}

// childrenNamed lists the processes called name whose parent is ppid.
func childrenNamed(ppid int, name string) []int {
	var pids []int
	for _, pid := range testkit.Pids() {
		if p, err := testkit.ReadProc(pid); err == nil && p.Comm == name && p.PPid == ppid {
			pids = append(pids, pid)
		}
	}
	return pids
}

// assertNoLeftovers fails unless every process of the job is gone within d.
func (j *job) assertNoLeftovers(d time.Duration) {
	j.t.Helper()
	left := testkit.WaitGone(d, func() []int {
		var left []int
		for _, p := range testkit.MarkedProcs(j.Marker) {
			if j.Cmd.Process == nil || p != j.Cmd.Process.Pid {
				left = append(left, p)
			}
		}
		if j.Cmd.Process != nil {
			left = append(left, childrenNamed(j.Cmd.Process.Pid, "gompi-proxy")...)
		}
		return left
	})
	if left != nil {
		j.t.Fatalf("processes of the job still alive after %s: %v", d, left)
	}
}

// waitRanks waits until n ranks of the job are running and returns their pids.
func (j *job) waitRanks(n int) []int {
	j.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var ranks []int
		for _, p := range testkit.MarkedProcs(j.Marker) {
			if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p)); strings.TrimSpace(string(b)) == "rankprog" {
				ranks = append(ranks, p)
			}
		}
		if len(ranks) >= n && strings.Count(j.Stdout.String(), "ready") >= n {
			return ranks
		}
		if time.Now().After(deadline) {
			j.t.Fatalf("only %d of %d ranks came up; stdout %q stderr %q", len(ranks), n, j.Stdout.String(), j.Stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRankEnvironmentAndOutput(t *testing.T) {
	r := runJob(t, "", "-genv", "GOMPI_TEST_VAR", "v1", "-n", "4", bin("rankprog"), "env", "a", "b")
	if r.Code != 0 {
		t.Fatalf("exit %d, stderr %s", r.Code, r.Stderr)
	}
	for i := 0; i < 4; i++ {
		want := fmt.Sprintf("rank=%d size=4 local=%d/4 app=0 args=a,b marker=v1\n", i, i)
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("missing %q in\n%s", want, r.Stdout)
		}
	}
}

func TestPrependRankKeepsLinesWhole(t *testing.T) {
	const lines = 3000
	r := runJob(t, "", "-l", "-n", "4", bin("rankprog"), "spam", strconv.Itoa(lines))
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	re := regexp.MustCompile(`^\[(\d)\] rank (\d) line (\d+) x+ end$`)
	next := map[string]int{}
	out := strings.Split(strings.TrimSuffix(r.Stdout, "\n"), "\n")
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
	if r.Stdout != string(want) {
		t.Fatalf("got %d bytes %q..., want the 1024 raw bytes", len(r.Stdout), r.Stdout[:min(len(r.Stdout), 40)])
	}
}

func TestFinalPartialLineFlushed(t *testing.T) {
	r := runJob(t, "", "-n", "2", "/bin/sh", "-c", `printf "no newline $PMI_RANK"`)
	if !strings.Contains(r.Stdout, "no newline 0") || !strings.Contains(r.Stdout, "no newline 1") {
		t.Fatalf("partial lines lost: %q", r.Stdout)
	}
	r = runJob(t, "", "-l", "-n", "1", "/bin/sh", "-c", `printf "tail"`)
	if r.Stdout != "[0] tail\n" {
		t.Fatalf("-l partial line: %q", r.Stdout)
	}
}

func TestStdinGoesToRankZero(t *testing.T) {
	input := strings.Repeat("0123456789abcdef\n", 10000)
	r := runJob(t, input, "-n", "3", bin("rankprog"), "cat")
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	if !strings.Contains(r.Stdout, fmt.Sprintf("rank 0 read %d bytes", len(input))) {
		t.Fatalf("rank 0 did not read all of stdin: %q", r.Stdout[len(r.Stdout)-200:])
	}
	for _, rk := range []string{"1", "2"} {
		if !strings.Contains(r.Stdout, "rank "+rk+" read 0 bytes") {
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
			if r.Code != tc.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", r.Code, tc.code, r.Stderr)
			}
			if tc.summary != "" && (!strings.Contains(r.Stderr, "BAD TERMINATION") || !strings.Contains(r.Stderr, tc.summary)) {
				t.Fatalf("summary missing %q:\n%s", tc.summary, r.Stderr)
			}
			if r.Elapsed > tc.duration {
				t.Fatalf("took %s", r.Elapsed)
			}
		})
	}
}

func TestPrintAllExitCodes(t *testing.T) {
	r := runJob(t, "", "-print-all-exitcodes", "-n", "3", "/bin/sh", "-c", `[ $PMI_RANK = 2 ] && sleep 0.5 && exit 5; exit 0`)
	if r.Code != 5 || !strings.Contains(r.Stderr, "Exit codes: [localhost] 0:0,1:0,2:5") {
		t.Fatalf("exit %d, stderr:\n%s", r.Code, r.Stderr)
	}
}

func TestMPMD(t *testing.T) {
	r := runJob(t, "", "-n", "1", bin("rankprog"), "env", "first", ":", "-n", "2", "-env", "GOMPI_TEST_VAR", "seg2", bin("rankprog"), "env", "second")
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	for _, want := range []string{
		"rank=0 size=3 local=0/3 app=0 args=first marker=\n",
		"rank=1 size=3 local=1/3 app=1 args=second marker=seg2\n",
		"rank=2 size=3 local=2/3 app=1 args=second marker=seg2\n",
	} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("missing %q in\n%s", want, r.Stdout)
		}
	}
}

func TestSixtyFourRanksOnTwoCores(t *testing.T) {
	r := runJob(t, "", "-n", "64", bin("rankprog"), "env")
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	for i := 0; i < 64; i++ {
		if !strings.Contains(r.Stdout, fmt.Sprintf("rank=%d size=64 local=%d/64 ", i, i)) {
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
		if r.Code != 255 || !strings.Contains(r.Stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 255 and %q", tc.args, r.Code, r.Stderr, tc.want)
		}
	}
}

func TestSingleAndDoubleDashLongOptions(t *testing.T) {
	for _, flag := range []string{"-prepend-rank", "--prepend-rank"} {
		r := runJob(t, "", flag, "--n", "1", "-genv=GOMPI_TEST_VAR=x", bin("rankprog"), "env")
		if r.Code != 0 || !strings.HasPrefix(r.Stdout, "[0] rank=0") || !strings.Contains(r.Stdout, "marker=x") {
			t.Fatalf("%s: exit %d out %q err %q", flag, r.Code, r.Stdout, r.Stderr)
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

// loginAgent are gompiexec's options for one host, nodeX, reached through
// an rsh-style agent that starts the proxy in a fresh environment as an
// SSH login would: PATH, HOME, GOMPI_LOGIN_VAR=remote and (as ssh -X)
// DISPLAY=remote:10 only.
func loginAgent(t *testing.T) []string {
	t.Helper()
	agent := filepath.Join(t.TempDir(), "login.sh")
	script := "#!/bin/sh\nshift\nexec env -i PATH=/usr/bin:/bin HOME=/ GOMPI_LOGIN_VAR=remote DISPLAY=remote:10 /bin/sh -c \"$*\"\n"
	if err := os.WriteFile(agent, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return []string{"-launcher", "rsh", "-launcher-exec", agent, "-hosts", "nodeX", "-proxy-path", bin("gompi-proxy")}
}

// TestEnvironmentModes: ranks start from their proxy's whole environment
// and -genvall/-genvnone/-genvlist choose only what is added from
// gompiexec's, as with mpiexec.hydra (checked with it on the same command
// lines): a forked proxy has gompiexec's environment, so -genvnone
// changes nothing locally; through an agent that logs in afresh
// (env -i, as ssh does) -genvnone keeps the login's variables and drops
// gompiexec's.
func TestEnvironmentModes(t *testing.T) {
	t.Setenv("GOMPI_TEST_VAR", "inherited")
	local, login := []string{}, loginAgent(t)
	for _, tc := range []struct {
		launch []string
		opts   []string
		want   string
	}{
		{local, nil, "m=inherited l=\n"},
		{local, []string{"-genvnone"}, "m=inherited l=\n"},
		{local, []string{"-genvlist", "PATH"}, "m=inherited l=\n"},
		{login, nil, "m=inherited l=remote\n"},
		{login, []string{"-genvnone"}, "m= l=remote\n"},
		{login, []string{"-genvlist", "GOMPI_TEST_VAR"}, "m=inherited l=remote\n"},
		{login, []string{"-genvlist", "PATH"}, "m= l=remote\n"},
	} {
		args := append(append(append([]string{}, tc.launch...), tc.opts...), "-n", "1", "/bin/sh", "-c", `echo "m=$GOMPI_TEST_VAR l=$GOMPI_LOGIN_VAR"`)
		if r := runJob(t, "", args...); r.Code != 0 || r.Stdout != tc.want {
			t.Errorf("%v: exit %d, %q, want %q (%s)", args[:len(args)-4], r.Code, r.Stdout, tc.want, r.Stderr)
		}
	}
	// DISPLAY is never passed on, whatever -genvall or -genvlist say
	// (-genv can): the login's own stays, as with mpiexec.hydra's ssh and
	// rsh launchers; a forked proxy has gompiexec's anyway.
	t.Setenv("DISPLAY", ":5")
	for _, tc := range []struct {
		launch []string
		opts   []string
		want   string
	}{
		{login, nil, "d=remote:10\n"},
		{login, []string{"-genvlist", "DISPLAY"}, "d=remote:10\n"},
		{login, []string{"-genv", "DISPLAY", ":7"}, "d=:7\n"},
		{local, nil, "d=:5\n"},
	} {
		args := append(append(append([]string{}, tc.launch...), tc.opts...), "-n", "1", "/bin/sh", "-c", `echo "d=$DISPLAY"`)
		if r := runJob(t, "", args...); r.Code != 0 || r.Stdout != tc.want {
			t.Errorf("%v: exit %d, %q, want %q (%s)", args[:len(args)-4], r.Code, r.Stdout, tc.want, r.Stderr)
		}
	}
	// gfortran buffers a pipe's output unless told not to: Hydra always
	// tells it, whatever the environment options and the user's value.
	for _, opts := range [][]string{nil, {"-genvnone"}, {"-genv", "GFORTRAN_UNBUFFERED_PRECONNECTED", "n"}} {
		args := append(append([]string{}, opts...), "-n", "1", "/bin/sh", "-c", "echo g=$GFORTRAN_UNBUFFERED_PRECONNECTED")
		if r := runJob(t, "", args...); r.Stdout != "g=y\n" {
			t.Errorf("%v: %q, want g=y (%s)", opts, r.Stdout, r.Stderr)
		}
	}
}

func TestSeveralProxies(t *testing.T) {
	hosts := filepath.Join(t.TempDir(), "hosts")
	os.WriteFile(hosts, []byte("# three hosts, forked locally\nnodeA:2\nnodeB slots=1\nnodeC:3\n"), 0o644)
	r := runJob(t, "", "-launcher", "fork", "-f", hosts, "-n", "6", bin("rankprog"), "env")
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	for _, want := range []string{"rank=0 size=6 local=0/2", "rank=1 size=6 local=1/2", "rank=2 size=6 local=0/1",
		"rank=3 size=6 local=0/3", "rank=5 size=6 local=2/3"} {
		if !strings.Contains(r.Stdout, want) {
			t.Fatalf("missing %q in\n%s", want, r.Stdout)
		}
	}
	// -ppn and -rr change the placement.
	r = runJob(t, "", "-launcher", "fork", "-hosts", "x,y", "-rr", "-n", "4", bin("rankprog"), "env")
	if !strings.Contains(r.Stdout, "rank=2 size=4 local=1/2") || !strings.Contains(r.Stdout, "rank=1 size=4 local=0/2") {
		t.Fatalf("-rr placement:\n%s", r.Stdout)
	}
}

func TestOneOfSeveralProxiesKilled(t *testing.T) {
	j := newJob(t, "", "-launcher", "fork", "-hosts", "h1:2,h2:2", "-n", "4", bin("rankprog"), "sleep", "60s")
	j.startJob()
	j.waitRanks(4)
	proxies := childrenNamed(j.Cmd.Process.Pid, "gompi-proxy")
	if len(proxies) != 2 {
		t.Fatalf("want 2 proxies, found %v", proxies)
	}
	syscall.Kill(proxies[1], syscall.SIGKILL)
	r := j.wait(10 * time.Second)
	if r.Code == 0 || !strings.Contains(r.Stderr, "lost connection to gompi-proxy on h") {
		t.Fatalf("exit %d, stderr %s", r.Code, r.Stderr)
	}
	j.assertNoLeftovers(2 * time.Second)
}

func TestWorkingDirectory(t *testing.T) {
	dir := t.TempDir()
	r := runJob(t, "", "-wdir", dir, "-n", "1", "/bin/sh", "-c", "pwd")
	if strings.TrimSpace(r.Stdout) != dir {
		t.Fatalf("pwd %q, want %q", r.Stdout, dir)
	}
}

// A script without a #! line runs under /bin/sh, as execvp (and so Hydra's
// proxy) runs it, with its arguments unchanged.
func TestScriptWithoutInterpreterLine(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "noshebang")
	if err := os.WriteFile(script, []byte("echo rank $PMI_RANK args \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := runJob(t, "", "-n", "2", script, "a b", "c")
	for _, want := range []string{"rank 0 args a b c\n", "rank 1 args a b c\n"} {
		if !strings.Contains(r.Stdout, want) {
			t.Fatalf("exit %d, stdout %q lacks %q; stderr:\n%s", r.Code, r.Stdout, want, r.Stderr)
		}
	}
	if r.Code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", r.Code, r.Stderr)
	}
	// A binary the kernel cannot run (another architecture's) is not
	// handed to the shell, which would call it a syntax error.
	binary := filepath.Join(dir, "wrongarch")
	if err := os.WriteFile(binary, []byte("\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xff\xff"), 0o755); err != nil {
		t.Fatal(err)
	}
	r = runJob(t, "", "-n", "1", binary)
	if r.Code != 255 || !strings.Contains(r.Stderr, "exec format error") {
		t.Fatalf("exit %d; stderr:\n%s", r.Code, r.Stderr)
	}
}

// A rank that exits without ever speaking PMI (here the first MPMD
// segment) while the others fence ends the job at once, naming it, instead
// of leaving them waiting forever (Hydra hangs: pmodels/mpich#6124). The
// -timeout only bounds a regression.
func TestRankLeavingBeforeBarrierEndsJob(t *testing.T) {
	tests := []struct{ name, hosts, mode, want string }{
		// The proxy of the host sees it (pmi.Node.Left).
		{"same host", "localhost:3", "-l", "barrier can never complete: rank 0 ended"},
		// The same in PMI_PORT mode, where a connection names its rank
		// only once it has spoken: the waiting rank is still the one
		// that fails, not the proxy (exit 255).
		{"same host, PMI_PORT", "localhost:3", "-pmi-port", "barrier can never complete: rank 0 ended"},
		// gompiexec sees host a done while b fences.
		{"host of its own", "a,b:2", "-l", "every rank on a (rank 0 first) ended without entering it"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := runJob(t, "", "-timeout", "60", "-launcher", "fork", "-hosts", tc.hosts, tc.mode,
				"-n", "1", "/bin/true", ":", "-n", "2", bin("hello"))
			if r.Code != 1 || !strings.Contains(r.Stderr, tc.want) || strings.Contains(r.Stderr, "proxy on") {
				t.Fatalf("exit %d after %s, stderr:\n%s", r.Code, r.Elapsed, r.Stderr)
			}
		})
	}
}

// gompi-proxy run by hand with an argument it does not know says so
// instead of waiting for a job on its stdin and exiting 1 in silence; its
// help names the persistent-proxy command it really has.
func TestProxyCommandLine(t *testing.T) {
	tests := []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{[]string{"-help"}, 0, "gompi-proxy -persist-start IDLE", ""},
		{[]string{"--help"}, 0, "Usage:", ""},
		{[]string{"persist"}, 2, "", `unknown argument "persist"`},
		{[]string{"-n", "2"}, 2, "", `unknown argument "-n"`},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			cmd := exec.Command(bin("gompi-proxy"), tc.args...)
			var out, errb strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &errb
			err := cmd.Run()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.code || !strings.Contains(out.String(), tc.stdout) || !strings.Contains(errb.String(), tc.stderr) {
				t.Fatalf("exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
			}
		})
	}
}

// A host file that came from the environment is named as such: the user
// may not remember that HYDRA_HOST_FILE (or PBS_NODEFILE) is set.
func TestHostFileFromEnvironmentNamed(t *testing.T) {
	for _, v := range []string{"HYDRA_HOST_FILE", "PBS_NODEFILE"} {
		j := newJob(t, "", "-n", "1", "/bin/true")
		j.Cmd.Env = append(j.Cmd.Env, v+"=/nonexistent/hosts")
		j.startJob()
		r := j.wait(20 * time.Second)
		if r.Code != 255 || !strings.Contains(r.Stderr, v+": ") || !strings.Contains(r.Stderr, "/nonexistent/hosts") {
			t.Errorf("%s: exit %d, stderr %q", v, r.Code, r.Stderr)
		}
	}
}

// A rank's argv[0] is the program as the user typed it, as under Hydra
// (execvp), not the path gompiexec resolved it to.
func TestArgvZeroAsTyped(t *testing.T) {
	r := runJob(t, "", "-n", "1", "sh", "-c", `echo "$0"`)
	if r.Code != 0 || r.Stdout != "sh\n" {
		t.Fatalf("exit %d, argv[0] %q, want %q; stderr:\n%s", r.Code, r.Stdout, "sh\n", r.Stderr)
	}
}
