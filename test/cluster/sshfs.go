package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// ShareConfig describes a directory shared by every host through sshfs.
type ShareConfig struct {
	// Server is the exporting host: its sshd serves the directory with
	// sftp-server. Default: the first host.
	Server *Host
	// Mount is where every host mounts it, in its own mount namespace
	// (default /tmp/gompi-shared: under the host's private /tmp, so no
	// host sees another's mount).
	Mount string
	// Options are sshfs -o options. Default DefaultShareOptions: the kernel
	// keeps file pages across opens, so a client may read stale data and
	// write back stale bytes of a page, as NFS clients may; attributes are
	// not cached (a read past the cached end of file asks the server for
	// the size, which NFS's close-to-open consistency also gives).
	Options []string
}

// DefaultShareOptions are the sshfs options of a Share when none are given.
var DefaultShareOptions = []string{"kernel_cache", "dir_cache=no", "attr_timeout=0", "entry_timeout=0"}

// Share is a directory exported by one host and mounted with sshfs (FUSE)
// on every host, the server included (its I/O goes through its own client
// cache too, as on an NFS client).
type Share struct {
	// Dir is the exported directory on the server. It is under the
	// cluster's Dir, so the test process can read the server's bytes
	// directly, bypassing every client cache.
	Dir string
	// Mount is the mount point on every host.
	Mount  string
	Server *Host
	c      *Cluster
}

// Share exports a fresh directory from cfg.Server and mounts it on every
// host. Unmount (or the cluster's Close) undoes it. It needs sshfs and
// fusermount3 (test/setup.sh installs them) and /dev/fuse.
func (c *Cluster) Share(cfg ShareConfig) (*Share, error) {
	if err := CheckSSHFS(); err != nil {
		return nil, err
	}
	if cfg.Server == nil {
		cfg.Server = c.Hosts[0]
	}
	if cfg.Mount == "" {
		cfg.Mount = "/tmp/gompi-shared"
	}
	if cfg.Options == nil {
		cfg.Options = DefaultShareOptions
	}
	dir, err := os.MkdirTemp(c.Dir, "export-"+cfg.Server.Name+"-")
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		return nil, err
	}
	s := &Share{Dir: dir, Mount: cfg.Mount, Server: cfg.Server, c: c}
	opts := strings.Join(cfg.Options, ",")
	for _, h := range c.Hosts {
		if _, err := h.Run("mkdir", "-p", s.Mount); err != nil {
			s.Unmount()
			return nil, err
		}
		// The client's ssh_config names the hosts and holds the key;
		// sftp-server is run as a command, so the hosts' sshd_config needs
		// no Subsystem line. sshfs daemonizes once mounted.
		if _, err := h.Run("sshfs", "-F", c.Client.Config,
			"-o", "sftp_server=/usr/lib/openssh/sftp-server,"+opts,
			s.Server.Name+":"+dir, s.Mount); err != nil {
			s.Unmount()
			return nil, fmt.Errorf("sshfs on %s from %s: %w", h.Name, s.Server.Name, err)
		}
	}
	c.logf("cluster %s: %s:%s mounted on every host at %s (sshfs -o %s)", c.ID, s.Server.Name, dir, s.Mount, opts)
	return s, nil
}

// Unmount unmounts the share on every host and waits for every host's
// sshfs (and the server's sftp-server sessions) to end.
func (s *Share) Unmount() error {
	var errs []error
	for _, h := range s.c.Hosts {
		if out, err := h.Run("sh", "-c", "! mountpoint -q "+s.Mount+" || fusermount3 -u "+s.Mount); err != nil {
			errs = append(errs, fmt.Errorf("%w: %s", err, out))
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, h := range s.c.Hosts {
		for {
			left, err := h.ProcsNamed("sshfs")
			if err != nil || len(left) == 0 {
				break
			}
			if time.Now().After(deadline) {
				errs = append(errs, fmt.Errorf("host %s: sshfs still running 10s after unmount: %v", h.Name, left))
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return errors.Join(errs...)
}

// Path is name's path under the mount point (as every host sees it).
func (s *Share) Path(name string) string { return filepath.Join(s.Mount, name) }

// ServerPath is name's path in the exported directory, for reading the
// bytes the server holds from the test process.
func (s *Share) ServerPath(name string) string { return filepath.Join(s.Dir, name) }

// CheckSSHFS reports why a Share cannot be made here, or nil.
func CheckSSHFS() error {
	for _, p := range []string{"sshfs", "fusermount3", "/usr/lib/openssh/sftp-server"} {
		if _, err := exec.LookPath(p); err != nil {
			return fmt.Errorf("shared file system needs %s (run test/setup.sh as root to install sshfs and fuse3)", p)
		}
	}
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("shared file system needs FUSE: %v", err)
	}
	f.Close()
	return nil
}

// RunContext is Run with a caller's context (no 30 s limit).
func (h *Host) RunContext(ctx context.Context, argv ...string) (string, error) {
	cmd, err := h.Command(ctx, argv...)
	if err != nil {
		return "", err
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("on %s: %s: %w: %.2000s", h.Name, strings.Join(argv, " "), err, out)
	}
	return string(out), nil
}
