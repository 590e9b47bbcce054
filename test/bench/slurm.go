package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/gompi/gompi/test/cluster"
)

// benchSlurm times -n 24 /bin/true on 3 nodes x 8 CPUs inside one Slurm
// allocation on the namespace test cluster (test/cluster, real Slurm;
// needs root): gompiexec with the slurm launcher, gompiexec over SSH
// (persistent proxies off and on), mpiexec.hydra -bootstrap slurm, and
// bare srun. The timing loop runs under salloc (this program again, with
// -slurm-inner), so every launcher sees the same allocation. With a
// baseline gompiexec, only the slurm launcher of both, hydra and srun are
// timed (an A/B of a change).
func benchSlurm(gompi, baseline, hydra string, reps int) error {
	if err := cluster.Check(); err != nil {
		return err
	}
	if err := cluster.CheckSlurm(); err != nil {
		return err
	}
	c, err := cluster.New(cluster.Config{Hosts: 3})
	if err != nil {
		return err
	}
	defer c.Close()
	s, err := c.StartSlurm()
	if err != nil {
		return err
	}
	defer s.Stop()
	bin := filepath.Join(c.Dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return err
	}
	copyPair := func(from, to string) error {
		if err := os.MkdirAll(to, 0o755); err != nil {
			return err
		}
		for _, name := range []string{"gompiexec", "gompi-proxy"} {
			if err := copyFile(filepath.Join(filepath.Dir(from), name), filepath.Join(to, name)); err != nil {
				return fmt.Errorf("%v (build gompiexec and gompi-proxy into one directory)", err)
			}
		}
		return nil
	}
	if err := copyPair(gompi, bin); err != nil {
		return err
	}
	innerBase := ""
	if baseline != "" {
		if err := copyPair(baseline, filepath.Join(bin, "baseline")); err != nil {
			return err
		}
		innerBase = filepath.Join(bin, "baseline", "gompiexec")
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	hosts, err := c.Hostfile(8)
	if err != nil {
		return err
	}
	cmd := s.Client("salloc", "--quiet", "-N", "3", "--ntasks-per-node=8", self, "-slurm-inner",
		"-gompiexec", filepath.Join(bin, "gompiexec"), "-baseline", innerBase, "-hydra", hydra, "-reps", fmt.Sprint(reps),
		"-inner-hostfile", hosts, "-inner-home", c.Client.Home, "-inner-iface", c.RootLink())
	cmd.Dir = bin
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	fmt.Printf("\ninside one Slurm allocation: %d nodes x 8 CPUs (network namespaces, Debian Slurm, munge)\n", len(c.Hosts))
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("salloc: %w", err)
	}
	c.StopPersistentProxies(5 * time.Second)
	if err := c.WaitNoLeftovers(5 * time.Second); err != nil {
		fmt.Printf("warning: %v\n", err)
	}
	return nil
}

// slurmInner is the timing loop, run under salloc.
func slurmInner(gompi, baseline, hydra string, reps int, hostfile, home, iface string) error {
	if os.Getenv("SLURM_JOB_ID") == "" {
		return errors.New("-slurm-inner: not inside a Slurm allocation")
	}
	args := []string{"-n", "24", "/bin/true"}
	sshEnv := append(os.Environ(), "HOME="+home)
	cases := []struct {
		name string
		run  func() (time.Duration, error)
	}{
		{"gompiexec -launcher slurm", func() (time.Duration, error) {
			return timeRun(gompi, append([]string{"-launcher", "slurm", "-wdir", "/"}, args...))
		}},
		{"mpiexec.hydra -bootstrap slurm", func() (time.Duration, error) {
			return timeRun(hydra, append([]string{"-bootstrap", "slurm", "-iface", iface, "-wdir", "/"}, args...))
		}},
		{"srun -n 24 /bin/true", func() (time.Duration, error) {
			return timeRun("srun", []string{"-n", "24", "/bin/true"})
		}},
		{"gompiexec -launcher ssh", func() (time.Duration, error) {
			return timeRunEnv(gompi, append([]string{"-launcher", "ssh", "-f", hostfile, "-wdir", "/"}, args...), sshEnv)
		}},
		{"gompiexec -launcher ssh -proxy-persist (warm)", func() (time.Duration, error) {
			return timeRunEnv(gompi, append([]string{"-launcher", "ssh", "-proxy-persist", "600", "-f", hostfile, "-wdir", "/"}, args...), sshEnv)
		}},
	}
	if baseline != "" {
		cases = append(cases[:3:3], struct {
			name string
			run  func() (time.Duration, error)
		}{"baseline gompiexec -launcher slurm", func() (time.Duration, error) {
			return timeRun(baseline, append([]string{"-launcher", "slurm", "-wdir", "/"}, args...))
		}})
	}
	ds := make([][]time.Duration, len(cases))
	// Interleaved rounds, the first one discarded (caches, persistent
	// proxies started); with a baseline, every other round runs the
	// cases in reverse order, so neither gompiexec always follows the
	// same one.
	for i := 0; i < reps+1; i++ {
		for kk := range cases {
			k := kk
			if baseline != "" && i%2 == 1 {
				k = len(cases) - 1 - kk
			}
			c := cases[k]
			d, err := c.run()
			if err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			if i > 0 {
				ds[k] = append(ds[k], d)
			}
		}
	}
	med := make([]time.Duration, len(cases))
	for k := range cases {
		med[k] = median(ds[k])
	}
	g, h, sr := med[0], med[1], med[2]
	fmt.Printf("load average: %s\n\n", loadavg())
	fmt.Printf("%-46s %12s %9s %9s\n", "-n 24 /bin/true, median of "+fmt.Sprint(reps), "time", "/hydra", "/srun")
	for k, c := range cases {
		fmt.Printf("%-46s %12s %8.2fx %8.2fx\n", c.name, round(med[k]), float64(med[k])/float64(h), float64(med[k])/float64(sr))
	}
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "MISSED"
	}
	if baseline != "" {
		fmt.Printf("\ngompiexec slurm / baseline: %.3fx\n", float64(g)/float64(med[3]))
	}
	fmt.Printf("\ngoal: gompiexec slurm <= 1.0x hydra slurm: %.2fx %s; <= 1.2x bare srun: %.2fx %s\n",
		float64(g)/float64(h), verdict(g <= h), float64(g)/float64(sr), verdict(float64(g) <= 1.2*float64(sr)))
	return nil
}
