// Package faults SIGKILLs ranks, proxies and gompiexec at random moments of
// many jobs (Go runtime ranks and MPICH ranks, each with a child of its
// own) and checks that nothing of them is left: no process, no
// shared-memory segment, and so no socket (sockets live only in processes;
// the runtime's segments go to a directory of this test's own).
package faults

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gompi/gompi/internal/testkit"
)

var binDir string

func TestMain(m *testing.M) {
	os.Exit(testkit.MainWithBinaries(m, &binDir, "gompi-faults-",
		testkit.Pkg("cmd/gompiexec"), testkit.Pkg("cmd/gompi-proxy"),
		testkit.Pkg("test/faults/progs/faultprog")))
}

func bin(name string) string { return filepath.Join(binDir, name) }

// mpichProg builds progs/spin.c with mpicc; "" when MPICH is missing
// outside CI.
func mpichProg(t *testing.T) string {
	if _, err := exec.LookPath("mpicc"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("mpicc not found (test/setup.sh installs mpich and libmpich-dev)")
		}
		t.Log("mpicc not found: Go runtime ranks only")
		return ""
	}
	out := filepath.Join(t.TempDir(), "spin")
	if b, err := exec.Command("mpicc", "-O2", "-o", out, "progs/spin.c").CombinedOutput(); err != nil {
		t.Fatalf("mpicc: %v\n%s", err, b)
	}
	return out
}

// kinds of victim
const (
	victimRank = iota
	victimProxy
	victimLauncher
	victimNone
)

var victimNames = []string{"rank", "proxy", "gompiexec", "nobody"}

type outcome struct {
	victim int
	killed bool // the victim was found alive and killed
}

// oneJob runs a job, SIGKILLs its victim after delay and checks that every
// process of the job is gone afterwards.
func oneJob(t *testing.T, shmDir string, argv []string, victim int, delay time.Duration) outcome {
	marker := testkit.NewMarker("gompi-fault")
	args := append([]string{"-genv", testkit.MarkerVar, marker, "-genv", "GOMPI_SHM_DIR", shmDir, "-grace", "1"}, argv...)
	j := testkit.NewJob(marker, "", bin("gompiexec"), args...)
	j.Cmd.Env = append(j.Cmd.Env, "UCX_NET_DEVICES=lo")
	defer testkit.KillMarked(marker)
	if err := j.Start(); err != nil {
		t.Error(err)
		return outcome{victim: victim}
	}
	o := outcome{victim: victim}
	select {
	case <-j.Done():
	case <-time.After(delay):
		o.killed = kill(j, victim)
	}
	if _, err := j.Wait(60 * time.Second); err != nil {
		t.Errorf("%s killed after %v: %v", victimNames[victim], delay, err)
		return o
	}
	left := testkit.WaitGone(10*time.Second, func() []int { return testkit.MarkedProcs(marker) })
	if left != nil {
		var desc []string
		for _, p := range left {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
			desc = append(desc, fmt.Sprintf("%d %q", p, strings.ReplaceAll(string(b), "\x00", " ")))
		}
		t.Errorf("%s of %v killed after %v: processes left: %s", victimNames[victim], argv, delay, strings.Join(desc, "; "))
	}
	return o
}

// kill SIGKILLs one process of the kind victim; it reports whether one was
// there to kill.
func kill(j *testkit.Job, victim int) bool {
	pid := 0
	switch victim {
	case victimLauncher:
		pid = j.Cmd.Process.Pid
	case victimProxy, victimRank:
		var cands []int
		for _, p := range testkit.MarkedProcs(j.Marker) {
			pr, err := testkit.ReadProc(p)
			if err != nil {
				continue
			}
			cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
			// Not the guard of the ranks' group (gompi-proxy -guard), which
			// bears the proxy's name until it renames itself.
			isProxy := pr.Comm == "gompi-proxy" && !strings.Contains(string(cmdline), "-guard")
			isRank := pr.Comm == "faultprog" || pr.Comm == "spin"
			if (victim == victimProxy && isProxy) || (victim == victimRank && isRank) {
				cands = append(cands, p)
			}
		}
		if len(cands) == 0 {
			return false
		}
		pid = cands[rand.IntN(len(cands))]
	default:
		return false
	}
	return syscall.Kill(pid, syscall.SIGKILL) == nil
}

func TestFaultInjection(t *testing.T) {
	jobs := 200
	if testing.Short() {
		jobs = 24
	}
	spin := mpichProg(t)
	shmDir := t.TempDir()
	type spec struct {
		argv   []string
		victim int
		delay  time.Duration
	}
	var specs []spec
	for i := 0; i < jobs; i++ {
		n := fmt.Sprint(2 + rand.IntN(3))
		argv := []string{"-n", n, bin("faultprog")}
		switch {
		case spin != "" && i%2 == 1:
			argv = []string{"-n", n, spin}
		case i%4 == 2:
			// Two proxies on this host (fork launcher), so a proxy's
			// loss is another proxy's job to report.
			argv = append([]string{"-launcher", "fork", "-hosts", "nodeA,nodeB"}, argv...)
		}
		if i%8 == 4 || i%8 == 5 {
			argv = append([]string{"-pmi-port"}, argv...) // a listener in the proxy too
		}
		specs = append(specs, spec{argv, i % 4, time.Duration(rand.IntN(800)) * time.Millisecond})
	}
	// Four jobs at a time: the whole run stays within about two minutes
	// on two loaded cores.
	var mu sync.Mutex
	counts := map[string]int{}
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	for _, s := range specs {
		wg.Add(1)
		sem <- struct{}{}
		go func(s spec) {
			defer wg.Done()
			defer func() { <-sem }()
			o := oneJob(t, shmDir, s.argv, s.victim, s.delay)
			mu.Lock()
			if o.killed {
				counts[victimNames[o.victim]]++
			}
			mu.Unlock()
		}(s)
	}
	wg.Wait()
	t.Logf("%d jobs; SIGKILLed while running: %v", jobs, counts)
	// Segments that killed ranks left during connection set-up go when the
	// next job starts on the host: one more job, then none may be left.
	oneJob(t, shmDir, []string{"-n", "2", bin("faultprog")}, victimNone, 0)
	ents, _ := os.ReadDir(shmDir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if len(names) > 0 {
		t.Errorf("shared-memory segments left in %s: %v", shmDir, names)
	}
}
