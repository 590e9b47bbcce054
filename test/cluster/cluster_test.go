package cluster_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gompi/gompi/test/cluster"
)

// TestHarness checks the cluster itself: every host has its own /tmp and
// address, answers SSH through the client's agent with the generated keys,
// and is idle afterwards.
func TestHarness(t *testing.T) {
	c := setup(t)
	if len(c.Hosts) < 3 {
		t.Fatalf("%d hosts", len(c.Hosts))
	}
	if b, err := os.ReadFile(cluster.IdentityFile); err == nil && strings.HasPrefix(string(b), "node-") {
		t.Fatalf("the root namespace sees a host's %s: %q", cluster.IdentityFile, b)
	}
	for _, h := range c.Hosts {
		out, err := h.Run("cat", cluster.IdentityFile)
		if err != nil || out != h.Identity {
			t.Fatalf("%s: %s = %q, %v; want %q", h.Name, cluster.IdentityFile, out, err, h.Identity)
		}
		out, err = h.Run("ip", "-4", "-o", "addr", "show", "dev", "eth0")
		if err != nil || !strings.Contains(out, " "+h.Addr+"/24 ") {
			t.Fatalf("%s: eth0 %q, %v; want %s", h.Name, out, err, h.Addr)
		}
		// The client's agent logs in with the generated user key and checks
		// the generated host key; the session sees the host's /tmp.
		ssh := exec.Command(c.Client.Agent, h.Name, "cat", cluster.IdentityFile, ";", "echo", "$SSH_CONNECTION")
		outb, err := ssh.CombinedOutput()
		if err != nil || !strings.HasPrefix(string(outb), h.Identity+c.RootAddr+" ") || !strings.Contains(string(outb), " "+h.Addr+" 22") {
			t.Fatalf("ssh %s: %q, %v", h.Name, outb, err)
		}
	}
	if err := c.WaitNoLeftovers(5 * time.Second); err != nil {
		t.Fatal(err)
	}
}

// placement returns which host each of n ranks is on for -hosts
// c.HostList(slots) (block placement: slots ranks per host in order).
func placement(c *cluster.Cluster, n, slots int) []*cluster.Host {
	hs := make([]*cluster.Host, n)
	for r := range hs {
		hs[r] = c.Hosts[(r/slots)%len(c.Hosts)]
	}
	return hs
}

// TestGoRanksAcrossHosts runs a Go PMI program on 3 hosts x 2 ranks: each
// rank reports the host it runs on (its private /tmp) and, through PMI
// put/fence/get across the three proxies, its neighbour's host.
func TestGoRanksAcrossHosts(t *testing.T) {
	c := setup(t)
	const n, slots = 6, 2
	on := placement(c, n, slots)
	r := runJob(t, c, c.Client, "", "-l", "-hosts", c.HostList(slots), "-n", fmt.Sprint(n), bin("nodeprog"), "where")
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
	if lines := strings.Count(r.Stdout, "\n"); lines != n {
		t.Errorf("%d output lines, want %d:\n%s", lines, n, r.Stdout)
	}
}

// TestGoCollectivesAcrossHosts runs the Go runtime's collectives on 3
// hosts, 2 ranks each in blocks (two-level algorithms for every op) and
// round-robin (two-level for commutative ops only; lanes for the large
// Allreduce in both), with checked results. Each host's ranks share a
// mount namespace unlike the other hosts', so the runtime sees 3 hosts:
// shared memory within, TCP across.
func TestGoCollectivesAcrossHosts(t *testing.T) {
	c := setup(t)
	for _, tc := range []struct {
		name  string
		slots int
	}{{"blocks", 2}, {"round-robin", 1}} {
		r := runJob(t, c, c.Client, "", "-hosts", c.HostList(tc.slots), "-n", "6", bin("nodeprog"), "coll")
		if r.Code != 0 {
			t.Fatalf("%s: exit %d\nstdout:\n%s\nstderr:\n%s", tc.name, r.Code, r.Stdout, r.Stderr)
		}
		on := placement(c, 6, tc.slots)
		for rk := 0; rk < 6; rk++ {
			if want := fmt.Sprintf("rank %d on %s coll ok\n", rk, on[rk].Identity); !strings.Contains(r.Stdout, want) {
				t.Errorf("%s: missing %q in\n%s", tc.name, want, r.Stdout)
			}
		}
	}
}

// TestHostfileAndHello runs examples/hello from a host file with 3 slots
// per host and checks the -l prefixes, then checks the host file's
// placement with nodeprog (hello prints the hostname, which every
// namespace shares).
func TestHostfileAndHello(t *testing.T) {
	c := setup(t)
	hosts, err := c.Hostfile(3)
	if err != nil {
		t.Fatal(err)
	}
	r := runJob(t, c, c.Client, "", "-l", "-f", hosts, "-n", "9", bin("hello"))
	if r.Code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
	}
	for rk := 0; rk < 9; rk++ {
		if !strings.Contains(r.Stdout, fmt.Sprintf("[%d] hello from rank %d of 9 (appnum 0) at ", rk, rk)) {
			t.Errorf("rank %d missing in\n%s", rk, r.Stdout)
		}
	}
	// Placement from the host file: 3 per host, in order.
	r = runJob(t, c, c.Client, "", "-f", hosts, "-n", "9", bin("nodeprog"), "where")
	on := placement(c, 9, 3)
	for rk := 0; rk < 9; rk++ {
		if want := fmt.Sprintf("rank=%d size=9 local=%d/3 host=%s ", rk, rk%3, on[rk].Identity); !strings.Contains(r.Stdout, want) {
			t.Errorf("missing %q in\n%s", want, r.Stdout)
		}
	}
}

// TestMPICHAcrossHosts runs an MPICH C program (ring, allreduce, gather)
// on 3 hosts x 2 ranks, with PMI over the inherited socket and over TCP.
func TestMPICHAcrossHosts(t *testing.T) {
	c := setup(t)
	if mpiccErr != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(mpiccErr)
		}
		t.Skip(mpiccErr)
	}
	on := placement(c, 6, 2)
	for _, pmi := range [][]string{nil, {"-pmi-port"}} {
		args := append(append([]string{}, pmi...), "-hosts", c.HostList(2), "-n", "6", bin("hostring"))
		r := runJob(t, c, c.Client, "", args...)
		if r.Code != 0 {
			t.Fatalf("%v: exit %d\nstdout:\n%s\nstderr:\n%s", pmi, r.Code, r.Stdout, r.Stderr)
		}
		if !strings.Contains(r.Stdout, "ring token 6 sum 15 size 6\n") {
			t.Fatalf("%v: ring/allreduce wrong:\n%s", pmi, r.Stdout)
		}
		for rk := 0; rk < 6; rk++ {
			if want := fmt.Sprintf("rank %d at %s\n", rk, on[rk].Identity); !strings.Contains(r.Stdout, want) {
				t.Errorf("%v: missing %q in\n%s", pmi, want, r.Stdout)
			}
		}
	}
	// MPI_Abort(MPI_COMM_WORLD, 7) on the last rank (third host) while the
	// others block in a receive: exit 7, the rank and host named.
	r := runJob(t, c, c.Client, "", "-hosts", c.HostList(2), "-n", "6", bin("abort"))
	if want := "rank 5 on " + c.Hosts[2].Name + " called abort with exit code 7"; r.Code != 7 || !strings.Contains(r.Stderr, want) {
		t.Fatalf("abort: exit %d, want 7 and %q in stderr:\n%s", r.Code, want, r.Stderr)
	}
}

// TestStdinReachesRemoteRankZero puts rank 0 on the second host: gompiexec's
// stdin crosses SSH to it, and no other rank reads any.
func TestStdinReachesRemoteRankZero(t *testing.T) {
	c := setup(t)
	h := c.Hosts
	input := strings.Repeat("0123456789abcdef\n", 6000) // ~100 KB
	r := runJob(t, c, c.Client, input, "-hosts", h[1].Name+","+h[0].Name+","+h[2].Name, "-n", "3", bin("nodeprog"), "cat")
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	if want := fmt.Sprintf("rank 0 on %s read %d bytes\n", h[1].Identity, len(input)); !strings.Contains(r.Stdout, want) {
		t.Fatalf("missing %q in ...%s", want, r.Stdout[max(0, len(r.Stdout)-300):])
	}
	if !strings.Contains(r.Stdout, input[:1000]) {
		t.Fatalf("stdin content not echoed by rank 0")
	}
	for rk, host := range map[int]*cluster.Host{1: h[0], 2: h[2]} {
		if want := fmt.Sprintf("rank %d on %s read 0 bytes\n", rk, host.Identity); !strings.Contains(r.Stdout, want) {
			t.Fatalf("missing %q", want)
		}
	}
}

// TestRemoteExitCode: a rank on the third host exits 7; the job exits 7,
// names the rank and its host, and the other hosts' ranks are torn down.
func TestRemoteExitCode(t *testing.T) {
	c := setup(t)
	r := runJob(t, c, c.Client, "", "-hosts", c.HostList(2), "-n", "6", bin("nodeprog"), "exit", "7", "4")
	if r.Code != 7 {
		t.Fatalf("exit %d, want 7; stderr:\n%s", r.Code, r.Stderr)
	}
	for _, want := range []string{"BAD TERMINATION", "RANK 4", "RUNNING AT " + c.Hosts[2].Name, "EXIT CODE: 7",
		"rank 4 on " + c.Hosts[2].Identity + " exits with 7"} {
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.Stderr)
		}
	}
	if r.Elapsed > 15*time.Second {
		t.Errorf("took %s", r.Elapsed)
	}
}

// TestSignalsReachRemoteRanks: SIGINT to gompiexec reaches every rank on
// every host (the ranks report it and keep running); a second SIGINT within
// 3 s kills the job with 130.
func TestSignalsReachRemoteRanks(t *testing.T) {
	c := setup(t)
	j := startJob(t, c, c.Client, "", "-hosts", c.HostList(1), "-n", "3", bin("nodeprog"), "trap")
	j.waitReady(3)
	syscall.Kill(j.Cmd.Process.Pid, syscall.SIGINT)
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(j.Stdout.String(), " got interrupt\n") < 3 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	for rk, h := range c.Hosts {
		if want := fmt.Sprintf("rank %d on %s got interrupt\n", rk, h.Identity); !strings.Contains(j.Stdout.String(), want) {
			t.Fatalf("missing %q in\n%s\nstderr:\n%s", want, j.Stdout.String(), j.Stderr.String())
		}
	}
	syscall.Kill(j.Cmd.Process.Pid, syscall.SIGINT)
	r := j.wait(15 * time.Second)
	if r.Code != 130 {
		t.Fatalf("exit %d after the second SIGINT, want 130; stderr:\n%s", r.Code, r.Stderr)
	}
	j.assertNoLeftovers(5 * time.Second)
}

// TestUnreachableHost: one host cannot be reached, either because nothing
// listens on its SSH port (refused at once) or because its link is down
// (packets vanish; the agent's ConnectTimeout of 10 s ends the attempt).
// The job fails within the connect timeout naming that host, and the hosts
// that were reached are left clean.
func TestUnreachableHost(t *testing.T) {
	c := setup(t)
	bad := c.Hosts[1]
	for _, tc := range []struct {
		name          string
		slow          bool // waits for the 10 s connect timeout
		breakIt, mend func() error
		limit         time.Duration
		openssh       string // OpenSSH's reason
		builtin       string // the built-in client's, after the address
	}{
		{"no sshd", false, bad.StopSSHD, bad.StartSSHD, 12 * time.Second,
			"Connection refused", ":22): dial tcp " + bad.Addr + ":22: connect: connection refused"},
		{"link down", true, bad.CutLink, bad.RestoreLink, 14 * time.Second,
			"timed out", ":22): no connection within 10s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.slow && testing.Short() {
				t.Skip("waits for the 10 s connect timeout")
			}
			if err := tc.breakIt(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := tc.mend(); err != nil {
					t.Error(err)
				}
			})
			r := runJob(t, c, c.Client, "", "-hosts", c.HostList(1), "-n", "3", bin("nodeprog"), "sleep", "30s")
			t.Logf("stderr:\n%s", r.Stderr)
			if r.Code == 0 || r.Elapsed > tc.limit {
				t.Fatalf("exit %d after %s (limit %s)", r.Code, r.Elapsed, tc.limit)
			}
			if !strings.Contains(r.Stderr, bad.Name) {
				t.Fatalf("stderr does not name %s:\n%s", bad.Name, r.Stderr)
			}
			if mode.openssh && !strings.Contains(r.Stderr, tc.openssh) {
				t.Errorf("OpenSSH's reason missing:\n%s", r.Stderr)
			}
			if !mode.openssh && !strings.Contains(r.Stderr, bad.Addr+tc.builtin) {
				t.Errorf("the built-in client should name the address and the reason:\n%s", r.Stderr)
			}
		})
	}
}

// TestWrongHostKey: the client's known_hosts has another key for one host;
// the connection is refused before any command runs, and the message names
// the host and the known_hosts file to fix.
func TestWrongHostKey(t *testing.T) {
	c := setup(t)
	bad := c.Hosts[2]
	cl, err := c.NewClient(cluster.ClientOptions{WrongHostKey: []string{bad.Name}})
	if err != nil {
		t.Fatal(err)
	}
	r := runJob(t, c, cl, "", "-hosts", c.HostList(1), "-n", "3", bin("nodeprog"), "sleep", "30s")
	t.Logf("stderr:\n%s", r.Stderr)
	if r.Code == 0 || r.Elapsed > 12*time.Second {
		t.Fatalf("exit %d after %s", r.Code, r.Elapsed)
	}
	if !strings.Contains(r.Stderr, bad.Name) || !strings.Contains(r.Stderr, "known_hosts") {
		t.Fatalf("stderr does not name %s and known_hosts:\n%s", bad.Name, r.Stderr)
	}
	if mode.openssh && !strings.Contains(r.Stderr, "Host key verification failed") {
		t.Errorf("OpenSSH's reason missing:\n%s", r.Stderr)
	}
	if !mode.openssh && (!strings.Contains(r.Stderr, "HOST KEY MISMATCH") || !strings.Contains(r.Stderr, "ssh-keygen -R")) {
		t.Errorf("the built-in client should say the key changed and how to fix it:\n%s", r.Stderr)
	}
	// Nothing may have run on the impostor host at all.
	if strings.Contains(r.Stdout, bad.Identity) {
		t.Fatalf("a rank ran on the host with the wrong key:\n%s", r.Stdout)
	}
}

// TestUnknownHostKey: one host is missing from known_hosts. Strict checking
// refuses it, naming the host; the built-in backend's -ssh-accept-new
// accepts it and records its key.
func TestUnknownHostKey(t *testing.T) {
	c := setup(t)
	unknown := c.Hosts[0]
	cl, err := c.NewClient(cluster.ClientOptions{UnknownHost: []string{unknown.Name}})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("refused", func(t *testing.T) {
		r := runJob(t, c, cl, "", "-hosts", c.HostList(1), "-n", "3", bin("nodeprog"), "sleep", "30s")
		t.Logf("stderr:\n%s", r.Stderr)
		if r.Code == 0 || r.Elapsed > 12*time.Second || !strings.Contains(r.Stderr, unknown.Name) {
			t.Fatalf("exit %d after %s; stderr does not name %s", r.Code, r.Elapsed, unknown.Name)
		}
		if mode.openssh && !strings.Contains(r.Stderr, "Host key verification failed") {
			t.Errorf("OpenSSH's reason missing:\n%s", r.Stderr)
		}
		if !mode.openssh && (!strings.Contains(r.Stderr, "unknown host key") || !strings.Contains(r.Stderr, cl.KnownHosts) ||
			!strings.Contains(r.Stderr, "-ssh-accept-new")) {
			t.Errorf("the built-in client should name known_hosts and suggest -ssh-accept-new:\n%s", r.Stderr)
		}
	})
	t.Run("accept-new", func(t *testing.T) {
		if mode.openssh {
			t.Skip("-ssh-accept-new is the built-in SSH backend's (GOMPI_CLUSTER_LAUNCHER=ssh)")
		}
		r := runJob(t, c, cl, "", append([]string{"-ssh-accept-new"}, "-hosts", c.HostList(1), "-n", "3", bin("nodeprog"), "where")...)
		if r.Code != 0 || !strings.Contains(r.Stdout, "host="+unknown.Identity) {
			t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
		}
		kh, err := os.ReadFile(cl.KnownHosts)
		if err != nil || !strings.Contains(string(kh), unknown.HostPub) {
			t.Fatalf("%s's key not recorded in known_hosts:\n%s", unknown.Name, kh)
		}
	})
}

// TestBadCredentials: the client's key is authorised nowhere; every host
// refuses it and the job fails naming a host.
func TestBadCredentials(t *testing.T) {
	c := setup(t)
	cl, err := c.NewClient(cluster.ClientOptions{UnauthorizedKey: true})
	if err != nil {
		t.Fatal(err)
	}
	r := runJob(t, c, cl, "", "-hosts", c.HostList(1), "-n", "3", bin("nodeprog"), "sleep", "30s")
	t.Logf("stderr:\n%s", r.Stderr)
	if r.Code == 0 || r.Elapsed > 12*time.Second {
		t.Fatalf("exit %d after %s", r.Code, r.Elapsed)
	}
	if !regexp.MustCompile(`\bn[123]\b`).MatchString(r.Stderr) {
		t.Fatalf("stderr names no host:\n%s", r.Stderr)
	}
	if mode.openssh && !strings.Contains(r.Stderr, "Permission denied (publickey)") {
		t.Errorf("OpenSSH's reason missing:\n%s", r.Stderr)
	}
	if !mode.openssh && (!strings.Contains(r.Stderr, "authentication failed") || !strings.Contains(r.Stderr, "id_ed25519")) {
		t.Errorf("the built-in client should say which key root@host refused:\n%s", r.Stderr)
	}
	if strings.Contains(r.Stdout, "ready") {
		t.Fatalf("a rank ran:\n%s", r.Stdout)
	}
}

// TestNetworkCut pulls one host's cable while its ranks sleep: the job ends
// within 15 s naming the host, and (once keepalives expire on the cut-off
// host too) nothing of the job is left anywhere.
func TestNetworkCut(t *testing.T) {
	if testing.Short() {
		t.Skip("takes ~10 s")
	}
	c := setup(t)
	cut := c.Hosts[2]
	j := startJob(t, c, c.Client, "", "-hosts", c.HostList(2), "-n", "6", bin("nodeprog"), "sleep", "120s")
	j.waitReady(6)
	if err := cut.CutLink(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cut.RestoreLink(); err != nil {
			t.Error(err)
		}
	})
	at := time.Now()
	r := j.wait(30 * time.Second)
	took := time.Since(at)
	t.Logf("job ended %s after the cut, exit %d; stderr:\n%s", took.Round(time.Millisecond), r.Code, r.Stderr)
	if took > 15*time.Second {
		t.Fatalf("job took %s to end after the network cut", took)
	}
	if r.Code == 0 || !strings.Contains(r.Stderr, cut.Name) {
		t.Fatalf("exit %d; stderr does not name %s", r.Code, cut.Name)
	}
	// The cut-off host cannot be told; its sshd drops the dead session after
	// ClientAliveInterval x ClientAliveCountMax (2 s x 3), and the proxy,
	// losing its stdin, kills its ranks.
	j.assertNoLeftovers(15 * time.Second)
	t.Logf("all hosts clean %s after the cut", time.Since(at).Round(time.Millisecond))
}

// TestLauncherKilled SIGKILLs gompiexec while ranks sleep on all hosts:
// its ssh agents die with it, each host's sshd ends the session, and the
// proxies kill their ranks, all within 5 s.
func TestLauncherKilled(t *testing.T) {
	c := setup(t)
	j := startJob(t, c, c.Client, "", "-hosts", c.HostList(2), "-n", "6", bin("nodeprog"), "sleep", "120s")
	j.waitReady(6)
	for _, h := range c.Hosts {
		if ps, _ := h.ProcsNamed("nodeprog"); len(ps) != 2 {
			t.Fatalf("%s runs ranks %v, want 2", h.Name, ps)
		}
	}
	at := time.Now()
	syscall.Kill(j.Cmd.Process.Pid, syscall.SIGKILL)
	<-j.Done()
	j.assertNoLeftovers(5 * time.Second)
	t.Logf("all hosts clean %s after SIGKILL", time.Since(at).Round(time.Millisecond))
}

// TestRemoteRankKilled SIGKILLs one rank on the second host: the job ends
// within 2 s with 128+9, naming the rank's host.
func TestRemoteRankKilled(t *testing.T) {
	c := setup(t)
	victimHost := c.Hosts[1]
	j := startJob(t, c, c.Client, "", "-hosts", c.HostList(2), "-n", "6", bin("nodeprog"), "sleep", "120s")
	j.waitReady(6)
	ranks, err := victimHost.ProcsNamed("nodeprog")
	if err != nil || len(ranks) != 2 {
		t.Fatalf("%s runs ranks %v (%v), want 2", victimHost.Name, ranks, err)
	}
	at := time.Now()
	cluster.Kill(ranks[1].PID, syscall.SIGKILL)
	r := j.wait(15 * time.Second)
	took := time.Since(at)
	t.Logf("job ended %s after the kill, exit %d", took.Round(time.Millisecond), r.Code)
	if took > 2*time.Second {
		t.Fatalf("job took %s to end after a remote rank was SIGKILLed", took)
	}
	if r.Code != 128+9 || !strings.Contains(r.Stderr, "KILLED BY SIGNAL: 9") || !strings.Contains(r.Stderr, "RUNNING AT "+victimHost.Name) {
		t.Fatalf("exit %d, stderr:\n%s", r.Code, r.Stderr)
	}
	j.assertNoLeftovers(5 * time.Second)
}

// TestTeardown builds a second cluster next to the shared one (names and
// subnet must differ), leaves processes running on it, and checks Close
// removes every trace: processes, namespaces, the root link, the directory.
func TestTeardown(t *testing.T) {
	c := setup(t)
	c2, err := cluster.New(cluster.Config{Hosts: 3, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if c2.Subnet == c.Subnet || c2.ID == c.ID {
		t.Fatalf("second cluster reuses %s / %s", c2.ID, c2.Subnet)
	}
	// A process started inside a host, and one left by an SSH session.
	h := c2.Hosts[0]
	sleeper, err := h.Command(context.Background(), "sleep", "60")
	if err != nil {
		t.Fatal(err)
	}
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- sleeper.Wait() }()
	if out, err := exec.Command(c2.Client.Agent, c2.Hosts[1].Name, "nohup sleep 60 >/dev/null 2>&1 &").CombinedOutput(); err != nil {
		t.Fatalf("ssh: %v %s", err, out)
	}
	// Both were forked before the calls returned, but may not have
	// exec'd sleep yet.
	for _, hh := range c2.Hosts[:2] {
		deadline := time.Now().Add(5 * time.Second)
		for {
			ps, _ := hh.ProcsNamed("sleep")
			if len(ps) == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: sleep processes %v", hh.Name, ps)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if err := c2.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("process inside the host survived Close")
	}
	names := []string{c2.ID + "-sw"}
	for _, hh := range c2.Hosts {
		names = append(names, hh.NS)
	}
	for _, ns := range names {
		if _, err := os.Stat("/run/netns/" + ns); err == nil {
			t.Errorf("namespace %s survived Close", ns)
		}
	}
	if _, err := os.Stat("/sys/class/net/" + c2.RootLink()); err == nil {
		t.Errorf("root link %s survived Close", c2.RootLink())
	}
	if _, err := os.Stat(c2.Dir); err == nil {
		t.Errorf("%s survived Close", c2.Dir)
	}
	// Nothing of c2's survives anywhere: no process whose command line
	// names its directory.
	if out, _ := exec.Command("pgrep", "-f", c2.Dir).Output(); len(out) > 0 {
		t.Errorf("processes of the closed cluster: %s", out)
	}
	// The shared cluster is untouched.
	if out, err := c.Hosts[0].Run("cat", cluster.IdentityFile); err != nil || out != c.Hosts[0].Identity {
		t.Fatalf("shared cluster damaged: %q %v", out, err)
	}
}

// TestProgramOnlyOnRemoteHosts: as under Hydra, a program or working
// directory that exists on the hosts but not on the launch host runs (each
// proxy resolves it); one that exists nowhere fails the job with a message
// naming it and the host, and leaves nothing behind.
func TestProgramOnlyOnRemoteHosts(t *testing.T) {
	c := setup(t)
	dir := fmt.Sprintf("/tmp/gompi-only-remote-%d", os.Getpid())
	if _, err := os.Stat(dir); err == nil {
		t.Fatalf("%s exists on the launch host", dir)
	}
	script := "#!/bin/sh\necho \"rank $PMI_RANK on $(cat /tmp/gompi-host) in $(pwd)\"\n"
	for _, h := range c.Hosts[:2] {
		if out, err := h.Run("sh", "-c", fmt.Sprintf("mkdir -p %s && printf '%%s' '%s' > %s/prog && chmod +x %s/prog", dir, script, dir, dir)); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	hosts := c.Hosts[0].Name + ":1," + c.Hosts[1].Name + ":1"
	for _, tc := range []struct {
		args []string
		in   string // the ranks' working directory, if the test sets it
	}{
		{[]string{"-hosts", hosts, "-n", "2", dir + "/prog"}, ""},
		{[]string{"-hosts", hosts, "-n", "2", "-wdir", dir, "./prog"}, dir + "\n"},
	} {
		args := tc.args
		r := runJob(t, c, c.Client, "", args...)
		if r.Code != 0 {
			t.Fatalf("%v: exit %d\nstdout:\n%s\nstderr:\n%s", args, r.Code, r.Stdout, r.Stderr)
		}
		for rk, h := range c.Hosts[:2] {
			if want := fmt.Sprintf("rank %d on %s in %s", rk, h.Identity, tc.in); !strings.Contains(r.Stdout, want) {
				t.Errorf("%v: stdout lacks %q:\n%s", args, want, r.Stdout)
			}
		}
	}
	// On the first host only: the second cannot start its rank.
	r := runJob(t, c, c.Client, "", "-hosts", c.Hosts[0].Name+":1,"+c.Hosts[2].Name+":1", "-n", "2", dir+"/prog")
	if r.Code == 0 {
		t.Fatalf("a program missing on %s: exit 0\nstderr:\n%s", c.Hosts[2].Name, r.Stderr)
	}
	for _, want := range []string{dir + "/prog", c.Hosts[2].Name} {
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.Stderr)
		}
	}
}
