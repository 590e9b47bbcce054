package e2e

// Issue 14: gompiexec and gompi-proxy under abuse (exit codes and messages).

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gompi/gompi/internal/control"
	"github.com/gompi/gompi/internal/testkit"
)

func TestUsageMistakesNamed(t *testing.T) {
	tests := []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"-n", "abc", "/bin/true"}, `-n "abc": not a number`},
		{nil, []string{"-n", "2", "-n", "3", "/bin/true"}, "-n given twice"},
		{nil, []string{"-hosts", "localhost:2:3", "/bin/true"}, `unexpected field "3"`},
		{[]string{"MPIEXEC_TIMEOUT=soon"}, []string{"-n", "1", "/bin/true"}, `MPIEXEC_TIMEOUT="soon": want seconds`},
	}
	for _, tc := range tests {
		j := newJob(t, "", tc.args...)
		j.Cmd.Env = append(j.Cmd.Env, tc.env...)
		j.startJob()
		r := j.wait(20 * time.Second)
		if r.Code != 255 || !strings.Contains(r.Stderr, tc.want) || strings.Contains(r.Stderr, "-MPIEXEC_TIMEOUT") {
			t.Errorf("%v %v: exit %d, stderr %q; want 255 and %q", tc.env, tc.args, r.Code, r.Stderr, tc.want)
		}
	}
}

func TestProxyVersionNamesItsProtocol(t *testing.T) {
	out, err := exec.Command(bin("gompi-proxy"), "-version").CombinedOutput()
	want := fmt.Sprintf("control protocol %d ", control.Version)
	if err != nil || !strings.Contains(string(out), want) {
		t.Fatalf("gompi-proxy -version: %v %q, want %q", err, out, want)
	}
}

// A second Ctrl-C ends the job by dropping the proxies' sessions: their end
// is the launcher's own doing, not a lost connection to report.
func TestSecondCtrlCIsQuiet(t *testing.T) {
	j := newJob(t, "", "-n", "2", bin("rankprog"), "trapstay")
	j.startJob()
	j.waitRanks(2)
	syscall.Kill(j.Cmd.Process.Pid, syscall.SIGINT)
	time.Sleep(100 * time.Millisecond)
	syscall.Kill(j.Cmd.Process.Pid, syscall.SIGINT)
	r := j.wait(20 * time.Second)
	if r.Code != 130 || strings.Contains(r.Stderr, "lost connection") || strings.Contains(r.Stderr, "already closed") {
		t.Fatalf("exit %d, stderr:\n%s", r.Code, r.Stderr)
	}
	j.assertNoLeftovers(2 * time.Second)
}

// Rank 0 fails first (exit 3), but its proxy reports it late: a detached
// child holds its stdout, so the proxy waits for the output first. Rank 1,
// on another proxy, exits 1 only once rank 0 is gone and its report
// arrives first. The failure first in time decides the code and summary.
func TestFirstFailureInTimeDecides(t *testing.T) {
	dir := t.TempDir()
	pidf := filepath.Join(dir, "pid")
	script := fmt.Sprintf(`
if [ "$PMI_RANK" = 0 ]; then
  sleep 2 &
  echo $$ > %[1]s.tmp && mv %[1]s.tmp %[1]s
  exit 3
fi
while [ ! -s %[1]s ]; do sleep 0.01; done
while kill -0 $(cat %[1]s) 2>/dev/null; do sleep 0.01; done
exit 1`, pidf)
	r := runJob(t, "", "-launcher", "fork", "-hosts", "nodeA,nodeB", "-n", "2", "/bin/sh", "-c", script)
	if r.Code != 3 || !strings.Contains(r.Stderr, "RANK 0 ") || !strings.Contains(r.Stderr, "EXIT CODE: 3") {
		t.Fatalf("exit %d, want 3 blaming rank 0; stderr:\n%s", r.Code, r.Stderr)
	}
	if _, err := os.Stat(pidf); err != nil {
		t.Fatal(err)
	}
}

// readPMIPort waits for the rank to write its PMI_PORT into file f.
func readPMIPort(t *testing.T, f string) string {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if b, err := os.ReadFile(f); err == nil && strings.HasSuffix(string(b), "\n") {
			return strings.TrimSpace(string(b))
		}
	}
	t.Fatalf("no PMI_PORT in %s", f)
	return ""
}

// In -pmi-port mode the PMI port is a loopback TCP port any local user can
// reach: another user's connection is refused unanswered, and a second
// claim of a rank by the job's own user is refused without ending the job.
func TestPMIPortLetsNobodyElseIn(t *testing.T) {
	if os.Getuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("needs root to connect as another user")
		}
		t.Skip("needs root to connect as another user")
	}
	portFile := filepath.Join(t.TempDir(), "port")
	j := newJob(t, "", "-pmi-port", "-n", "1", "/bin/sh", "-c",
		fmt.Sprintf(`echo "$PMI_PORT" > %[1]s.tmp && mv %[1]s.tmp %[1]s; exec sleep 30`, portFile))
	j.startJob()
	addr := readPMIPort(t, portFile)
	host, port, _ := strings.Cut(addr, ":")
	speak := func(uid uint32) string {
		cmd := exec.Command("/bin/bash", "-c", fmt.Sprintf(
			`exec 3<>/dev/tcp/%s/%s || exit 9; echo "cmd=initack pmiid=0" >&3; read -t 10 line <&3; echo "reply:$line"`, host, port))
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("uid %d: %v %s", uid, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got := speak(65534); !strings.HasSuffix(got, "reply:") || strings.Contains(got, "cmd=") {
		t.Fatalf("another user's connection was answered: %q", got)
	}
	if got := speak(0); got != "reply:cmd=initack" {
		t.Fatalf("the job's user's first claim: %q", got)
	}
	if got := speak(0); !strings.Contains(got, "rc=-1") {
		t.Fatalf("second claim of rank 0 answered %q", got)
	}
	select {
	case <-j.Done():
		t.Fatalf("an intruder ended the job: %s", j.Stderr.String())
	case <-time.After(200 * time.Millisecond):
	}
	syscall.Kill(j.Cmd.Process.Pid, syscall.SIGTERM)
	r := j.wait(20 * time.Second)
	if !strings.Contains(r.Stderr, "refused a PMI connection") || !strings.Contains(r.Stderr, "not the job's 0") ||
		!strings.Contains(r.Stderr, "already claimed") {
		t.Fatalf("refusals not reported; stderr:\n%s", r.Stderr)
	}
	j.assertNoLeftovers(2 * time.Second)
}

// Bytes that are not UTF-8 reach the ranks exactly: arguments, inherited
// and -genv environment, the program's path and -wdir (Hydra passes them
// unchanged; JSON would make U+FFFD of them).
func TestBytesArriveExactly(t *testing.T) {
	const bad = "caf\xe9"
	dir := filepath.Join(t.TempDir(), "d"+bad)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(dir, "p"+bad)
	script := "#!/bin/sh\nprintf '%s|' \"$1\" \"$INHERITED\" \"$GENV\" \"$0\" \"$(pwd)\"\n"
	if err := os.WriteFile(prog, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	j := newJob(t, "", "-genv", "GENV", "g"+bad, "-wdir", dir, "-n", "1", prog, "a"+bad)
	j.Cmd.Env = append(j.Cmd.Env, "INHERITED=i"+bad)
	j.startJob()
	r := j.wait(30 * time.Second)
	want := "a" + bad + "|i" + bad + "|g" + bad + "|" + prog + "|" + dir + "|"
	if r.Code != 0 || r.Stdout != want {
		t.Fatalf("exit %d, rank printed %q, want %q; stderr %s", r.Code, r.Stdout, want, r.Stderr)
	}
	r = runJob(t, "", "-n", "1", "/usr/bin/printf", "%s", bad)
	if r.Stdout != bad {
		t.Fatalf("printf %%s %q printed %q", bad, r.Stdout)
	}
}

// A PMI value put on one host and read on another crosses two proxies and
// the launcher byte for byte. The ranks are shell scripts speaking PMI-1
// on PMI_FD.
func TestPMIValueBytesCrossProxies(t *testing.T) {
	script := `
say() { printf '%s\n' "$1" >&3; IFS= read -r REPLY <&3; }
say "cmd=init pmi_version=1 pmi_subversion=1"
say "cmd=get_my_kvsname"
KVS=${REPLY##*kvsname=}
if [ "$PMI_RANK" = 0 ]; then say "cmd=put kvsname=$KVS key=k value=$(printf 'caf\351\377')"; fi
say "cmd=barrier_in"
if [ "$PMI_RANK" = 1 ]; then say "cmd=get kvsname=$KVS key=k"; printf '%s' "${REPLY##*value=}"; fi
say "cmd=finalize"
`
	r := runJob(t, "", "-launcher", "fork", "-hosts", "nodeA,nodeB", "-n", "2", "/bin/sh", "-c", script)
	if r.Code != 0 || r.Stdout != "caf\xe9\xff" {
		t.Fatalf("exit %d, rank 1 read %q, want %q; stderr %s", r.Code, r.Stdout, "caf\xe9\xff", r.Stderr)
	}
}

// When gompiexec cannot write the job's output the job ends with exit 255
// and one message naming the stream (Hydra: the same exit code).
func TestOutputWriteErrorEndsJob(t *testing.T) {
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skip(err)
	}
	defer full.Close()
	j := newJob(t, "", "-n", "2", "/bin/sh", "-c", "echo hi; exec sleep 30")
	j.Cmd.Stdout = full
	j.startJob()
	r := j.wait(30 * time.Second)
	if r.Code != 255 || strings.Count(r.Stderr, "cannot write the job's stdout") != 1 {
		t.Fatalf("exit %d, stderr:\n%s", r.Code, r.Stderr)
	}
	j.assertNoLeftovers(2 * time.Second)
	// /dev/null opened read-write, as Python's subprocess.DEVNULL and
	// systemd's StandardOutput=null give it: a choice, run as usual. (A
	// descriptor closed at start looks the same: Go's runtime puts such a
	// /dev/null in its place; docs/control.md says so.)
	null, err := os.OpenFile("/dev/null", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	j = newJob(t, "", "-n", "2", "/bin/echo", "hi")
	j.Cmd.Stdout = null
	j.startJob()
	if r = j.wait(30 * time.Second); r.Code != 0 || r.Stderr != "" {
		t.Fatalf("stdout /dev/null read-write: exit %d, stderr:\n%s", r.Code, r.Stderr)
	}
}

// A partial line (a prompt) is shown while the rank waits, without -l at
// once and with -l after a short delay. The rank goes on only once the
// test has seen its prompt.
func TestPartialLineShownWhileRankWaits(t *testing.T) {
	for _, tc := range []struct {
		flags       []string
		prompt, all string
	}{
		{nil, "prompt> ", "prompt> answer\n"},
		{[]string{"-l"}, "[0] prompt> ", "[0] prompt> answer\n"},
	} {
		goOn := filepath.Join(t.TempDir(), "go-on")
		args := append(tc.flags, "-n", "1", "/bin/sh", "-c",
			fmt.Sprintf(`printf "prompt> "; while [ ! -e %s ]; do sleep 0.01; done; echo answer`, goOn))
		j := newJob(t, "", args...)
		j.startJob()
		for deadline := time.Now().Add(20 * time.Second); j.Stdout.String() != tc.prompt; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%v: the prompt never showed: stdout %q", tc.flags, j.Stdout.String())
			}
		}
		os.WriteFile(goOn, nil, 0o644)
		if r := j.wait(30 * time.Second); r.Code != 0 || r.Stdout != tc.all {
			t.Fatalf("%v: exit %d, stdout %q", tc.flags, r.Code, r.Stdout)
		}
	}
}

// Lines longer than 64 KiB written at the same time by two ranks come out
// whole, with and without -l.
func TestLongLinesStayWhole(t *testing.T) {
	const n = 300000
	script := fmt.Sprintf(`c=$(printf "\\$(printf %%o $((97 + PMI_RANK)))"); for i in 1 2 3; do head -c %d /dev/zero | tr '\0' "$c"; echo; done`, n)
	for _, flags := range [][]string{nil, {"-l"}} {
		r := runJob(t, "", append(flags, "-n", "2", "/bin/sh", "-c", script)...)
		if r.Code != 0 {
			t.Fatalf("%v: exit %d: %s", flags, r.Code, r.Stderr)
		}
		lines := strings.Split(strings.TrimSuffix(r.Stdout, "\n"), "\n")
		if len(lines) != 6 {
			t.Fatalf("%v: %d lines, want 6", flags, len(lines))
		}
		for _, l := range lines {
			if len(flags) > 0 {
				l = l[4:] // "[r] "
			}
			if len(l) != n || strings.Count(l, l[:1]) != n {
				t.Fatalf("%v: a line of %d bytes mixes ranks: %q...", flags, len(l), l[:min(len(l), 80)])
			}
		}
	}
}

// markedNamed lists the job's processes whose command name is comm.
func (j *job) markedNamed(comm string) []int {
	var out []int
	for _, p := range testkit.MarkedProcs(j.Marker) {
		if pr, err := testkit.ReadProc(p); err == nil && pr.Comm == comm {
			out = append(out, p)
		}
	}
	return out
}

// What ranks start (a wrapper script's program, forked helpers) goes with
// them, whichever of gompiexec and proxy is SIGKILLed.
func TestRankChildrenGoWhenLauncherOrProxyKilled(t *testing.T) {
	for _, victim := range []string{"gompi-proxy", "gompiexec"} {
		t.Run(victim, func(t *testing.T) {
			j := newJob(t, "", "-n", "2", "/bin/sh", "-c", "sleep 300 & sleep 301; echo never")
			j.startJob()
			for deadline := time.Now().Add(20 * time.Second); len(j.markedNamed("sleep")) < 4; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("ranks' children never started: %v", j.markedNamed("sleep"))
				}
			}
			pid := j.Cmd.Process.Pid
			if victim == "gompi-proxy" {
				ps := childrenNamed(j.Cmd.Process.Pid, "gompi-proxy")
				if len(ps) != 1 {
					t.Fatalf("proxies %v", ps)
				}
				pid = ps[0]
			}
			syscall.Kill(pid, syscall.SIGKILL)
			j.wait(20 * time.Second)
			j.assertNoLeftovers(5 * time.Second)
		})
	}
}

// A rank that exits while a detached child still holds its stdout does
// not keep the job alive; the child is ended with the job.
func TestDetachedChildDoesNotHoldJob(t *testing.T) {
	j := newJob(t, "", "-n", "1", "/bin/sh", "-c", "sleep 60 & echo started")
	j.startJob()
	r := j.wait(30 * time.Second) // well before the child's 60 s
	if r.Code != 0 || r.Stdout != "started\n" {
		t.Fatalf("exit %d, stdout %q, stderr %s", r.Code, r.Stdout, r.Stderr)
	}
	j.assertNoLeftovers(5 * time.Second)
}

// The proxy holds no OS thread per rank: its thread count does not grow
// with the ranks it runs.
func TestProxyThreadsDoNotGrowWithRanks(t *testing.T) {
	const n = 300
	j := newJob(t, "", "-n", fmt.Sprint(n), "/bin/sh", "-c", "exec sleep 60")
	j.startJob()
	for deadline := time.Now().Add(60 * time.Second); len(j.markedNamed("sleep")) < n; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d ranks started", len(j.markedNamed("sleep")), n)
		}
	}
	ps := childrenNamed(j.Cmd.Process.Pid, "gompi-proxy")
	if len(ps) != 1 {
		t.Fatalf("proxies %v", ps)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", ps[0]))
	if err != nil {
		t.Fatal(err)
	}
	var threads int
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			fmt.Sscan(v, &threads)
		}
	}
	if threads == 0 || threads > 40 {
		t.Fatalf("gompi-proxy runs %d threads for %d ranks", threads, n)
	}
	syscall.Kill(j.Cmd.Process.Pid, syscall.SIGTERM)
	j.wait(30 * time.Second)
	j.assertNoLeftovers(5 * time.Second)
}

// A count the host cannot start stops at the first failure with one
// message naming the rank, the host and the limit; what started is torn
// down and gompiexec exits 255. The limit here is the open files one.
func TestStartFailureStopsAtFirst(t *testing.T) {
	j := newJob(t, "", "-n", "1000", "/bin/sh", "-c", "exec sleep 60")
	j.Cmd.Path = "/bin/sh"
	j.Cmd.Args = append([]string{"sh", "-c", `ulimit -n 300 && exec "$0" "$@"`, bin("gompiexec")}, j.Cmd.Args[1:]...)
	j.startJob()
	r := j.wait(60 * time.Second)
	if r.Code != 255 || strings.Count(r.Stderr, "gompiexec: rank") != 1 ||
		!strings.Contains(r.Stderr, "could not start") || !strings.Contains(r.Stderr, "on localhost") ||
		!strings.Contains(r.Stderr, "RLIMIT_NOFILE 300") || !strings.Contains(r.Stderr, "(NOT STARTED) RUNNING AT localhost") {
		t.Fatalf("exit %d, stderr:\n%s", r.Code, r.Stderr)
	}
	j.assertNoLeftovers(5 * time.Second)
}

// Shared-memory rendezvous files left by a job whose ranks were killed
// during connection set-up are swept when the next job starts; a live
// job's file is not touched.
func TestDeadJobsShmSweptAtNextJob(t *testing.T) {
	dir := t.TempDir()
	start := func(job string) (*exec.Cmd, string) {
		cmd := exec.Command(bin("rankprog"), "shmcreate", dir, job)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		path := filepath.Join(dir, "gompi-"+job+"-0-1")
		// Wait for the creator's pid in the header (docs/shm.md: offset 24).
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if b, err := os.ReadFile(path); err == nil && len(b) > 28 && (b[24]|b[25]|b[26]|b[27]) != 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never appeared", path)
			}
		}
		return cmd, path
	}
	deadCmd, dead := start("deadjob.k1")
	_, live := start("livejob.k2")
	deadCmd.Process.Kill()
	deadCmd.Wait()
	r := runJob(t, "", "-genv", "GOMPI_SHM_DIR", dir, "-n", "1", "/bin/true")
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	if _, err := os.Stat(dead); err == nil {
		t.Error("the dead job's segment was not swept")
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("the live job's segment was removed: %v", err)
	}
}

// A rank that spoke PMI and exits 0 without finalize has failed (Hydra's
// rule, docs/pmi.md), over PMI_FD and over PMI_PORT alike: there the
// connection names its rank only with initack.
func TestExitWithoutFinalizeFails(t *testing.T) {
	script := `
if [ -n "$PMI_PORT" ]; then
	exec 3<>/dev/tcp/${PMI_PORT%:*}/${PMI_PORT##*:}
	printf 'cmd=initack pmiid=%s\n' "$PMI_ID" >&3
	for i in 1 2 3 4; do IFS= read -r REPLY <&3; done
fi
printf 'cmd=init pmi_version=1 pmi_subversion=1\n' >&3
IFS= read -r REPLY <&3
exit 0
`
	for _, mode := range []string{"-l", "-pmi-port"} {
		t.Run(mode, func(t *testing.T) {
			r := runJob(t, "", mode, "-n", "1", "/bin/bash", "-c", script)
			if r.Code != 1 || !strings.Contains(r.Stderr, "exited without calling MPI_Finalize") {
				t.Fatalf("exit %d, stderr:\n%s", r.Code, r.Stderr)
			}
		})
	}
}

// A SIGTERM to the proxy itself (a shutdown; under Slurm, scancel or the
// time limit) gives its ranks SIGTERM and the grace period: their
// handlers run and what they print arrives. The proxy used to SIGKILL
// them at once.
func TestProxySIGTERMLetsRanksSave(t *testing.T) {
	j := newJob(t, "", "-n", "2", "/bin/sh", "-c", `trap 'echo "rank $PMI_RANK saved"; exit 3' TERM; echo ready; while :; do sleep 0.05; done`)
	j.startJob()
	for deadline := time.Now().Add(20 * time.Second); strings.Count(j.Stdout.String(), "ready\n") < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("ranks not ready: %q", j.Stdout.String())
		}
	}
	ps := childrenNamed(j.Cmd.Process.Pid, "gompi-proxy")
	if len(ps) != 1 {
		t.Fatalf("proxies %v", ps)
	}
	syscall.Kill(ps[0], syscall.SIGTERM)
	r := j.wait(20 * time.Second)
	if !strings.Contains(r.Stdout, "rank 0 saved\n") || !strings.Contains(r.Stdout, "rank 1 saved\n") || r.Code == 0 {
		t.Fatalf("exit %d, stdout %q, stderr %s", r.Code, r.Stdout, r.Stderr)
	}
	j.assertNoLeftovers(5 * time.Second)
}
