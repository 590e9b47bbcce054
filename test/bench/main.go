// Command bench times gompiexec against Debian's mpiexec.hydra in the same
// run and prints medians and ratios (make bench; -ssh: over SSH on the
// test/cluster namespace cluster, make bench-ssh; -osu: message passing of
// the Go rank runtime against MPICH, see osu.go). Runs are interleaved so
// both launchers see the same machine load.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

type benchCase struct {
	name string
	args []string // after the launcher
	goal float64  // gompi/hydra ratio to meet (<=)
}

func main() {
	gompi := flag.String("gompiexec", "bin/gompiexec", "gompiexec to measure")
	hydra := flag.String("hydra", "mpiexec.hydra", "reference launcher")
	reps := flag.Int("reps", 11, "timed runs per case and launcher (median reported)")
	ssh := flag.Bool("ssh", false, "only time -n 24 /bin/true over SSH on a 3-host namespace test cluster (needs root)")
	osu := flag.Bool("osu", false, "instead of launch times, compare the Go rank runtime (cmd/gompi-bench) with MPICH (test/bench/osu/osu.c): latency, bandwidth, allreduce, barrier")
	osuReps := flag.Int("osu-reps", 5, "with -osu: rounds per benchmark (median reported)")
	osuMax := flag.Int("osu-max", 0, "with -osu: largest message size (0: 8 MiB, as osu.c)")
	osuIters := flag.Int("osu-iters", 0, "with -osu: iterations per size (0: osu.c's counts)")
	osuNP4 := flag.Int("osu-np4-iters", 200, "with -osu: iterations per size of the 4-rank pairs ping-pong and barrier (oversubscribed on 2 cores)")
	osuSVG := flag.String("osu-svg", "bench-out/osu.svg", "with -osu: plot of latency and bandwidth (SVG; a PNG is written next to it; empty: none)")
	osuBin := flag.String("gompi-bench", "", "with -osu: gompi-bench binary (default: built from ./cmd/gompi-bench)")
	osuTimeout := flag.Duration("osu-timeout", 10*time.Minute, "with -osu: limit for one benchmark run")
	slurm := flag.Bool("slurm", false, "only time -n 24 /bin/true inside a Slurm allocation on a 3-node namespace test cluster (needs root): slurm launcher, ssh, hydra -bootstrap slurm, bare srun")
	inner := flag.Bool("slurm-inner", false, "internal: the -slurm timing loop, run under salloc")
	innerHosts := flag.String("inner-hostfile", "", "internal (-slurm-inner)")
	innerHome := flag.String("inner-home", "", "internal (-slurm-inner)")
	innerIface := flag.String("inner-iface", "", "internal (-slurm-inner)")
	baseline := flag.String("baseline", "", "with -slurm: instead of all cases, time this other gompiexec (gompi-proxy beside it) against -gompiexec with the slurm launcher, interleaved in alternating order, with hydra and bare srun (A/B of a change)")
	stdout := flag.Bool("stdout", false, "only the stdout-throughput cases (ranks writing 222 MB through the launcher), not the launch times")
	stdoutReps := flag.Int("stdout-reps", 5, "timed runs per stdout-throughput case and launcher (median reported)")
	io := flag.Bool("io", false, "instead of launch times, compare MPI-IO of the Go runtime (cmd/gompi-iobench, runtime/mpiio) with ROMIO (test/bench/io/iobench.c) and dd (make bench-io)")
	ioDir := flag.String("io-dir", "/var/tmp", "with -io: directory for the files (a real disk, not tmpfs)")
	ioCache := flag.String("io-cache", "/dev/shm", "with -io: node-local cache directory for the cached mode")
	ioBytes := flag.Int64("io-bytes", 400_000_000, "with -io: bytes per run, all ranks together")
	ioReps := flag.Int("io-reps", 3, "with -io: rounds (median reported)")
	ioRanks := flag.String("io-ranks", "2,4", "with -io: rank counts")
	ioCSV := flag.String("io-csv", "bench-out/io.csv", "with -io: CSV of the medians (empty: none)")
	ioSVG := flag.String("io-svg", "bench-out/io.svg", "with -io: bar plot (SVG; a PNG is written next to it; empty: none)")
	ioBin := flag.String("gompi-iobench", "", "with -io: gompi-iobench binary (default: built from ./cmd/gompi-iobench; none: only dd and ROMIO)")
	flag.Parse()
	if *inner {
		if err := slurmInner(*gompi, *baseline, *hydra, *reps, *innerHosts, *innerHome, *innerIface); err != nil {
			fmt.Fprintln(os.Stderr, "bench: slurm:", err)
			os.Exit(1)
		}
		return
	}
	if *slurm {
		if err := benchSlurm(*gompi, *baseline, *hydra, *reps); err != nil {
			fmt.Fprintln(os.Stderr, "bench: slurm:", err)
			os.Exit(1)
		}
		return
	}
	if _, err := exec.LookPath(*hydra); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %s not found (run test/setup.sh)\n", *hydra)
		os.Exit(1)
	}
	dir, err := os.MkdirTemp("", "gompi-bench-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer os.RemoveAll(dir)
	if *io {
		var ranks []int
		for _, f := range strings.Split(*ioRanks, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				fmt.Fprintf(os.Stderr, "bench: -io-ranks %q: want a list of positive integers\n", *ioRanks)
				os.Exit(2)
			}
			ranks = append(ranks, n)
		}
		err := benchIO(ioConfig{gompiexec: *gompi, iobench: *ioBin, dir: *ioDir, cacheDir: *ioCache, bytes: *ioBytes,
			reps: *ioReps, ranks: ranks, csv: *ioCSV, svg: *ioSVG, timeout: 10 * time.Minute}, dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: io:", err)
			os.RemoveAll(dir)
			os.Exit(1)
		}
		return
	}
	if *osu {
		err := benchOSU(osuConfig{gompiexec: *gompi, hydra: *hydra, gompiBench: *osuBin, reps: *osuReps,
			max: *osuMax, iters: *osuIters, np4Iters: *osuNP4, svg: *osuSVG, timeout: *osuTimeout}, dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: osu:", err)
			os.RemoveAll(dir)
			os.Exit(1)
		}
		return
	}
	if *ssh {
		if err := benchSSH(*gompi, *hydra, *reps); err != nil {
			fmt.Fprintln(os.Stderr, "bench: ssh:", err)
			os.RemoveAll(dir)
			os.Exit(1)
		}
		return
	}
	if *stdout {
		if err := benchStdout(*gompi, *hydra, *stdoutReps, dir); err != nil {
			fmt.Fprintln(os.Stderr, "bench: stdout:", err)
			os.RemoveAll(dir)
			os.Exit(1)
		}
		return
	}
	hello := filepath.Join(dir, "hello")
	if out, err := exec.Command("mpicc", "-O2", "-o", hello, "test/mpich/progs/hello.c").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "bench: mpicc: %v\n%s", err, out)
		os.Exit(1)
	}
	cases := []benchCase{
		{"-n 1 /bin/true", []string{"-n", "1", "/bin/true"}, 0},
		{"-n 4 /bin/true", []string{"-n", "4", "/bin/true"}, 0},
		{"-n 16 /bin/true", []string{"-n", "16", "/bin/true"}, 0},
		{"-n 64 /bin/true", []string{"-n", "64", "/bin/true"}, 0.5},
		{"-n 16 ./hello (MPICH)", []string{"-n", "16", hello}, 0.9},
	}
	floor := spawnFloor(64, *reps)
	fmt.Printf("machine floor: starting and reaping 64 /bin/true from one Go process takes %s (median)\n\n", round(floor))
	fmt.Printf("launch time, median of %d runs (wall clock of the whole command)\n\n", *reps)
	fmt.Printf("%-24s %12s %12s %8s  %s\n", "case", "gompiexec", "hydra", "ratio", "goal")
	for _, c := range cases {
		g, h, err := measure(*gompi, *hydra, c.args, *reps)
		if err != nil {
			fmt.Printf("%-24s error: %v\n", c.name, err)
			continue
		}
		ratio := float64(g) / float64(h)
		goal := ""
		if c.goal > 0 {
			verdict := "met"
			if ratio > c.goal {
				verdict = "MISSED"
			}
			goal = fmt.Sprintf("<= %.1fx %s", c.goal, verdict)
		}
		fmt.Printf("%-24s %12s %12s %7.2fx  %s\n", c.name, round(g), round(h), ratio, goal)
	}
	if err := benchStdout(*gompi, *hydra, *stdoutReps, dir); err != nil {
		fmt.Fprintln(os.Stderr, "bench: stdout:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
}

// spawnFloor is the machine's own limit for a launcher on one host: the
// time to fork/exec and reap n trivial processes, with no launcher at all.
func spawnFloor(n, reps int) time.Duration {
	var ds []time.Duration
	for i := 0; i < reps; i++ {
		start := time.Now()
		cmds := make([]*exec.Cmd, n)
		for k := range cmds {
			cmds[k] = exec.Command("/bin/true")
			if err := cmds[k].Start(); err != nil {
				fmt.Fprintln(os.Stderr, "bench:", err)
				os.Exit(1)
			}
		}
		for _, c := range cmds {
			c.Wait()
		}
		ds = append(ds, time.Since(start))
	}
	return median(ds)
}

func measure(gompi, hydra string, args []string, reps int) (time.Duration, time.Duration, error) {
	return measureWith(timeRun, gompi, hydra, args, reps)
}

// measureWith is measure with run timing each run.
func measureWith(run func(launcher string, args []string) (time.Duration, error), gompi, hydra string, args []string, reps int) (time.Duration, time.Duration, error) {
	var gs, hs []time.Duration
	for i := 0; i < reps+1; i++ {
		g, err := run(gompi, args)
		if err != nil {
			return 0, 0, fmt.Errorf("gompiexec: %w", err)
		}
		h, err := run(hydra, args)
		if err != nil {
			return 0, 0, fmt.Errorf("hydra: %w", err)
		}
		if i > 0 { // the first round warms caches
			gs, hs = append(gs, g), append(hs, h)
		}
	}
	return median(gs), median(hs), nil
}

func timeRun(launcher string, args []string) (time.Duration, error) {
	return timeRunEnv(launcher, args, nil)
}

// timeRunEnv times one run with env as the environment (nil: inherited).
func timeRunEnv(launcher string, args, env []string) (time.Duration, error) {
	cmd := exec.Command(launcher, args...)
	cmd.Env = env
	start := time.Now()
	out, err := cmd.CombinedOutput()
	d := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("%s %s: %v: %s", launcher, strings.Join(args, " "), err, out)
	}
	return d, nil
}

func median(ds []time.Duration) time.Duration {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2]
}

func round(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000)
}
