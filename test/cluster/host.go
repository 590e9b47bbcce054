package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Proc is a process found in a host's network namespace.
type Proc struct {
	PID, PPID int
	Comm      string
	Cmdline   string
}

func (p Proc) String() string { return fmt.Sprintf("%d(%s: %.80s)", p.PID, p.Comm, p.Cmdline) }

// nsProcs lists the live (not zombie) processes whose network namespace is
// the named one. Namespaces are compared by inode, as ip netns pids does.
func nsProcs(ns string) ([]Proc, error) {
	var want syscall.Stat_t
	if err := syscall.Stat("/run/netns/"+ns, &want); err != nil {
		return nil, fmt.Errorf("netns %s: %w", ns, err)
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var procs []Proc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat(filepath.Join("/proc", e.Name(), "ns", "net"), &st) != nil || st.Ino != want.Ino || st.Dev != want.Dev {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		open, close := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || close < open {
			continue
		}
		f := strings.Fields(s[close+1:])
		if len(f) < 2 || f[0] == "Z" || f[0] == "X" {
			continue // dead, waiting for its parent
		}
		ppid, _ := strconv.Atoi(f[1])
		cl, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		procs = append(procs, Proc{PID: pid, PPID: ppid, Comm: s[open+1 : close],
			Cmdline: strings.TrimSpace(string(bytes.ReplaceAll(cl, []byte{0}, []byte{' '})))})
	}
	sort.Slice(procs, func(i, j int) bool { return procs[i].PID < procs[j].PID })
	return procs, nil
}

// Procs lists the host's processes other than its listening sshd: sshd's
// per-connection processes, proxies, ranks, and anything they started.
// Between jobs the list is empty.
func (h *Host) Procs() ([]Proc, error) {
	all, err := nsProcs(h.NS)
	if err != nil {
		return nil, err
	}
	listener := h.sshdPID()
	h.mu.Lock()
	daemons := maps.Clone(h.daemons)
	h.mu.Unlock()
	procs := all[:0]
	for _, p := range all {
		if p.PID != listener && !daemons[p.PID] {
			procs = append(procs, p)
		}
	}
	return procs, nil
}

// ProcsNamed lists the host's processes whose comm is name.
func (h *Host) ProcsNamed(name string) ([]Proc, error) {
	all, err := h.Procs()
	var out []Proc
	for _, p := range all {
		if p.Comm == name {
			out = append(out, p)
		}
	}
	return out, err
}

func (h *Host) sshdPID() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sshd == nil {
		return 0
	}
	return h.sshd.Process.Pid
}

// Leftovers lists, per host name, every process besides the listening
// sshd. Hosts with none are omitted.
func (c *Cluster) Leftovers() (map[string][]Proc, error) { return c.leftovers(false) }

// leftovers is Leftovers, leaving out persistent proxies if asked.
func (c *Cluster) leftovers(butPersistent bool) (map[string][]Proc, error) {
	left := map[string][]Proc{}
	for _, h := range c.Hosts {
		procs, err := h.Procs()
		if err != nil {
			return nil, err
		}
		if butPersistent {
			procs = slices.DeleteFunc(procs, isPersistent)
		}
		if len(procs) > 0 {
			left[h.Name] = procs
		}
	}
	return left, nil
}

func isPersistent(p Proc) bool { return strings.Contains(p.Cmdline, "-persist-serve") }

// WaitNoLeftovers waits up to d for every host to be back to just its
// listening sshd, and returns what is still there after d.
func (c *Cluster) WaitNoLeftovers(d time.Duration) error { return c.waitNoLeftovers(d, false) }

// WaitNoLeftoversButPersistent is WaitNoLeftovers for launches with
// persistent proxies, which outlive jobs by design (gompi-proxy
// -persist-serve); anything else on a host is a leftover.
func (c *Cluster) WaitNoLeftoversButPersistent(d time.Duration) error {
	return c.waitNoLeftovers(d, true)
}

func (c *Cluster) waitNoLeftovers(d time.Duration, butPersistent bool) error {
	deadline := time.Now().Add(d)
	for {
		left, err := c.leftovers(butPersistent)
		if err != nil {
			return err
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			var b strings.Builder
			names := make([]string, 0, len(left))
			for n := range left {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, n := range names {
				fmt.Fprintf(&b, " %s: %v;", n, left[n])
			}
			return fmt.Errorf("processes left after %s:%s", d, strings.TrimSuffix(b.String(), ";"))
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// KillAll SIGKILLs every process on every host except the listening
// sshds, so the next test starts clean even after a failure.
func (c *Cluster) KillAll() {
	for _, h := range c.Hosts {
		procs, _ := h.Procs()
		for _, p := range procs {
			syscall.Kill(p.PID, syscall.SIGKILL)
		}
	}
}

// Command returns a command that runs argv on the host: in its network
// namespace and with its private /tmp (it joins sshd's mount namespace).
// The host's sshd must be running.
func (h *Host) Command(ctx context.Context, argv ...string) (*exec.Cmd, error) {
	pid := h.sshdPID()
	if pid == 0 {
		return nil, fmt.Errorf("host %s: sshd is not running", h.Name)
	}
	args := append([]string{"--target", strconv.Itoa(pid), "--mount", "--net", "--"}, argv...)
	return exec.CommandContext(ctx, "nsenter", args...), nil
}

// Run runs argv on the host (see Command) and returns its combined output.
func (h *Host) Run(argv ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd, err := h.Command(ctx, argv...)
	if err != nil {
		return "", err
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("on %s: %s: %w: %s", h.Name, strings.Join(argv, " "), err, bytes.TrimSpace(out))
	}
	return string(out), nil
}

// CutLink takes the host's switch port down: its packets are dropped from
// now on, as if its cable were pulled; neither side is told.
func (h *Host) CutLink() error { return ipCmd("-n", h.c.switchNS, "link", "set", h.port, "down") }

// RestoreLink undoes CutLink.
func (h *Host) RestoreLink() error { return ipCmd("-n", h.c.switchNS, "link", "set", h.port, "up") }

// StopSSHD stops the host's sshd (connections to it are then refused) and
// reaps it. Its private /tmp goes with it; StartSSHD makes a new one.
func (h *Host) StopSSHD() error {
	h.mu.Lock()
	cmd, done := h.sshd, h.done
	h.sshd = nil
	h.mu.Unlock()
	if cmd == nil {
		return nil
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		cmd.Process.Kill()
		<-done
	}
	return nil
}

// Kill sends sig to pid (a process found with Procs).
func Kill(pid int, sig syscall.Signal) error { return syscall.Kill(pid, sig) }

// Close tears the cluster down: every process in every namespace is
// killed, the namespaces and links are deleted and Dir is removed. It is
// safe to call more than once.
func (c *Cluster) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	var errs []error
	for _, h := range c.Hosts {
		h.StopSSHD()
		if err := killNS(h.NS); err != nil {
			errs = append(errs, err)
		}
	}
	if c.switchNS != "" {
		killNS(c.switchNS)
	}
	for _, h := range c.Hosts {
		if err := ipCmd("netns", "del", h.NS); err != nil {
			errs = append(errs, err)
		}
	}
	if c.switchNS != "" {
		if err := ipCmd("netns", "del", c.switchNS); err != nil {
			errs = append(errs, err)
		}
	}
	// Deleting the switch namespace deletes the root link's peer and with
	// it the root link, but asynchronously; delete it now so the subnet is
	// free at once.
	if c.rootLink != "" {
		if err := exec.Command("ip", "link", "del", c.rootLink).Run(); err != nil {
			if _, serr := os.Stat("/sys/class/net/" + c.rootLink); serr == nil {
				errs = append(errs, fmt.Errorf("ip link del %s: %w", c.rootLink, err))
			}
		}
	}
	if c.Dir != "" {
		os.RemoveAll(c.Dir)
	}
	err := errors.Join(errs...)
	if err != nil {
		c.logf("cluster %s: teardown: %v", c.ID, err)
	} else {
		c.logf("cluster %s: torn down", c.ID)
	}
	return err
}

// killNS SIGKILLs every process in the namespace until none is left.
func killNS(ns string) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		procs, err := nsProcs(ns)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		if len(procs) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("netns %s: processes survive SIGKILL: %v", ns, procs)
		}
		for _, p := range procs {
			syscall.Kill(p.PID, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var staleNS = regexp.MustCompile(`^gompi-(\d+)-`)

// removeStale deletes namespaces of test processes that no longer exist
// (killed before their cleanup ran), with everything running in them, and
// their harness directories under dir.
func removeStale(dir string, logf func(string, ...any)) {
	dirs, _ := filepath.Glob(filepath.Join(dir, "gompi-cluster-*", "owner.pid"))
	for _, f := range dirs {
		b, err := os.ReadFile(f)
		pid, _ := strconv.Atoi(string(b))
		if err == nil && pid > 0 && pid != os.Getpid() && syscall.Kill(pid, 0) == syscall.ESRCH {
			os.RemoveAll(filepath.Dir(f))
			logf("cluster: removed stale directory %s", filepath.Dir(f))
		}
	}
	ents, _ := os.ReadDir("/run/netns")
	for _, e := range ents {
		m := staleNS.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		pid, _ := strconv.Atoi(m[1])
		if pid == os.Getpid() || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue
		}
		killNS(e.Name())
		if err := ipCmd("netns", "del", e.Name()); err == nil {
			logf("cluster: removed stale namespace %s", e.Name())
		}
	}
}

// RootLink is the root namespace's interface into the cluster (address
// RootAddr), for tools that must be told which interface to use.
func (c *Cluster) RootLink() string { return c.rootLink }

// PersistentProxies lists the host's persistent proxy daemons
// (gompi-proxy -persist-serve), which outlive jobs by design.
func (h *Host) PersistentProxies() ([]Proc, error) {
	all, err := h.Procs()
	return slices.DeleteFunc(all, func(p Proc) bool { return !isPersistent(p) }), err
}

// StopPersistentProxies ends every persistent proxy on every host
// (SIGTERM: each removes its socket) and waits until they are gone.
func (c *Cluster) StopPersistentProxies(d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		var left []string
		for _, h := range c.Hosts {
			ps, err := h.PersistentProxies()
			if err != nil {
				return err
			}
			for _, p := range ps {
				Kill(p.PID, syscall.SIGTERM)
				left = append(left, h.Name+": "+p.String())
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("persistent proxies still running after %v: %s", d, strings.Join(left, "; "))
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func (h *Host) addDaemon(pid int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.daemons == nil {
		h.daemons = map[int]bool{}
	}
	h.daemons[pid] = true
}

func (h *Host) clearDaemons() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.daemons = nil
}
