package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gompi/gompi/hostfile"
	"github.com/gompi/gompi/internal/mpiexec"

	"github.com/gompi/gompi/internal/testkit"
)

func TestRankKilledEndsJob(t *testing.T) {
	j := newJob(t, "", "-n", "4", bin("rankprog"), "sleep", "60s")
	j.startJob()
	ranks := j.waitRanks(4)
	killed := time.Now()
	syscall.Kill(ranks[1], syscall.SIGKILL)
	r := j.wait(10 * time.Second)
	if d := time.Since(killed); d > 2*time.Second {
		t.Fatalf("job took %s to end after a rank was SIGKILLed", d)
	}
	if r.Code != 128+9 || !strings.Contains(r.Stderr, "KILLED BY SIGNAL: 9") {
		t.Fatalf("exit %d, stderr %s", r.Code, r.Stderr)
	}
	j.assertNoLeftovers(2 * time.Second)
}

func TestLauncherKilledLeavesNoRank(t *testing.T) {
	j := newJob(t, "", "-n", "4", bin("rankprog"), "sleep", "60s")
	j.startJob()
	j.waitRanks(4)
	syscall.Kill(j.Cmd.Process.Pid, syscall.SIGKILL)
	<-j.Done()
	j.assertNoLeftovers(2 * time.Second)
}

func TestProxyKilledEndsJob(t *testing.T) {
	j := newJob(t, "", "-n", "4", bin("rankprog"), "sleep", "60s")
	j.startJob()
	j.waitRanks(4)
	proxies := childrenNamed(j.Cmd.Process.Pid, "gompi-proxy")
	if len(proxies) != 1 {
		t.Fatalf("want 1 proxy, found %v", proxies)
	}
	killed := time.Now()
	syscall.Kill(proxies[0], syscall.SIGKILL)
	r := j.wait(10 * time.Second)
	if d := time.Since(killed); d > 2*time.Second {
		t.Fatalf("job took %s to end after the proxy was SIGKILLed", d)
	}
	if r.Code == 0 || !strings.Contains(r.Stderr, "lost connection to gompi-proxy on localhost") {
		t.Fatalf("exit %d, stderr %s", r.Code, r.Stderr)
	}
	j.assertNoLeftovers(2 * time.Second)
}

func TestSignalsReachRanks(t *testing.T) {
	// SIGQUIT (Ctrl-\) too, as Hydra forwards it: gompiexec used to die of
	// it with a Go stack dump (exit 2).
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGUSR1, syscall.SIGQUIT} {
		t.Run(sig.String(), func(t *testing.T) {
			j := newJob(t, "", "-n", "3", bin("rankprog"), "trap")
			j.startJob()
			j.waitRanks(3)
			syscall.Kill(j.Cmd.Process.Pid, sig)
			r := j.wait(10 * time.Second)
			for _, rk := range []string{"0", "1", "2"} {
				if !strings.Contains(r.Stdout, "rank "+rk+" got "+sig.String()) {
					t.Fatalf("rank %s did not get %v: %q", rk, sig, r.Stdout)
				}
			}
			if r.Code != 130 {
				t.Fatalf("exit %d, want the ranks' 130; stderr %s", r.Code, r.Stderr)
			}
			j.assertNoLeftovers(2 * time.Second)
		})
	}
}

func TestSecondSIGINTKillsJob(t *testing.T) {
	j := newJob(t, "", "-n", "2", bin("rankprog"), "trapstay")
	j.startJob()
	j.waitRanks(2)
	syscall.Kill(j.Cmd.Process.Pid, syscall.SIGINT)
	deadline := time.Now().Add(5 * time.Second)
	for strings.Count(j.Stdout.String(), "got interrupt") < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	syscall.Kill(j.Cmd.Process.Pid, syscall.SIGINT)
	r := j.wait(10 * time.Second)
	if strings.Count(r.Stdout, "got interrupt") != 2 {
		t.Fatalf("first SIGINT not forwarded: %q", r.Stdout)
	}
	if r.Code != 128+2 || !strings.Contains(r.Stderr, "Ctrl-C caught again") {
		t.Fatalf("exit %d, stderr %s", r.Code, r.Stderr)
	}
	j.assertNoLeftovers(2 * time.Second)
}

func TestTermIgnoredRankIsKilledAfterGrace(t *testing.T) {
	j := newJob(t, "", "-grace", "0.5", "-n", "3", bin("rankprog"), "ignoreterm")
	j.startJob()
	ranks := j.waitRanks(3)
	syscall.Kill(ranks[0], syscall.SIGKILL)
	r := j.wait(10 * time.Second)
	if r.Code != 137 || r.Elapsed > 5*time.Second {
		t.Fatalf("exit %d after %s, stderr %s", r.Code, r.Elapsed, r.Stderr)
	}
	j.assertNoLeftovers(2 * time.Second)
}

// A SIGTERM (or SIGHUP) to gompiexec that ranks ignore ends with their
// SIGKILL after the grace period: the job was killed, so gompiexec exits
// 128+signal, as when the ranks die of the forwarded signal itself, not 0.
func TestLauncherSignalIgnoredByRanksIsNotSuccess(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			j := newJob(t, "", "-grace", "0.5", "-n", "2", bin("rankprog"), "ignoreterm")
			j.startJob()
			j.waitRanks(2)
			syscall.Kill(j.Cmd.Process.Pid, sig)
			r := j.wait(10 * time.Second)
			if r.Code != 128+int(sig) || !strings.Contains(r.Stderr, "2 rank(s) still running 500ms after SIG") {
				t.Fatalf("exit %d, want %d; stderr %s", r.Code, 128+int(sig), r.Stderr)
			}
			j.assertNoLeftovers(2 * time.Second)
		})
	}
}

// Ranks killed because they outlived a forwarded SIGTERM lose nothing they
// wrote before: each writes a line to stdout, then the same line to a file,
// and every line in the file must be in gompiexec's output.
func TestSignalOutlivedLosesNoOutput(t *testing.T) {
	dir := t.TempDir()
	script := `trap '' TERM; i=0; echo ready; while :; do i=$((i+1)); echo "r$PMI_RANK line $i"; echo "r$PMI_RANK line $i" >>"$0.$PMI_RANK"; done`
	j := newJob(t, "", "-grace", "0.2", "-n", "2", "/bin/bash", "-c", script, filepath.Join(dir, "log"))
	j.startJob()
	for deadline := time.Now().Add(20 * time.Second); strings.Count(j.Stdout.String(), "ready") < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("ranks did not start: %q", j.Stderr.String())
		}
	}
	time.Sleep(200 * time.Millisecond) // let them write
	syscall.Kill(j.Cmd.Process.Pid, syscall.SIGTERM)
	r := j.wait(20 * time.Second)
	if r.Code != 143 || !strings.Contains(r.Stderr, "still running 200ms after SIGTERM") {
		t.Fatalf("exit %d, stderr %s", r.Code, r.Stderr)
	}
	got := map[string]bool{}
	for _, l := range strings.Split(r.Stdout, "\n") {
		got[l] = true
	}
	for rank := 0; rank < 2; rank++ {
		b, err := os.ReadFile(filepath.Join(dir, "log."+strconv.Itoa(rank)))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
		lost := 0
		for _, l := range lines {
			if !got[l] {
				lost++
			}
		}
		if lost > 0 {
			t.Errorf("rank %d: %d of %d lines written before the kill are missing from the output", rank, lost, len(lines))
		}
	}
	j.assertNoLeftovers(2 * time.Second)
}

func TestTimeout(t *testing.T) {
	for _, viaEnv := range []bool{false, true} {
		args := []string{"-timeout", "1", "-n", "2", bin("rankprog"), "sleep", "60s"}
		if viaEnv {
			t.Setenv("MPIEXEC_TIMEOUT", "1")
			args = args[2:]
		}
		j := newJob(t, "", args...)
		j.startJob()
		r := j.wait(15 * time.Second)
		if r.Code != mpiexec.ExitTimeout || !strings.Contains(r.Stderr, "APPLICATION TIMED OUT") {
			t.Fatalf("env=%v: exit %d, stderr %s", viaEnv, r.Code, r.Stderr)
		}
		if r.Elapsed < time.Second || r.Elapsed > 5*time.Second {
			t.Fatalf("timeout fired after %s", r.Elapsed)
		}
		j.assertNoLeftovers(2 * time.Second)
	}
}

func countFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestManyJobsNoFDGrowth runs 500 short jobs through the launcher engine in
// this process and checks its open descriptors do not grow.
func TestManyJobsNoFDGrowth(t *testing.T) {
	jobs := 500
	if testing.Short() {
		jobs = 50
	}
	run := func() {
		code, err := mpiexec.Run(context.Background(), mpiexec.Config{
			Segments:  []mpiexec.Segment{{Argv: []string{"/bin/true"}, N: 2, Wdir: "/"}},
			Hosts:     []hostfile.Host{{Name: "localhost", Slots: 2}},
			ProxyPath: bin("gompi-proxy"),
			Stdout:    io.Discard, Stderr: io.Discard,
		})
		if err != nil || code != 0 {
			t.Fatalf("job: code %d err %v", code, err)
		}
	}
	for i := 0; i < 5; i++ { // warm up lazily opened descriptors (epoll, etc.)
		run()
	}
	before := countFDs(t)
	start := time.Now()
	for i := 0; i < jobs; i++ {
		run()
	}
	after := countFDs(t)
	t.Logf("%d jobs in %s (%.1f ms/job); fds %d -> %d", jobs, time.Since(start), float64(time.Since(start).Milliseconds())/float64(jobs), before, after)
	if after > before {
		t.Fatalf("open descriptors grew from %d to %d over %d jobs", before, after, jobs)
	}
}

// A proxy with a heartbeat (as remote proxies get) ends its ranks when the
// launcher stops answering, as after a silent network cut; here gompiexec
// is frozen with SIGSTOP instead.
func TestProxyHeartbeatEndsRanksOfSilentLauncher(t *testing.T) {
	j := newJob(t, "", "-n", "2", bin("rankprog"), "sleep", "60s")
	j.Cmd.Env = append(j.Cmd.Env, "GOMPI_PROXY_HEARTBEAT=500ms")
	j.startJob()
	j.waitRanks(2)
	syscall.Kill(j.Cmd.Process.Pid, syscall.SIGSTOP)
	defer syscall.Kill(j.Cmd.Process.Pid, syscall.SIGKILL)
	stopped := time.Now()
	deadline := stopped.Add(10 * time.Second)
	for {
		left := 0
		for _, p := range testkit.MarkedProcs(j.Marker) {
			if p != j.Cmd.Process.Pid {
				left++
			}
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d processes still alive %s after the launcher froze", left, time.Since(stopped))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("proxy and ranks gone %s after the launcher froze", time.Since(stopped).Round(time.Millisecond))
	syscall.Kill(j.Cmd.Process.Pid, syscall.SIGKILL)
	syscall.Kill(j.Cmd.Process.Pid, syscall.SIGCONT)
	<-j.Done()
}

// A proxy exits as soon as its `done` has left its host, without waiting
// for gompiexec to close the session; gompiexec's writes that come later
// (rank 0's stdin, yamux window updates while it reads the last output)
// fail, and the launcher must still read everything the proxy sent
// (launcher.ReadToEnd). Each job: two proxies, rank 0 reads a little of a
// flowing stdin, every rank prints more than yamux's window right before
// it exits. Without ReadToEnd about one job in ten lost its proxy's last
// frames ("lost connection to gompi-proxy", output cut short).
func TestProxyExitLosesNoOutput(t *testing.T) {
	jobs := 40
	if testing.Short() {
		jobs = 10
	}
	const each = 600000
	stdin := strings.Repeat("y\n", 2<<20)
	prog := "head -c 1000 >/dev/null; yes abcdefghij | head -c " + strconv.Itoa(each)
	for i := 0; i < jobs; i++ {
		r := runJob(t, stdin, "-launcher", "fork", "-hosts", "nodeA,nodeB", "-n", "2", "/bin/sh", "-c", prog)
		if r.Code != 0 || len(r.Stdout) != 2*each {
			t.Fatalf("job %d: exit %d, %d bytes of output, want %d; stderr %s", i, r.Code, len(r.Stdout), 2*each, r.Stderr)
		}
	}
}

// `nohup gompiexec ...` (and a shell's background jobs, whose SIGINT and
// SIGQUIT are ignored) keeps what it was started ignoring ignored: a
// hangup must not end the job, as it does not end mpiexec.hydra's.
func TestIgnoredSignalsStayIgnored(t *testing.T) {
	for _, tc := range []struct {
		trap string
		sig  syscall.Signal
	}{{"HUP", syscall.SIGHUP}, {"INT", syscall.SIGINT}} {
		t.Run(tc.trap, func(t *testing.T) {
			marker := testkit.NewMarker("gompi-test")
			// trap '' SIG is what nohup (SIGHUP) and sh's & (SIGINT) do.
			script := fmt.Sprintf(`trap '' %s; exec "$@"`, tc.trap)
			j := &job{Job: testkit.NewJob(marker, "", "/bin/sh", "-c", script, "sh", bin("gompiexec"),
				"-genv", testkit.MarkerVar, marker, "-n", "2", bin("rankprog"), "sleep", "1500ms"), t: t}
			t.Cleanup(func() { testkit.KillMarked(marker) })
			j.startJob()
			j.waitRanks(2)
			syscall.Kill(j.Cmd.Process.Pid, tc.sig)
			r := j.wait(20 * time.Second)
			if r.Code != 0 || strings.Contains(r.Stderr, "BAD TERMINATION") {
				t.Fatalf("SIG%s was ignored when gompiexec started; exit %d, stderr %s", tc.trap, r.Code, r.Stderr)
			}
			j.assertNoLeftovers(2 * time.Second)
		})
	}
}

// A job started in the background of an interactive shell (`gompiexec
// ... &` at a prompt) runs to its end: reading the terminal for rank 0's
// stdin would stop it (SIGTTIN, "Stopped (tty input)") until `fg`, where
// mpiexec.hydra's job completes. Its stdin waits until it is brought to
// the foreground.
func TestBackgroundJobOnTerminal(t *testing.T) {
	scriptBin, err := exec.LookPath("script")
	if err != nil {
		t.Fatalf("util-linux script (a pseudo-terminal for the shell) is missing: %v", err)
	}
	marker := testkit.NewMarker("gompi-test")
	t.Cleanup(func() { testkit.KillMarked(marker) })
	sh := filepath.Join(t.TempDir(), "bg.sh")
	body := fmt.Sprintf("set -m\n%s -genv %s %s -n 2 %s sleep 300ms &\nsleep 3\njobs -l\nkill %%1 2>/dev/null\n",
		bin("gompiexec"), testkit.MarkerVar, marker, bin("rankprog"))
	if err := os.WriteFile(sh, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, scriptBin, "-qc", "bash "+sh, "/dev/null").CombinedOutput()
	got := strings.ReplaceAll(string(out), "\r", "")
	if err != nil || !strings.Contains(got, "Done") || strings.Contains(got, "Stopped") || strings.Count(got, "ready") != 2 {
		t.Fatalf("background job on a terminal (%v):\n%s", err, got)
	}
}
