// Package cluster builds a real multi-host test cluster on one Linux machine:
// each host is a network namespace with its own address, its own private
// /tmp and its own OpenSSH server, all joined by a bridge in a "switch"
// namespace. The root namespace (where gompiexec runs) gets one veth into
// the bridge. Everything is torn down by Close, and namespaces left behind
// by a test process that died are removed by the next New.
//
// It needs root, ip(8) with netns support, unshare(1), nsenter(1) and
// Debian's OpenSSH (sshd, ssh, ssh-keygen); Check reports what is missing.
// See README.md in this directory.
package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gompi/gompi/internal/launcher"
)

// Config describes a cluster to build.
type Config struct {
	// Hosts is the number of hosts (default 3).
	Hosts int
	// Dir is where the harness directory is created. It must not be under
	// /tmp, which every host replaces with its own; default /var/tmp.
	Dir string
	// Logf receives progress and diagnostics; nil discards them.
	Logf func(format string, args ...any)
}

// Cluster is a running set of hosts.
type Cluster struct {
	// ID prefixes every namespace and link name: gompi-<pid>-<seq>.
	ID string
	// Dir holds keys, sshd configs and logs, and the default client's HOME.
	// It is on the filesystem every host shares.
	Dir string
	// Subnet is the /24 the hosts live in, as "10.200.X".
	Subnet string
	// RootAddr is the root namespace's address in Subnet.
	RootAddr string
	Hosts    []*Host
	// Client is the default client: its HOME has .ssh/config, known_hosts
	// and id_ed25519 accepted by every host.
	Client *Client

	logf     func(string, ...any)
	switchNS string
	rootLink string
	userKey  string // private key authorised on every host
	mu       sync.Mutex
	closed   bool
	nclients int
	networks map[string][]string // AddNetwork's addresses by device
}

// Host is one namespace running sshd.
type Host struct {
	// Name is the host's name in ssh_config (Host NAME / HostName Addr) and
	// known_hosts; use it in -hosts lists and host files.
	Name string
	// Addr is the host's IPv4 address.
	Addr string
	// NS is the network namespace's name (ip netns).
	NS string
	// Identity is the content of the host's private /tmp/gompi-host, which
	// rank programs print to prove where they ran.
	Identity string
	// HostPub is the host key's public half ("ssh-ed25519 AAAA...").
	HostPub string
	// Log is sshd's log file.
	Log string

	c      *Cluster
	port   string // the switch-side end of the host's veth
	config string
	mu     sync.Mutex
	sshd   *exec.Cmd
	done   chan struct{}
	// daemons are Slurm's processes on the host (slurm.go): not leftovers.
	daemons map[int]bool
}

// IdentityFile is the file every host's /tmp holds, with Host.Identity.
const IdentityFile = "/tmp/gompi-host"

// Check returns why a cluster cannot be built here, or nil.
func Check() error {
	if os.Geteuid() != 0 {
		return errors.New("test cluster needs root (network namespaces, mounts)")
	}
	for _, p := range []string{"ip", "unshare", "nsenter", "ssh", "ssh-keygen", sshdPath} {
		if _, err := exec.LookPath(p); err != nil {
			return fmt.Errorf("test cluster needs %s (run test/setup.sh as root)", p)
		}
	}
	// What New does, in a throwaway namespace: a bridge and a veth pair.
	name := fmt.Sprintf("gompi-%d-probe", os.Getpid())
	if err := ipCmd("netns", "add", name); err != nil {
		return fmt.Errorf("network namespaces do not work here: %v", err)
	}
	defer exec.Command("ip", "netns", "del", name).Run()
	if err := ipCmd("-n", name, "link", "add", "br0", "type", "bridge"); err != nil {
		return fmt.Errorf("bridges do not work here: %v", err)
	}
	if err := ipCmd("-n", name, "link", "add", "probe0", "type", "veth", "peer", "name", "probe1"); err != nil {
		return fmt.Errorf("veth pairs do not work here: %v", err)
	}
	return nil
}

const sshdPath = "/usr/sbin/sshd"

var seq struct {
	sync.Mutex
	n int
}

// New builds and starts a cluster. On error, whatever was built is torn down.
func New(cfg Config) (c *Cluster, err error) {
	if cfg.Hosts == 0 {
		cfg.Hosts = 3
	}
	if cfg.Hosts > 200 {
		return nil, errors.New("cluster: at most 200 hosts")
	}
	if cfg.Dir == "" {
		cfg.Dir = "/var/tmp"
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if abs, _ := filepath.Abs(cfg.Dir); abs == "/tmp" || strings.HasPrefix(abs, "/tmp/") {
		return nil, fmt.Errorf("cluster: Dir %s is under /tmp, which each host replaces with its own", cfg.Dir)
	}
	removeStale(cfg.Dir, cfg.Logf)
	seq.Lock()
	seq.n++
	n := seq.n
	seq.Unlock()
	dir, err := os.MkdirTemp(cfg.Dir, "gompi-cluster-")
	if err != nil {
		return nil, err
	}
	// removeStale deletes the directory once this process is gone.
	if err := os.WriteFile(filepath.Join(dir, "owner.pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	c = &Cluster{ID: fmt.Sprintf("gompi-%d-%d", os.Getpid(), n), Dir: dir, logf: cfg.Logf}
	defer func() {
		if err != nil {
			c.Close()
			c = nil
		}
	}()
	start := time.Now()
	if err := c.network(cfg.Hosts); err != nil {
		return c, err
	}
	if err := c.keys(); err != nil {
		return c, err
	}
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil { // sshd's privilege separation directory
		return c, err
	}
	for _, h := range c.Hosts {
		if err := h.StartSSHD(); err != nil {
			return c, err
		}
	}
	if c.Client, err = c.NewClient(ClientOptions{}); err != nil {
		return c, err
	}
	c.logf("cluster %s: %d hosts in %s.0/24 up in %s (dir %s)", c.ID, len(c.Hosts), c.Subnet, time.Since(start).Round(time.Millisecond), dir)
	return c, nil
}

// ipCmd runs ip(8) with args.
func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// network creates the switch namespace with its bridge, one namespace per
// host wired to it, and the root namespace's link.
func (c *Cluster) network(hosts int) error {
	// The subnet is chosen and the root link (which claims it) created under
	// a lock, so concurrent test processes pick different subnets.
	unlock, err := lockFile("/run/gompi-cluster.lock")
	if err != nil {
		return err
	}
	defer unlock()
	x, err := freeSubnet(c.logf)
	if err != nil {
		return err
	}
	c.Subnet = fmt.Sprintf("10.200.%d", x)
	c.RootAddr = c.Subnet + ".1"
	c.switchNS = c.ID + "-sw"
	if err := ipCmd("netns", "add", c.switchNS); err != nil {
		return err
	}
	sw := []string{"-n", c.switchNS}
	for _, args := range [][]string{
		{"link", "add", "br0", "type", "bridge"},
		{"link", "set", "br0", "up"},
	} {
		if err := ipCmd(append(sw, args...)...); err != nil {
			return err
		}
	}
	c.rootLink = fmt.Sprintf("gompi-r%d", x)
	if err := ipCmd("link", "add", c.rootLink, "type", "veth", "peer", "name", "root", "netns", c.switchNS); err != nil {
		return err
	}
	for _, args := range [][]string{
		append(sw, "link", "set", "root", "master", "br0"),
		append(sw, "link", "set", "root", "up"),
		{"addr", "add", c.RootAddr + "/24", "dev", c.rootLink},
		{"link", "set", c.rootLink, "up"},
	} {
		if err := ipCmd(args...); err != nil {
			return err
		}
	}
	for i := 1; i <= hosts; i++ {
		h := &Host{
			c:        c,
			Name:     fmt.Sprintf("n%d", i),
			Addr:     fmt.Sprintf("%s.%d", c.Subnet, 10+i),
			NS:       fmt.Sprintf("%s-%d", c.ID, i),
			port:     fmt.Sprintf("h%d", i),
			Identity: fmt.Sprintf("node-%d-of-%s", i, c.ID),
		}
		h.Log = filepath.Join(c.Dir, h.Name, "sshd.log")
		c.Hosts = append(c.Hosts, h)
		if err := ipCmd("netns", "add", h.NS); err != nil {
			return err
		}
		hn := []string{"-n", h.NS}
		for _, args := range [][]string{
			{"link", "add", "eth0", "netns", h.NS, "type", "veth", "peer", "name", h.port, "netns", c.switchNS},
			append(sw, "link", "set", h.port, "master", "br0"),
			append(sw, "link", "set", h.port, "up"),
			append(hn, "addr", "add", h.Addr+"/24", "dev", "eth0"),
			append(hn, "link", "set", "eth0", "up"),
			append(hn, "link", "set", "lo", "up"),
		} {
			if err := ipCmd(args...); err != nil {
				return err
			}
		}
	}
	return nil
}

// freeSubnet picks X such that no address or route in the root namespace
// lies in or around 10.200.X.0/24. Routes wider than a /16 (a default route,
// 10.0.0.0/8) do not count: the cluster's /24 is more specific, and only
// addresses the harness assigns are ever used.
func freeSubnet(logf func(string, ...any)) (int, error) {
	var nets []*net.IPNet
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return 0, err
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
			nets = append(nets, ipn)
		}
	}
	if out, err := exec.Command("ip", "-4", "route", "show", "table", "all").Output(); err == nil {
		for _, l := range strings.Split(string(out), "\n") {
			f := strings.Fields(l)
			if len(f) > 0 && f[0] != "default" && f[0] != "local" && f[0] != "broadcast" {
				dst := f[0]
				if !strings.Contains(dst, "/") {
					dst += "/32"
				}
				if _, ipn, err := net.ParseCIDR(dst); err == nil {
					if ones, _ := ipn.Mask.Size(); ones >= 16 {
						nets = append(nets, ipn)
					} else if ipn.Contains(net.IPv4(10, 200, 0, 0)) {
						logf("cluster: route %s covers the test range 10.200.0.0/16; the cluster's /24 takes precedence for its own addresses", f[0])
					}
				}
			}
		}
	}
	overlaps := func(x int) bool {
		_, mine, _ := net.ParseCIDR(fmt.Sprintf("10.200.%d.0/24", x))
		for _, n := range nets {
			if mine.Contains(n.IP) || n.Contains(mine.IP) {
				return true
			}
		}
		return false
	}
	start := os.Getpid() % 250
	for k := 0; k < 250; k++ {
		if x := 1 + (start+k)%250; !overlaps(x) {
			return x, nil
		}
	}
	return 0, errors.New("cluster: no free /24 in 10.200.0.0/16")
}

func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}

// keys generates every host key and the authorised user key, and writes
// each host's sshd_config.
func (c *Cluster) keys() error {
	c.userKey = filepath.Join(c.Dir, "user", "id_ed25519")
	if err := keygen(c.userKey, "gompi-test-user"); err != nil {
		return err
	}
	pub, err := os.ReadFile(c.userKey + ".pub")
	if err != nil {
		return err
	}
	auth := filepath.Join(c.Dir, "authorized_keys")
	if err := os.WriteFile(auth, pub, 0o600); err != nil {
		return err
	}
	for _, h := range c.Hosts {
		hd := filepath.Join(c.Dir, h.Name)
		key := filepath.Join(hd, "ssh_host_ed25519_key")
		if err := keygen(key, h.Name); err != nil {
			return err
		}
		b, err := os.ReadFile(key + ".pub")
		if err != nil {
			return err
		}
		f := strings.Fields(string(b))
		h.HostPub = f[0] + " " + f[1]
		h.config = filepath.Join(hd, "sshd_config")
		conf := fmt.Sprintf(`# generated by gompi's test cluster for %s
ListenAddress %s:22
HostKey %s
PidFile %s
AuthorizedKeysFile %s
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
X11Forwarding no
PrintMotd no
PrintLastLog no
MaxStartups 100:30:200
MaxSessions 100
ClientAliveInterval 2
ClientAliveCountMax 3
LogLevel VERBOSE
`, h.Name, h.Addr, key, filepath.Join(hd, "sshd.pid"), auth)
		if err := os.WriteFile(h.config, []byte(conf), 0o600); err != nil {
			return err
		}
	}
	return nil
}

func keygen(path, comment string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ssh-keygen %s: %v: %s", path, err, bytes.TrimSpace(out))
	}
	return nil
}

// StartSSHD starts the host's sshd in its namespace, with a fresh tmpfs on
// /tmp holding IdentityFile, and waits until it listens.
func (h *Host) StartSSHD() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sshd != nil {
		return nil
	}
	logf, err := os.OpenFile(h.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	var from int64 // only this start's part of the log counts
	if st, err := logf.Stat(); err == nil {
		from = st.Size()
	}
	defer logf.Close()
	script := fmt.Sprintf("mount -t tmpfs -o size=64m,mode=1777 gompi-tmp /tmp && printf %%s %s > %s && exec %s -D -e -f %s",
		h.Identity, IdentityFile, sshdPath, h.config)
	cmd := exec.Command("ip", "netns", "exec", h.NS, "unshare", "--mount", "--propagation", "private", "sh", "-c", script)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Dies with the test process even on SIGKILL; the next New removes the
	// namespaces.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := launcher.StartLocked(cmd); err != nil {
		return fmt.Errorf("start sshd on %s: %w", h.Name, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	h.sshd, h.done = cmd, done
	// Listening is visible in the log; the namespace's address is only
	// reachable from here once the root link is up, so poll the log rather
	// than connecting (a connection would show in the sshd log as noise).
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(h.Log)
		if int64(len(b)) >= from {
			b = b[from:]
		}
		if bytes.Contains(b, []byte("Server listening on "+h.Addr)) {
			return nil
		}
		select {
		case <-done:
			h.sshd = nil
			return fmt.Errorf("sshd on %s exited at start: %s", h.Name, tail(b))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sshd on %s did not start listening within 10s: %s", h.Name, tail(b))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func tail(b []byte) string {
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(bytes.TrimSpace(b))
}

// AddNetwork gives every host a second interface dev on a network of its
// own, subnet.(11+i)/24 on host i (the root namespace has no address on
// it), through the same switch, and returns the hosts' addresses. A subnet
// with a colon is an IPv6 prefix ("fd42::"): host i gets prefix+hex(11+i)
// /64 and no IPv4 address. Calling it again with the same dev returns the
// same addresses.
func (c *Cluster) AddNetwork(dev, subnet string) ([]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if addrs, ok := c.networks[dev]; ok {
		return addrs, nil
	}
	sw := []string{"-n", c.switchNS}
	var addrs []string
	for i, h := range c.Hosts {
		addr := fmt.Sprintf("%s.%d", subnet, 11+i)
		port := h.port + "-" + dev
		hn := []string{"-n", h.NS}
		addrAdd := append(hn, "addr", "add", addr+"/24", "dev", dev)
		if strings.Contains(subnet, ":") {
			// nodad: usable at once, without duplicate address detection's wait.
			addr = fmt.Sprintf("%s%x", subnet, 11+i)
			addrAdd = append(hn, "-6", "addr", "add", addr+"/64", "dev", dev, "nodad")
		}
		for _, args := range [][]string{
			{"link", "add", dev, "netns", h.NS, "type", "veth", "peer", "name", port, "netns", c.switchNS},
			append(sw, "link", "set", port, "master", "br0"),
			append(sw, "link", "set", port, "up"),
			addrAdd,
			append(hn, "link", "set", dev, "up"),
		} {
			if err := ipCmd(args...); err != nil {
				return nil, err
			}
		}
		addrs = append(addrs, addr)
	}
	if c.networks == nil {
		c.networks = map[string][]string{}
	}
	c.networks[dev] = addrs
	return addrs, nil
}
