package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/gompi/gompi/test/cluster"
)

// benchSSH times launches over SSH on a 3-host namespace test cluster
// (test/cluster; needs root): -n 24 /bin/true with 8 slots per host, for
// gompiexec and for mpiexec.hydra -launcher ssh. Both reach the hosts
// through the same OpenSSH agent script (ssh -F <cluster client config>),
// so they pay the same SSH costs.
func benchSSH(gompi, hydra string, reps int) error {
	if err := cluster.Check(); err != nil {
		return err
	}
	c, err := cluster.New(cluster.Config{Hosts: 3})
	if err != nil {
		return err
	}
	defer c.Close()
	// The hosts see the cluster directory (not /tmp, which each host has
	// its own of): the proxy must be found there on every host.
	bin := filepath.Join(c.Dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return err
	}
	for _, name := range []string{"gompiexec", "gompi-proxy"} {
		if err := copyFile(filepath.Join(filepath.Dir(gompi), name), filepath.Join(bin, name)); err != nil {
			return fmt.Errorf("%v (build gompiexec and gompi-proxy into one directory)", err)
		}
	}
	hosts, err := c.Hostfile(8)
	if err != nil {
		return err
	}
	cl := c.Client
	args := []string{"-f", hosts, "-n", "24", "/bin/true"}
	gArgs := append([]string{"-launcher-exec", cl.Agent, "-wdir", "/"}, args...)
	// Hydra's proxies connect back to mpiexec; its host name resolves to an
	// address the hosts cannot reach, so name the interface into the cluster.
	hArgs := append([]string{"-launcher", "ssh", "-launcher-exec", cl.Agent, "-iface", c.RootLink(), "-wdir", "/"}, args...)
	fmt.Printf("\nover SSH: %d hosts (network namespaces, OpenSSH sshd), both launchers via %s\n\n", len(c.Hosts), cl.Agent)
	var gs, hs []time.Duration
	for i := 0; i < reps+1; i++ {
		g, err := timeRun(filepath.Join(bin, "gompiexec"), gArgs)
		if err != nil {
			return fmt.Errorf("gompiexec: %w", err)
		}
		h, err := timeRun(hydra, hArgs)
		if err != nil {
			return fmt.Errorf("hydra: %w", err)
		}
		if i > 0 {
			gs, hs = append(gs, g), append(hs, h)
		}
	}
	if err := c.WaitNoLeftovers(5 * time.Second); err != nil {
		fmt.Printf("warning: %v\n", err)
	}
	// The floor: one SSH login running /bin/true, as each launcher does
	// (concurrently) per host.
	var fs []time.Duration
	for i := 0; i < reps; i++ {
		d, err := timeRun(cl.Agent, []string{c.Hosts[0].Name, "/bin/true"})
		if err != nil {
			return err
		}
		fs = append(fs, d)
	}
	fmt.Printf("floor: one SSH login running /bin/true takes %s (median)\n\n", round(median(fs)))
	g, h := median(gs), median(hs)
	fmt.Printf("%-24s %12s %12s %8s\n", "case", "gompiexec", "hydra", "ratio")
	fmt.Printf("%-24s %12s %12s %7.2fx\n", "3x8 -n 24 /bin/true", round(g), round(h), float64(g)/float64(h))
	return nil
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
