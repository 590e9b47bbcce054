package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gompi/gompi/internal/launcher"
)

// Slurm is a Slurm cluster on the hosts: slurmctld on the first host,
// slurmd on every host (its spool, state and PID file in the host's
// private /tmp), one munged in the root namespace whose socket every
// daemon and client reaches through the shared filesystem.
type Slurm struct {
	// Conf is slurm.conf; clients (srun, salloc, sbatch, scancel, squeue)
	// need SLURM_CONF=Conf in their environment (Env).
	Conf string
	// Dir holds the configuration, munge key and socket, state and logs.
	Dir string
	// Partition spans every host.
	Partition string
	// CPUs is each node's CPU count in slurm.conf.
	CPUs int

	c     *Cluster
	mu    sync.Mutex
	procs []*exec.Cmd
	pids  map[int]bool
}

// SlurmCPUs is each node's CPU count: 24 tasks fit on 3 nodes.
const SlurmCPUs = 8

// CheckSlurm reports why Slurm cannot run here, or nil.
func CheckSlurm() error {
	for _, p := range []string{"slurmctld", "slurmd", "slurmstepd", "srun", "salloc", "sbatch", "scancel", "munged"} {
		if _, err := exec.LookPath(p); err != nil {
			if _, err := os.Stat("/usr/sbin/" + p); err != nil {
				return fmt.Errorf("slurm test cluster needs %s (Debian slurmctld, slurmd, slurm-client, munge; test/setup.sh)", p)
			}
		}
	}
	return nil
}

// Env is what a Slurm client in the root namespace needs.
func (s *Slurm) Env() []string { return []string{"SLURM_CONF=" + s.Conf} }

// StartSlurm brings Slurm up on the cluster's hosts and waits until every
// node is idle.
func (c *Cluster) StartSlurm() (_ *Slurm, err error) {
	if err := CheckSlurm(); err != nil {
		return nil, err
	}
	dir := filepath.Join(c.Dir, "slurm")
	if err := os.MkdirAll(filepath.Join(dir, "state"), 0o700); err != nil {
		return nil, err
	}
	os.Chmod(dir, 0o700)
	s := &Slurm{Conf: filepath.Join(dir, "slurm.conf"), Dir: dir, Partition: "gompi", CPUs: SlurmCPUs, c: c, pids: map[int]bool{}}
	defer func() {
		if err != nil {
			s.Stop()
			err = fmt.Errorf("%w\n%s", err, s.Logs())
		}
	}()
	key := make([]byte, 1024)
	for i := range key {
		key[i] = byte(i*7 + len(c.ID))
	}
	if f, err := os.Open("/dev/urandom"); err == nil {
		f.Read(key)
		f.Close()
	}
	if err := os.WriteFile(filepath.Join(dir, "munge.key"), key, 0o400); err != nil {
		return nil, err
	}
	sock := filepath.Join(dir, "munge.sock")
	var nodes []string
	for _, h := range c.Hosts {
		nodes = append(nodes, h.Name)
	}
	// slurmctld insists on running on the host SlurmctldHost names, and
	// the namespaces share this machine's host name.
	ctlName, err := os.Hostname()
	if err != nil {
		return nil, err
	}
	ctlName, _, _ = strings.Cut(ctlName, ".")
	conf := fmt.Sprintf(`# gompi test cluster %[1]s (test/cluster/slurm.go)
ClusterName=%[2]s
SlurmctldHost=%[3]s(%[4]s)
MailProg=/bin/true
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=%[5]s
StateSaveLocation=%[6]s/state
SlurmctldPidFile=%[6]s/slurmctld.pid
SlurmctldLogFile=%[6]s/slurmctld.log
SlurmdSpoolDir=/tmp/slurmd
SlurmdPidFile=/tmp/slurmd.pid
SlurmdLogFile=%[6]s/slurmd-%%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
MpiDefault=none
PropagateResourceLimits=NONE
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
MessageTimeout=10
KillWait=3
MinJobAge=2
InactiveLimit=0
Waittime=0
SlurmctldDebug=info
SlurmdDebug=info
NodeName=DEFAULT CPUs=%[7]d RealMemory=1000 State=UNKNOWN
`, c.ID, strings.ReplaceAll(c.ID, "-", ""), ctlName, c.Hosts[0].Addr, sock, dir, SlurmCPUs)
	for _, h := range c.Hosts {
		conf += fmt.Sprintf("NodeName=%s NodeAddr=%s NodeHostname=%s\n", h.Name, h.Addr, h.Name)
	}
	conf += fmt.Sprintf("PartitionName=%s Nodes=%s Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO\n", s.Partition, strings.Join(nodes, ","))
	if err := os.WriteFile(s.Conf, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	// munged in the root namespace: its socket is a path, reachable from
	// every network namespace.
	if err := s.daemon(nil, "munged", "munged", "-F", "--force", "--socket="+sock,
		"--key-file="+filepath.Join(dir, "munge.key"), "--pid-file="+filepath.Join(dir, "munged.pid"),
		"--log-file="+filepath.Join(dir, "munged.log"), "--seed-file="+filepath.Join(dir, "munged.seed")); err != nil {
		return nil, err
	}
	if err := waitFile(sock, 10*time.Second); err != nil {
		return nil, fmt.Errorf("munged: %w: %s", err, readTail(filepath.Join(dir, "munged.log")))
	}
	// ip netns exec gave each host a fresh /sys without the cgroup mounts,
	// and slurmd initialises its cgroup plugin even with cgroup-free
	// process tracking: mount the v1 hierarchies the machine has (the same
	// hierarchies, seen from the host's mount namespace).
	script, plugin := cgroupScript()
	if err := os.WriteFile(filepath.Join(dir, "cgroup.conf"), []byte("CgroupPlugin="+plugin+"\nCgroupMountpoint=/sys/fs/cgroup\nIgnoreSystemd=yes\n"), 0o644); err != nil {
		return nil, err
	}
	for _, h := range c.Hosts {
		if _, err := h.Run("sh", "-c", script); err != nil {
			return nil, fmt.Errorf("cgroups on %s: %w", h.Name, err)
		}
	}
	if err := s.daemon(c.Hosts[0], "slurmctld", "/usr/sbin/slurmctld", "-D", "-i", "-f", s.Conf); err != nil {
		return nil, err
	}
	// slurmd backs off for ever longer between registrations: start it
	// once the controller answers.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if out, err := s.Client("scontrol", "ping").CombinedOutput(); err == nil && strings.Contains(string(out), "UP") {
			break
		} else if time.Now().After(deadline) {
			return nil, fmt.Errorf("slurmctld not up within 30s: %s", out)
		}
	}
	for _, h := range c.Hosts {
		if _, err := h.Run("mkdir", "-p", "/tmp/slurmd"); err != nil {
			return nil, err
		}
		if err := s.daemon(h, "slurmd", "/usr/sbin/slurmd", "-D", "-N", h.Name, "-f", s.Conf); err != nil {
			return nil, err
		}
	}
	// Every node idle.
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, _ := s.Client("sinfo", "-h", "-N", "-o", "%N %t").CombinedOutput()
		idle := 0
		for _, l := range strings.Split(string(out), "\n") {
			if f := strings.Fields(l); len(f) == 2 && f[1] == "idle" {
				idle++
			}
		}
		if idle == len(c.Hosts) {
			c.logf("slurm on %s: %d nodes idle (conf %s)", c.ID, idle, s.Conf)
			return s, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("slurm nodes not idle within 60s: sinfo: %s\nslurmctld.log: %s", bytes.TrimSpace(out), readTail(filepath.Join(dir, "slurmctld.log")))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// daemon starts argv in the foreground, on host h (its netns and /tmp) or
// in the root namespace when h is nil. It dies with the test process.
func (s *Slurm) daemon(h *Host, name string, argv ...string) error {
	var cmd *exec.Cmd
	if h == nil {
		cmd = exec.Command(argv[0], argv[1:]...)
	} else {
		var err error
		if cmd, err = h.Command(context.Background(), argv...); err != nil {
			return err
		}
	}
	cmd.Env = append(os.Environ(), "SLURM_CONF="+s.Conf)
	logf, err := os.OpenFile(filepath.Join(s.Dir, name+"-"+hostName(h)+".out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := launcher.StartLocked(cmd); err != nil {
		return fmt.Errorf("start %s on %s: %w", name, hostName(h), err)
	}
	s.mu.Lock()
	s.procs = append(s.procs, cmd)
	s.mu.Unlock()
	go cmd.Wait()
	if h != nil {
		// nsenter forks the daemon: remember both, so Procs leaves them out.
		h.addDaemon(cmd.Process.Pid)
		go func() {
			for i := 0; i < 100; i++ {
				if ps, _ := nsProcs(h.NS); len(ps) > 0 {
					for _, p := range ps {
						if p.PPID == cmd.Process.Pid {
							h.addDaemon(p.PID)
							return
						}
					}
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	return nil
}

func hostName(h *Host) string {
	if h == nil {
		return "root"
	}
	return h.Name
}

// Client is a Slurm client command (srun, salloc, ...) in the root
// namespace, configured for this cluster.
func (s *Slurm) Client(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), s.Env()...)
	return cmd
}

// Stop ends every Slurm daemon (jobs die with their slurmd's steps).
func (s *Slurm) Stop() {
	s.mu.Lock()
	procs := s.procs
	s.procs = nil
	s.mu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].Process.Signal(syscall.SIGTERM)
	}
	for _, h := range s.c.Hosts {
		h.clearDaemons()
	}
}

// Logs returns the tail of every Slurm log, for a failing test.
func (s *Slurm) Logs() string {
	var b strings.Builder
	ents, _ := os.ReadDir(s.Dir)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".log") || strings.HasSuffix(e.Name(), ".out") {
			fmt.Fprintf(&b, "== %s\n%s\n", e.Name(), readTail(filepath.Join(s.Dir, e.Name())))
		}
	}
	return b.String()
}

func readTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return tail(b)
}

func waitFile(path string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New(path + " did not appear")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cgroupScript returns a script that mounts, in a host's mount namespace,
// /sys/fs/cgroup as the root namespace has it, and the Slurm cgroup plugin
// for that layout: the unified hierarchy alone (cgroup/v2), or a tmpfs
// with one mount per v1 hierarchy (cgroup/v1).
func cgroupScript() (string, string) {
	out, _ := os.ReadFile("/proc/self/mounts")
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[1] == "/sys/fs/cgroup" && f[2] == "cgroup2" {
			return "mountpoint -q /sys/fs/cgroup || mount -t cgroup2 cgroup2 /sys/fs/cgroup", "cgroup/v2"
		}
	}
	var b strings.Builder
	b.WriteString("set -e; mountpoint -q /sys/fs/cgroup && exit 0; mount -t tmpfs -o mode=755 cgroup /sys/fs/cgroup\n")
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) < 4 || !strings.HasPrefix(f[1], "/sys/fs/cgroup/") {
			continue
		}
		sub := strings.TrimPrefix(f[1], "/sys/fs/cgroup/")
		switch f[2] {
		case "cgroup":
			var opts []string
			for _, o := range strings.Split(f[3], ",") {
				if o != "rw" && o != "relatime" && o != "ro" && o != "nosuid" && o != "nodev" && o != "noexec" {
					opts = append(opts, o)
				}
			}
			fmt.Fprintf(&b, "mkdir -p /sys/fs/cgroup/%s; mount -t cgroup -o %s cgroup /sys/fs/cgroup/%s\n", sub, strings.Join(opts, ","), sub)
		case "cgroup2":
			fmt.Fprintf(&b, "mkdir -p /sys/fs/cgroup/%s; mount -t cgroup2 cgroup2 /sys/fs/cgroup/%s\n", sub, sub)
		}
	}
	return b.String(), "cgroup/v1"
}
