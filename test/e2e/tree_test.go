package e2e

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gompi/gompi/internal/testkit"
)

// Seven hosts with -fanout 2: gompiexec starts the proxies of h0 and h3;
// h0's starts h1 and h2, h3's starts h4 and h5, and h5's starts h6, so the
// checks below cross one or two intermediate proxies. Ranks: 0-1 on h0,
// 2 h1, 3 h2, 4 h3, 5-6 h4, 7 h5, 8 h6.
const treeHosts = "h0:2,h1,h2,h3,h4:2,h5,h6"

// procEnv returns one variable of a live process's environment.
func procEnv(pid int, key string) string {
	env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	for _, kv := range bytes.Split(env, []byte{0}) {
		if k, v, ok := strings.Cut(string(kv), "="); ok && k == key {
			return v
		}
	}
	return ""
}

// proxiesOf lists the live gompi-proxy processes of a job.
func (j *job) proxies() []int {
	var out []int
	for _, p := range testkit.MarkedProcs(j.Marker) {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p)); strings.TrimSpace(string(b)) == "gompi-proxy" {
			out = append(out, p)
		}
	}
	return out
}

func TestTreeLaunchPlacesEveryRank(t *testing.T) {
	j := newJob(t, "", "-launcher", "fork", "-hosts", treeHosts, "-fanout", "2", "-n", "9", bin("rankprog"), "sleep", "60s")
	j.startJob()
	ranks := j.waitRanks(9)
	if all, direct := j.proxies(), childrenNamed(j.Cmd.Process.Pid, "gompi-proxy"); len(all) != 7 || len(direct) != 2 {
		t.Fatalf("want 7 proxies, 2 of them started by gompiexec; have %d and %d", len(all), len(direct))
	}
	// Each rank's parent is a proxy; ranks on one host share it.
	parent := map[string]int{}
	for _, pid := range ranks {
		p, _ := testkit.ReadProc(pid)
		parent[procEnv(pid, "PMI_RANK")+"/"+procEnv(pid, "MPI_LOCALRANKID")] = p.PPid
	}
	if parent["0/0"] != parent["1/1"] || parent["5/0"] != parent["6/1"] || parent["2/0"] == parent["3/0"] {
		t.Fatalf("ranks not grouped by host: %v", parent)
	}
	syscall.Kill(j.Cmd.Process.Pid, syscall.SIGTERM)
	r := j.wait(15 * time.Second)
	if r.Code == 0 {
		t.Fatalf("SIGTERM'd job exited 0")
	}
	j.assertNoLeftovers(3 * time.Second)
}

func TestTreeLaunchOutputStdinAndFences(t *testing.T) {
	r := runJob(t, "", "-launcher", "fork", "-hosts", treeHosts, "-fanout", "2", "-l", "-n", "9", bin("rankprog"), "env")
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	for _, want := range []string{"[0] rank=0 size=9 local=0/2", "[1] rank=1 size=9 local=1/2", "[4] rank=4 size=9 local=0/1",
		"[5] rank=5 size=9 local=0/2", "[6] rank=6 size=9 local=1/2", "[8] rank=8 size=9 local=0/1"} {
		if !strings.Contains(r.Stdout, want) {
			t.Fatalf("missing %q in\n%s", want, r.Stdout)
		}
	}
	input := strings.Repeat("tree stdin\n", 5000)
	r = runJob(t, input, "-launcher", "fork", "-hosts", treeHosts, "-fanout", "2", "-n", "9", bin("rankprog"), "cat")
	if r.Code != 0 || !strings.Contains(r.Stdout, fmt.Sprintf("rank 0 read %d bytes", len(input))) ||
		!strings.Contains(r.Stdout, "rank 8 read 0 bytes") {
		t.Fatalf("exit %d, stdout tail %q, stderr %s", r.Code, tail(r.Stdout), r.Stderr)
	}
	// The Go PMI client fences and reads every rank's key through the tree.
	r = runJob(t, "", "-launcher", "fork", "-hosts", treeHosts, "-fanout", "2", "-n", "9", bin("hello"))
	if r.Code != 0 || strings.Count(r.Stdout, "hello from rank") != 9 || !strings.Contains(r.Stdout, "rank 8 of 9") {
		t.Fatalf("hello over a tree: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
}

func tail(s string) string {
	if len(s) > 300 {
		return s[len(s)-300:]
	}
	return s
}

func TestTreeDeepRankKilledEndsJob(t *testing.T) {
	j := newJob(t, "", "-launcher", "fork", "-hosts", treeHosts, "-fanout", "2", "-n", "9", bin("rankprog"), "sleep", "60s")
	j.startJob()
	ranks := j.waitRanks(9)
	victim := -1
	for _, pid := range ranks {
		if procEnv(pid, "PMI_RANK") == "8" { // host h6, two levels below gompiexec
			victim = pid
		}
	}
	killed := time.Now()
	syscall.Kill(victim, syscall.SIGKILL)
	r := j.wait(10 * time.Second)
	if d := time.Since(killed); d > 2*time.Second {
		t.Fatalf("job took %s to end after a deep rank was SIGKILLed", d)
	}
	if r.Code != 128+9 || !strings.Contains(r.Stderr, "KILLED BY SIGNAL: 9") || !strings.Contains(r.Stderr, "h6") {
		t.Fatalf("exit %d, stderr %s", r.Code, r.Stderr)
	}
	j.assertNoLeftovers(3 * time.Second)
}

func TestTreeMiddleProxyKilledEndsJob(t *testing.T) {
	j := newJob(t, "", "-launcher", "fork", "-hosts", treeHosts, "-fanout", "2", "-n", "9", bin("rankprog"), "sleep", "60s")
	j.startJob()
	j.waitRanks(9)
	// h5 is started by h3's proxy and starts h6's: find it by its rank's parent.
	var mid int
	for _, pid := range testkit.MarkedProcs(j.Marker) {
		if procEnv(pid, "PMI_RANK") == "7" {
			p, _ := testkit.ReadProc(pid)
			mid = p.PPid
		}
	}
	if len(childrenNamed(mid, "gompi-proxy")) != 1 {
		t.Fatalf("proxy %d of h5 should have started h6's proxy", mid)
	}
	killed := time.Now()
	syscall.Kill(mid, syscall.SIGKILL)
	r := j.wait(10 * time.Second)
	if d := time.Since(killed); d > 3*time.Second {
		t.Fatalf("job took %s to end after a middle proxy was SIGKILLed", d)
	}
	if r.Code == 0 || !strings.Contains(r.Stderr, "lost connection to gompi-proxy on h5") {
		t.Fatalf("exit %d, stderr %s", r.Code, r.Stderr)
	}
	j.assertNoLeftovers(3 * time.Second)
}

func TestTreeLauncherKilledLeavesNothing(t *testing.T) {
	j := newJob(t, "", "-launcher", "fork", "-hosts", treeHosts, "-fanout", "2", "-n", "9", bin("rankprog"), "sleep", "60s")
	j.startJob()
	j.waitRanks(9)
	syscall.Kill(j.Cmd.Process.Pid, syscall.SIGKILL)
	<-j.Done()
	j.assertNoLeftovers(3 * time.Second)
}
