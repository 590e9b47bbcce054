package cluster_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gompi/gompi/internal/launcher"
	"github.com/gompi/gompi/internal/testkit"
	"github.com/gompi/gompi/test/cluster"
)

// launchMode is how gompiexec reaches the cluster's hosts. Every test runs
// through `mode`, so moving them all to another backend is a one-line
// change below (or GOMPI_CLUSTER_LAUNCHER=ssh for one run).
type launchMode struct {
	name string
	// openssh: failures are reported by OpenSSH's ssh client, whose
	// messages the tests may assert on verbatim.
	openssh bool
	args    func(cl *cluster.Client) []string
	// persist: jobs leave persistent proxies behind by design; any other
	// process left on a host is still a leftover.
	persist bool
}

// rshAgent runs OpenSSH's ssh through a small agent script (cl.Agent,
// `ssh -F <client>/.ssh/config -x -T "$@"`), given to -launcher-exec the
// way a `kubectl exec` wrapper is: this is also the rsh-agent-mode test.
var rshAgent = launchMode{"rsh-agent", true, func(cl *cluster.Client) []string {
	return []string{"-launcher-exec", cl.Agent}
}, false}

// builtinSSH is gompiexec's built-in SSH client (golang.org/x/crypto/ssh),
// which reads $HOME/.ssh/{config,known_hosts,id_ed25519}; the tests set
// HOME to the client's directory. The gompi binaries are on the shared
// filesystem, so no proxy upload is needed.
var builtinSSH = launchMode{"ssh", false, func(cl *cluster.Client) []string {
	return []string{"-launcher", "ssh", "-no-proxy-upload"}
}, false}

// persistentSSH is builtinSSH with persistent proxies: the first job on a
// host starts one, later jobs reach it without a login
// (persist_test.go).
var persistentSSH = launchMode{"ssh-persist", false, func(cl *cluster.Client) []string {
	return []string{"-launcher", "ssh", "-no-proxy-upload", "-proxy-persist", "120"}
}, true}

// mode is the backend every test uses. Switch to builtinSSH once the
// built-in client has merged (the assertions marked "tightens with the
// built-in backend" can then check its messages).
var mode = builtinSSH

var (
	binDir   string // gompiexec, gompi-proxy, nodeprog, hello, hostring: on the shared filesystem
	mpiccErr error  // why hostring was not built
	skipWhy  error  // why no cluster can be built here

	shared     *cluster.Cluster
	sharedErr  error
	sharedOnce sync.Once
)

func TestMain(m *testing.M) {
	switch os.Getenv("GOMPI_CLUSTER_LAUNCHER") {
	case "ssh":
		mode = builtinSSH
	case "rsh-agent":
		mode = rshAgent
	}
	if skipWhy = cluster.Check(); skipWhy != nil {
		os.Exit(m.Run()) // every test skips, naming the reason
	}
	// Not under /tmp: every host has its own /tmp.
	dir, err := os.MkdirTemp("/var/tmp", "gompi-cluster-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	// cluster.New removes the directory if this process dies before its end.
	os.WriteFile(filepath.Join(dir, "owner.pid"), []byte(strconv.Itoa(os.Getpid())), 0o644)
	if err := testkit.Build(dir, testkit.Pkg("cmd/gompiexec"), testkit.Pkg("cmd/gompi-proxy"),
		testkit.Pkg("test/cluster/progs/nodeprog"), testkit.Pkg("examples/hello"), testkit.Pkg("examples/heat")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	if _, err := exec.LookPath("mpicc"); err != nil {
		mpiccErr = fmt.Errorf("mpicc not found (run test/setup.sh as root to install mpich and libmpich-dev)")
	} else {
		for name, src := range map[string]string{"hostring": "progs/hostring.c", "place": "progs/place.c", "fail": "progs/fail.c", "abort": "../mpich/progs/abort.c"} {
			if out, err := exec.Command("mpicc", "-O2", "-o", bin(name), src).CombinedOutput(); err != nil {
				mpiccErr = fmt.Errorf("mpicc %s: %v\n%s", src, err, out)
			}
		}
	}
	code := m.Run()
	if slurmS != nil {
		slurmS.Stop()
	}
	if slurmC != nil {
		slurmC.Close()
	}
	if shared != nil {
		if err := shared.Close(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

func bin(name string) string { return filepath.Join(binDir, name) }

// setup returns the cluster all tests share (built on first use, torn down
// by TestMain) after checking it is idle; the test's cleanup kills
// whatever the test left, so one failure does not spill into the next.
func setup(t *testing.T) *cluster.Cluster {
	t.Helper()
	if skipWhy != nil {
		if os.Getenv("CI") != "" || os.Getenv("GOMPI_REQUIRE_CLUSTER") != "" {
			t.Fatalf("test cluster unavailable: %v", skipWhy)
		}
		t.Skipf("test cluster unavailable: %v (set GOMPI_REQUIRE_CLUSTER=1 to make this an error)", skipWhy)
	}
	sharedOnce.Do(func() {
		shared, sharedErr = cluster.New(cluster.Config{Hosts: 3, Logf: func(f string, a ...any) {
			fmt.Fprintf(os.Stderr, f+"\n", a...)
		}})
	})
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	c := shared
	if err := waitClean(c, 5*time.Second); err != nil {
		t.Fatalf("cluster not idle before the test: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, h := range c.Hosts {
				b, _ := os.ReadFile(h.Log)
				if len(b) > 1500 {
					b = b[len(b)-1500:]
				}
				t.Logf("sshd log of %s (%s), tail:\n%s", h.Name, h.Addr, b)
			}
		}
		// Persistent proxies live on from test to test (that is the
		// point), unless something went wrong.
		if !mode.persist || t.Failed() {
			c.KillAll()
		}
	})
	return c
}

type result = testkit.Result

// job is one gompiexec run against the cluster. Its marker is in the
// environment of gompiexec (so of its local ssh agents) and of every rank
// (-genv), so leftovers are found wherever they run.
type job struct {
	*testkit.Job
	t *testing.T
	c *cluster.Cluster
}

// startJob starts gompiexec with the mode's launcher arguments for client
// cl, then args. Ranks run in binDir (the shared filesystem).
func startJob(t *testing.T, c *cluster.Cluster, cl *cluster.Client, stdin string, args ...string) *job {
	t.Helper()
	marker := testkit.NewMarker("gompi-cluster-test")
	full := append(mode.args(cl), "-genv", testkit.MarkerVar, marker, "-proxy-path", bin("gompi-proxy"), "-wdir", binDir)
	full = append(full, args...)
	j := &job{Job: testkit.NewJob(marker, stdin, bin("gompiexec"), full...), t: t, c: c}
	j.Cmd.Env = append(j.Cmd.Env, cl.Env()...)
	// -wdir is a program segment's own (as Hydra's): later MPMD segments
	// run where gompiexec does, which must be on the shared filesystem too
	// (the test's own directory may be in /tmp, private to each host).
	j.Cmd.Dir = binDir
	// Pdeathsig: if the test binary dies, so does the job (its hosts are
	// then cleaned by the next cluster.New).
	j.Cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := j.StartWith(launcher.StartLocked); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(j.Kill)
	t.Logf("gompiexec %s", strings.Join(full, " "))
	return j
}

// wait waits up to limit for gompiexec to exit.
func (j *job) wait(limit time.Duration) result {
	j.t.Helper()
	return j.MustWait(j.t, limit)
}

// runJob runs a job to completion and checks nothing of it is left.
func runJob(t *testing.T, c *cluster.Cluster, cl *cluster.Client, stdin string, args ...string) result {
	t.Helper()
	j := startJob(t, c, cl, stdin, args...)
	r := j.wait(60 * time.Second)
	t.Logf("exit %d after %s", r.Code, r.Elapsed.Round(time.Millisecond))
	j.assertNoLeftovers(5 * time.Second)
	return r
}

// assertNoLeftovers fails unless, within d, no process of the job is alive
// anywhere: on every host nothing but the listening sshd (no sshd session,
// proxy or rank), and in the root namespace no marked process (ssh agent).
func (j *job) assertNoLeftovers(d time.Duration) {
	j.t.Helper()
	if err := waitClean(j.c, d); err != nil {
		j.t.Fatal(err)
	}
	if left := testkit.WaitGone(d, func() []int { return testkit.MarkedProcs(j.Marker) }); left != nil {
		j.t.Fatalf("processes of the job still alive after %s: %v", d, left)
	}
}

// waitClean waits up to d for every host to run nothing but its sshd (and,
// in a persistent mode, its persistent proxies).
func waitClean(c *cluster.Cluster, d time.Duration) error {
	if mode.persist {
		return c.WaitNoLeftoversButPersistent(d)
	}
	return c.WaitNoLeftovers(d)
}

// waitReady waits until n ranks have printed "ready".
func (j *job) waitReady(n int) {
	j.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(j.Stdout.String(), " ready\n") < n {
		select {
		case <-j.Done():
			j.t.Fatalf("job ended before %d ranks were ready: stdout %q stderr %q", n, j.Stdout.String(), j.Stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			j.t.Fatalf("only %d of %d ranks ready: stdout %q stderr %q", strings.Count(j.Stdout.String(), " ready\n"), n, j.Stdout.String(), j.Stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
