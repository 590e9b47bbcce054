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
// gompiexec (its built-in SSH client with and without persistent proxies,
// and for reference the same OpenSSH agent script as Hydra) and for
// mpiexec.hydra -launcher ssh.
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
	// gompiexec as users run it: its built-in SSH client (HOME holds the
	// cluster's ssh config, keys and known_hosts); and, for reference,
	// through the same OpenSSH agent script Hydra uses.
	builtin := append([]string{"-launcher", "ssh", "-wdir", "/"}, args...)
	viaAgent := append([]string{"-launcher-exec", cl.Agent, "-wdir", "/"}, args...)
	// Hydra's proxies connect back to mpiexec; its host name resolves to an
	// address the hosts cannot reach, so name the interface into the cluster.
	hArgs := append([]string{"-launcher", "ssh", "-launcher-exec", cl.Agent, "-iface", c.RootLink(), "-wdir", "/"}, args...)
	fmt.Printf("\nover SSH: %d hosts (network namespaces, OpenSSH sshd); hydra via %s\n\n", len(c.Hosts), cl.Agent)
	env := append(os.Environ(), cl.Env()...)
	// -proxy-persist: "cold" is a launch that starts the host's persistent
	// proxy (none running), "warm" one that finds it.
	persist := append([]string{"-proxy-persist", "600"}, builtin...)
	run := func(args []string) (time.Duration, error) {
		return timeRunEnv(filepath.Join(bin, "gompiexec"), args, env)
	}
	var gs, as, hs, cold, warm []time.Duration
	for i := 0; i < reps+1; i++ {
		g, err := run(builtin)
		if err != nil {
			return fmt.Errorf("gompiexec: %w", err)
		}
		a, err := run(viaAgent)
		if err != nil {
			return fmt.Errorf("gompiexec via agent: %w", err)
		}
		h, err := timeRun(hydra, hArgs)
		if err != nil {
			return fmt.Errorf("hydra: %w", err)
		}
		if err := c.StopPersistentProxies(5 * time.Second); err != nil {
			return err
		}
		pc, err := run(persist)
		if err != nil {
			return fmt.Errorf("gompiexec -proxy-persist (cold): %w", err)
		}
		pw, err := run(persist)
		if err != nil {
			return fmt.Errorf("gompiexec -proxy-persist (warm): %w", err)
		}
		if i > 0 {
			gs, as, hs = append(gs, g), append(as, a), append(hs, h)
			cold, warm = append(cold, pc), append(warm, pw)
		}
	}
	if err := c.StopPersistentProxies(5 * time.Second); err != nil {
		return err
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
	g, a, h := median(gs), median(as), median(hs)
	w, pc := median(warm), median(cold)
	verdict := "met"
	if float64(w)/float64(h) > 0.5 {
		verdict = "MISSED"
	}
	row := func(name string, d time.Duration, goal string) {
		fmt.Printf("%-44s %12s %12s %7.2fx  %s\n", name, round(d), round(h), float64(d)/float64(h), goal)
	}
	fmt.Printf("%-44s %12s %12s %8s  %s\n", "case: 3x8 -n 24 /bin/true", "gompiexec", "hydra", "ratio", "goal")
	row("built-in ssh, -proxy-persist 600 (warm)", w, "<= 0.5x "+verdict)
	row("built-in ssh, -proxy-persist 600 (cold)", pc, "")
	row("built-in ssh (default: a login per host)", g, "")
	row("both via OpenSSH's ssh", a, "")
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
