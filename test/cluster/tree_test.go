package cluster_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gompi/gompi/test/cluster"
)

// TestTreeLaunchOverSSH uses -fanout 1 on three hosts, so gompiexec logs in
// to n1 only, n1's proxy logs in to n2 and n2's to n3 (with the launcher's
// ~/.ssh, which the hosts share): output, placement and the PMI exchange
// cross the chain, and each host's sshd sees its login come from the host
// before it.
func TestTreeLaunchOverSSH(t *testing.T) {
	c := setup(t)
	if mode.openssh {
		t.Skip("a launch tree re-creates the built-in SSH backend on each proxy")
	}
	const n, slots = 6, 2
	on := placement(c, n, slots)
	j := startJob(t, c, c.Client, "", "-fanout", "1", "-l", "-hosts", c.HostList(slots), "-n", fmt.Sprint(n), bin("nodeprog"), "wheresleep", "3s")
	j.waitReady(n)
	if mode.persist {
		// Proxies started proxies through the next host's persistent one.
		ranksUnderPersistentProxies(t, c, "nodeprog", slots)
	}
	// Who logged in where, while the job runs.
	for i, h := range c.Hosts {
		from := c.RootAddr
		if i > 0 {
			from = c.Hosts[i-1].Addr
		}
		out, err := h.Run("ss", "-Htn", "state", "established", "( sport = :22 )")
		if err != nil {
			t.Fatalf("ss on %s: %v", h.Name, err)
		}
		var peers []string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if f := strings.Fields(l); len(f) >= 4 {
				peers = append(peers, f[3][:strings.LastIndexByte(f[3], ':')])
			}
		}
		if len(peers) != 1 || peers[0] != from {
			t.Errorf("%s: SSH logins from %v, want one from %s", h.Name, peers, from)
		}
	}
	r := j.wait(time.Minute)
	if r.Code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
	}
	for rk := 0; rk < n; rk++ {
		right := (rk + 1) % n
		want := fmt.Sprintf("[%d] rank=%d size=%d local=%d/%d host=%s right=%d@%s\n",
			rk, rk, n, rk%slots, slots, on[rk].Identity, right, on[right].Identity)
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("missing %q in\n%s", want, r.Stdout)
		}
	}
	j.assertNoLeftovers(5 * time.Second)
}

// TestProxyUpload names a proxy path that no host has: gompiexec copies its
// own gompi-proxy into ~/.cache/gompi/proxy-<sha256> on the hosts (a shared
// home here, so one upload serves all three) and runs it from there; a
// second job reuses it.
func TestProxyUpload(t *testing.T) {
	c := setup(t)
	if mode.openssh {
		t.Skip("proxy upload is the built-in SSH backend's")
	}
	b, err := os.ReadFile(bin("gompi-proxy"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	home, _ := os.UserHomeDir() // root's home: the remote login's, shared by every namespace
	cached := filepath.Join(home, ".cache", "gompi", "proxy-"+hex.EncodeToString(sum[:]))
	if _, err := os.Stat(cached); err == nil {
		t.Logf("%s exists already; the test still checks the job runs from it", cached)
	} else {
		t.Cleanup(func() { os.Remove(cached) })
	}
	saved := mode
	mode = launchMode{"ssh-upload", false, func(*cluster.Client) []string { return []string{"-launcher", "ssh", "-v"} }, false}
	defer func() { mode = saved }()
	for run := 1; run <= 2; run++ {
		r := runJob(t, c, c.Client, "", "-proxy-path", "/nonexistent/gompi/bin/gompi-proxy",
			"-hosts", c.HostList(1), "-n", "3", bin("nodeprog"), "where")
		if r.Code != 0 {
			t.Fatalf("run %d: exit %d\nstdout:\n%s\nstderr:\n%s", run, r.Code, r.Stdout, r.Stderr)
		}
		for _, h := range c.Hosts {
			if !strings.Contains(r.Stdout, "host="+h.Identity) {
				t.Fatalf("run %d: no rank ran on %s:\n%s", run, h.Name, r.Stdout)
			}
		}
		fi, err := os.Stat(cached)
		if err != nil || fi.Mode().Perm()&0o111 == 0 {
			t.Fatalf("run %d: uploaded proxy %s: %v", run, cached, err)
		}
		t.Logf("run %d log:\n%s", run, r.Stderr)
	}
	// Without upload the missing proxy is a clear error naming host and path.
	mode = launchMode{"ssh-no-upload", false, func(*cluster.Client) []string { return []string{"-launcher", "ssh", "-no-proxy-upload"} }, false}
	r := runJob(t, c, c.Client, "", "-proxy-path", "/nonexistent/gompi/bin/gompi-proxy", "-hosts", c.HostList(1), "-n", "3", bin("nodeprog"), "where")
	if r.Code == 0 || !strings.Contains(r.Stderr, "/nonexistent/gompi/bin/gompi-proxy") || !strings.Contains(r.Stderr, "n1") {
		t.Fatalf("exit %d, stderr:\n%s", r.Code, r.Stderr)
	}
}

// TestRSHAgentMode runs jobs through an rsh-style agent script standing in
// for `kubectl exec` (here it runs OpenSSH's ssh): `AGENT HOST command...`.
func TestRSHAgentMode(t *testing.T) {
	c := setup(t)
	saved := mode
	mode = rshAgent
	defer func() { mode = saved }()
	const n, slots = 6, 2
	on := placement(c, n, slots)
	r := runJob(t, c, c.Client, "", "-l", "-hosts", c.HostList(slots), "-n", fmt.Sprint(n), bin("nodeprog"), "where")
	if r.Code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
	}
	for rk := 0; rk < n; rk++ {
		if want := fmt.Sprintf("[%d] rank=%d size=%d local=%d/%d host=%s ", rk, rk, n, rk%slots, slots, on[rk].Identity); !strings.Contains(r.Stdout, want) {
			t.Errorf("missing %q in\n%s", want, r.Stdout)
		}
	}
	r = runJob(t, c, c.Client, "", "-hosts", c.HostList(1), "-n", "3", bin("nodeprog"), "exit", "5", "2")
	if r.Code != 5 || !strings.Contains(r.Stderr, c.Hosts[2].Name) {
		t.Fatalf("exit %d, want 5 naming %s:\n%s", r.Code, c.Hosts[2].Name, r.Stderr)
	}
}

// TestDeadRankAcrossTree: under -disable-auto-cleanup a failed rank on the
// last host of a -fanout 1 chain is reported down the whole tree: every
// host's proxy answers PMI_dead_processes with it, and the others finish.
func TestDeadRankAcrossTree(t *testing.T) {
	c := setup(t)
	if mode.openssh {
		t.Skip("a launch tree re-creates the built-in SSH backend on each proxy")
	}
	const n = 3
	j := startJob(t, c, c.Client, "", "-fanout", "1", "-disable-auto-cleanup", "-hosts", c.HostList(1), "-n", fmt.Sprint(n), bin("nodeprog"), "deadlist", "2")
	r := j.wait(time.Minute)
	if r.Code != 5 {
		t.Fatalf("exit %d, want 5 (the failed rank's)\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
	}
	for rk := 0; rk < n-1; rk++ {
		if want := fmt.Sprintf("rank %d on %s: dead 2\n", rk, c.Hosts[rk].Identity); !strings.Contains(r.Stdout, want) {
			t.Errorf("missing %q in\n%s\nstderr:\n%s", want, r.Stdout, r.Stderr)
		}
	}
	j.assertNoLeftovers(5 * time.Second)
}
