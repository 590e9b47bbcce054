package cluster_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gompi/gompi/internal/launcher"
	"github.com/gompi/gompi/test/cluster"
)

// daemons returns each host's persistent proxy, failing unless every host
// has exactly one.
func daemons(t *testing.T, c *cluster.Cluster) map[string]int {
	t.Helper()
	pids := map[string]int{}
	for _, h := range c.Hosts {
		ps, err := h.PersistentProxies()
		if err != nil || len(ps) != 1 {
			t.Fatalf("%s: persistent proxies %v (%v), want one", h.Name, ps, err)
		}
		pids[h.Name] = ps[0].PID
	}
	return pids
}

// ranksUnderPersistentProxies checks that on every host the job's proxy,
// the parent of its perHost ranks named name, is a child of the host's
// persistent proxy: no sshd session in between.
func ranksUnderPersistentProxies(t *testing.T, c *cluster.Cluster, name string, perHost int) {
	t.Helper()
	for _, h := range c.Hosts {
		procs, err := h.Procs()
		if err != nil {
			t.Fatal(err)
		}
		ppid := map[int]int{}
		for _, p := range procs {
			ppid[p.PID] = p.PPID
		}
		ds, _ := h.PersistentProxies()
		ranks, _ := h.ProcsNamed(name)
		if len(ds) != 1 || len(ranks) != perHost {
			t.Fatalf("%s runs persistent proxies %v and ranks %v, want 1 and %d", h.Name, ds, ranks, perHost)
		}
		for _, rk := range ranks {
			if got := ppid[rk.PPID]; got != ds[0].PID {
				t.Errorf("%s: rank %d's proxy %d is a child of %d, not of the persistent proxy %d",
					h.Name, rk.PID, rk.PPID, got, ds[0].PID)
			}
		}
	}
}

// TestPersistentProxies runs jobs with -proxy-persist. The first job on
// each host starts its persistent proxy through a login; every later job
// reaches it without one, and must behave exactly like a job started
// through a login: the other tests of this package run again in this mode
// (placement, PMI, MPICH, stdin, exit codes, signals, a killed launcher, a
// killed rank, a cut network, a launch tree), each checking that nothing of the job is
// left on any host, only the persistent proxies.
func TestPersistentProxies(t *testing.T) {
	c := setup(t)
	saved := mode
	mode = persistentSSH
	t.Cleanup(func() {
		mode = saved
		if err := c.StopPersistentProxies(5 * time.Second); err != nil {
			t.Error(err)
		}
	})
	// A record of an earlier run (or of a daemon killed with its
	// cluster) must not matter: the launch falls back to a login.
	r := runJob(t, c, c.Client, "", "-hosts", c.HostList(1), "-n", "3", bin("nodeprog"), "where")
	if r.Code != 0 {
		t.Fatalf("first job: exit %d\n%s", r.Code, r.Stderr)
	}
	first := daemons(t, c)

	t.Run("JobsUseThem", func(t *testing.T) {
		// The proxies of a running job are children of the persistent
		// proxies (no sshd session in between), and SIGKILLing gompiexec
		// still ends every rank within 5 s.
		j := startJob(t, c, c.Client, "", "-hosts", c.HostList(2), "-n", "6", bin("nodeprog"), "sleep", "120s")
		j.waitReady(6)
		ranksUnderPersistentProxies(t, c, "nodeprog", 2)
		at := time.Now()
		syscall.Kill(j.Cmd.Process.Pid, syscall.SIGKILL)
		<-j.Done()
		j.assertNoLeftovers(5 * time.Second)
		t.Logf("all ranks gone %s after SIGKILL", time.Since(at).Round(time.Millisecond))
	})
	for _, tc := range []struct {
		name string
		f    func(*testing.T)
	}{
		{"GoRanksAcrossHosts", TestGoRanksAcrossHosts},
		{"MPICHAcrossHosts", TestMPICHAcrossHosts},
		{"StdinReachesRemoteRankZero", TestStdinReachesRemoteRankZero},
		{"RemoteExitCode", TestRemoteExitCode},
		{"SignalsReachRemoteRanks", TestSignalsReachRemoteRanks},
		{"RemoteRankKilled", TestRemoteRankKilled},
		{"NetworkCut", TestNetworkCut},
		{"TreeLaunchOverSSH", TestTreeLaunchOverSSH},
	} {
		t.Run(tc.name, tc.f)
	}
	if t.Failed() {
		return
	}
	// The same daemons served every job.
	if now := daemons(t, c); fmt.Sprint(now) != fmt.Sprint(first) {
		t.Fatalf("persistent proxies changed from %v to %v", first, now)
	}

	t.Run("ImpostorRefused", func(t *testing.T) {
		// A record whose token the daemon does not know (a socket someone
		// else could have put there) is refused with a warning; the job
		// runs through a login, which records the real token again.
		recs, _ := filepath.Glob(filepath.Join(c.Client.Home, launcher.PersistCacheDir, "*"))
		if len(recs) != len(c.Hosts) {
			t.Fatalf("records %v, want one per host", recs)
		}
		orig := map[string][]byte{}
		for _, f := range recs {
			b, _ := os.ReadFile(f)
			orig[f] = b
			fields := strings.Fields(string(b))
			forged := strings.Join(fields[:len(fields)-1], " ") + " " + strings.Repeat("0", 64) + "\n"
			os.WriteFile(f, []byte(forged), 0o600)
		}
		r := runJob(t, c, c.Client, "", "-hosts", c.HostList(1), "-n", "3", bin("nodeprog"), "where")
		if r.Code != 0 || strings.Count(r.Stderr, "refusing a persistent proxy socket") != len(c.Hosts) {
			t.Fatalf("exit %d, stderr:\n%s", r.Code, r.Stderr)
		}
		for f, b := range orig {
			if now, _ := os.ReadFile(f); string(now) != string(b) {
				t.Errorf("%s: record %q, want the daemon's %q", f, now, b)
			}
		}
		if now := daemons(t, c); fmt.Sprint(now) != fmt.Sprint(first) {
			t.Fatalf("persistent proxies changed from %v to %v", first, now)
		}
	})

	t.Run("DeadDaemonReplaced", func(t *testing.T) {
		// SIGKILL leaves the socket file behind; the next job logs in and
		// starts a new persistent proxy in its place.
		for _, pid := range first {
			cluster.Kill(pid, syscall.SIGKILL)
		}
		if err := c.WaitNoLeftovers(5 * time.Second); err != nil {
			t.Fatal(err)
		}
		r := runJob(t, c, c.Client, "", "-hosts", c.HostList(1), "-n", "3", bin("nodeprog"), "where")
		if r.Code != 0 || strings.Contains(r.Stderr, "refusing") {
			t.Fatalf("exit %d, stderr:\n%s", r.Code, r.Stderr)
		}
		for h, pid := range daemons(t, c) {
			if pid == first[h] {
				t.Errorf("%s: persistent proxy %d survived SIGKILL", h, pid)
			}
		}
	})

	t.Run("IdleExit", func(t *testing.T) {
		// A job's -proxy-persist sets the daemons' idle time: with 1 s,
		// they are gone soon after it, their files with them.
		mode = launchMode{"ssh-persist-1s", false, func(*cluster.Client) []string {
			return []string{"-launcher", "ssh", "-no-proxy-upload", "-proxy-persist", "1"}
		}, true}
		r := runJob(t, c, c.Client, "", "-hosts", c.HostList(1), "-n", "3", bin("nodeprog"), "where")
		if r.Code != 0 {
			t.Fatalf("exit %d, stderr:\n%s", r.Code, r.Stderr)
		}
		if err := c.WaitNoLeftovers(5 * time.Second); err != nil {
			t.Fatalf("persistent proxies outlived their idle time: %v", err)
		}
		for _, h := range c.Hosts {
			if out, err := h.Run("sh", "-c", "ls -A /tmp/gompi-$(id -u) | grep '^p-' | grep -v -e '[.]lock$' -e '[.]log$' || true"); err != nil || strings.TrimSpace(out) != "" {
				t.Errorf("%s: files left in /tmp/gompi-<uid>: %q %v", h.Name, out, err)
			}
		}
	})
}
