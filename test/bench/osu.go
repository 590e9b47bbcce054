package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The -osu mode compares the Go rank runtime with MPICH on this host in the
// same run: test/bench/osu/osu.c (built with mpicc) under mpiexec.hydra,
// cmd/gompi-bench under gompiexec, and the same MPICH program under
// gompiexec. The three run interleaved (the order rotates every round), a
// few rounds each; every figure is the median over rounds per size.

// impl is one way of running the benchmark programs.
type impl struct {
	key, label string
	cmd        func(np int, bench string, extra []string) []string
}

// osuResults: impl key -> bench -> bytes -> values over rounds.
type osuResults map[string]map[string]map[int][]float64

func (r osuResults) add(impl, bench string, bytes int, v float64) {
	if r[impl] == nil {
		r[impl] = map[string]map[int][]float64{}
	}
	if r[impl][bench] == nil {
		r[impl][bench] = map[int][]float64{}
	}
	r[impl][bench][bytes] = append(r[impl][bench][bytes], v)
}

// med is the median of a size's values, and whether there are any.
func (r osuResults) med(impl, bench string, bytes int) (float64, bool) {
	vs := r[impl][bench][bytes]
	if len(vs) == 0 {
		return 0, false
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2], true
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2, true
}

func (r osuResults) sizes(impl, bench string) []int {
	var ns []int
	for n := range r[impl][bench] {
		ns = append(ns, n)
	}
	slices.Sort(ns)
	return ns
}

type osuConfig struct {
	gompiexec, hydra, gompiBench string
	reps                         int
	max, iters                   int // 0: osu.c's defaults
	np4Iters                     int
	svg                          string
	timeout                      time.Duration
}

func benchOSU(cfg osuConfig, dir string) error {
	osu := filepath.Join(dir, "osu")
	if out, err := exec.Command("mpicc", "-O2", "-o", osu, "test/bench/osu/osu.c").CombinedOutput(); err != nil {
		return fmt.Errorf("mpicc: %v\n%s", err, out)
	}
	if cfg.gompiBench == "" {
		cfg.gompiBench = filepath.Join(dir, "gompi-bench")
		if out, err := exec.Command("go", "build", "-o", cfg.gompiBench, "./cmd/gompi-bench").CombinedOutput(); err != nil {
			return fmt.Errorf("building gompi-bench: %v\n%s", err, out)
		}
	}
	args := func(np int, prog, bench string, extra []string) []string {
		return append([]string{"-n", strconv.Itoa(np), prog, bench}, extra...)
	}
	impls := []impl{
		{"mpich", "MPICH (hydra)", func(np int, b string, x []string) []string {
			return append([]string{cfg.hydra}, args(np, osu, b, x)...)
		}},
		{"gompi", "gompi runtime", func(np int, b string, x []string) []string {
			return append([]string{cfg.gompiexec}, args(np, cfg.gompiBench, b, x)...)
		}},
		{"mpichg", "MPICH (gompiexec)", func(np int, b string, x []string) []string {
			return append([]string{cfg.gompiexec}, args(np, osu, b, x)...)
		}},
	}
	var extra []string // osu.c's positional MAXBYTES [ITERS], which gompi-bench shares
	if cfg.max > 0 || cfg.iters > 0 {
		m := cfg.max
		if m <= 0 {
			m = 8 << 20
		}
		extra = append(extra, strconv.Itoa(m))
		if cfg.iters > 0 {
			extra = append(extra, strconv.Itoa(cfg.iters))
		}
	}

	fmt.Printf("OSU-style comparison, %s, %d CPUs, load average %s\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU(), loadavg())
	if d, err := tcpFloor(); err == nil {
		fmt.Printf("machine floor: 8-byte ping-pong over loopback TCP between two goroutines, one way: %.1f µs (median)\n", float64(d.Nanoseconds())/1e3)
	}
	fmt.Printf("medians of %d rounds, the three runs of a round interleaved; ratio = gompi runtime / MPICH (hydra)\n\n", cfg.reps)
	res := osuResults{}
	benches := []string{"latency", "bw", "mr", "mrp", "farm", "allreduce", "barrier", "overlap"}
	start := time.Now()
	for _, b := range benches {
		for rep := 0; rep < cfg.reps; rep++ {
			for k := range impls {
				im := impls[(k+rep)%len(impls)]
				if err := runOSU(res, im, im.key, im.cmd(2, b, extra), cfg.timeout); err != nil {
					return err
				}
			}
		}
	}
	// Oversubscribed: 4 ranks on this host's (2) cores, for every
	// implementation alike: ranks 0-1 and 2-3 ping-ponging at once (osu
	// pairs, 8 B and below, timed from the first rank's start to the last
	// rank's end), and the barrier. (With osu latency instead, ranks 2 and 3
	// sit in a barrier and MPICH's pair often finishes within one scheduler
	// slice, or not at all until the next.)
	np4 := map[string][]string{
		"pairs":   {"8", strconv.Itoa(cfg.np4Iters)},
		"barrier": {"0", strconv.Itoa(cfg.np4Iters)},
	}
	for _, b := range []string{"pairs", "barrier"} {
		for rep := 0; rep < cfg.reps; rep++ {
			for k := range impls {
				im := impls[(k+rep)%len(impls)]
				if err := runOSU(res, im, im.key+"4", im.cmd(4, b, np4[b]), cfg.timeout); err != nil {
					var te *timeoutError
					if !errors.As(err, &te) {
						return err
					}
					fmt.Printf("  %s -n 4 %s: %v (counted as missing)\n", im.label, b, err)
				}
			}
		}
	}
	fmt.Printf("(%d runs in %s; load average now %s)\n\n", (len(benches)+2)*cfg.reps*len(impls), time.Since(start).Round(time.Second), loadavg())

	printOSU(res, impls)
	checkGoals(res)
	printMarkdown(res)
	if cfg.svg != "" {
		if err := plotOSU(res, impls, cfg.svg); err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		csv := strings.TrimSuffix(cfg.svg, filepath.Ext(cfg.svg)) + ".csv"
		if err := writeCSV(res, impls, csv); err != nil {
			return err
		}
		fmt.Printf("medians: %s\n", csv)
	}
	return nil
}

// writeCSV writes every median: impl,ranks,bench,bytes,median,rounds.
func writeCSV(res osuResults, impls []impl, path string) error {
	var b strings.Builder
	b.WriteString("impl,ranks,bench,bytes,median,rounds\n")
	for _, im := range impls {
		for _, suffix := range []string{"", "4"} {
			ranks := 2
			if suffix == "4" {
				ranks = 4
			}
			for _, bench := range []string{"latency", "pairs", "bw", "mr", "mrp", "farm", "allreduce", "barrier", "overlap_comm", "overlap_compute", "overlap_both", "overlap"} {
				for _, n := range res.sizes(im.key+suffix, bench) {
					v, _ := res.med(im.key+suffix, bench, n)
					fmt.Fprintf(&b, "%s,%d,%s,%d,%g,%d\n", im.key, ranks, bench, n, v, len(res[im.key+suffix][bench][n]))
				}
			}
		}
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// tcpFloor is the machine's own limit for the runtime's TCP transport: the
// one-way time of an 8-byte ping-pong over loopback TCP between two
// goroutines of this process (median of 5 runs of 2000 round trips).
func tcpFloor() (time.Duration, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	const it = 2000
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 8)
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				return
			}
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return 0, err
	}
	defer c.Close()
	buf := make([]byte, 8)
	var ds []time.Duration
	for rep := 0; rep < 6; rep++ {
		t0 := time.Now()
		for i := 0; i < it; i++ {
			if _, err := c.Write(buf); err != nil {
				return 0, err
			}
			if _, err := io.ReadFull(c, buf); err != nil {
				return 0, err
			}
		}
		if rep > 0 {
			ds = append(ds, time.Since(t0)/(2*it))
		}
	}
	return median(ds), nil
}

type timeoutError struct{ limit time.Duration }

func (e *timeoutError) Error() string { return fmt.Sprintf("did not finish within %s", e.limit) }

// runOSU runs one benchmark command and records its "<bench> <bytes>
// <value>" lines under key.
func runOSU(res osuResults, im impl, key string, argv []string, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.Output()
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %w", strings.Join(argv, " "), &timeoutError{limit})
	}
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		return fmt.Errorf("%s (%s): %v\n%s%s", strings.Join(argv, " "), im.label, err, out, stderr)
	}
	lines := 0
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 {
			continue
		}
		n, err1 := strconv.Atoi(f[1])
		v, err2 := strconv.ParseFloat(f[2], 64)
		if err1 != nil || err2 != nil {
			continue
		}
		res.add(key, f[0], n, v)
		lines++
	}
	if lines == 0 {
		return fmt.Errorf("%s (%s): no result lines in output:\n%s", strings.Join(argv, " "), im.label, out)
	}
	return nil
}

var benchTitle = map[string]string{
	"latency":      "one-way latency, 2 ranks (µs, lower is better)",
	"bw":           "bandwidth, 2 ranks, windows of 64 (GB/s, higher is better)",
	"mr":           "message rate, 2 ranks (osu_mbw_mr: 1 pair, windows of 64; millions of messages/s, higher is better)",
	"mrp":          "message rate, persistent requests, 2 ranks (mr with MPI_Send_init/MPI_Recv_init and MPI_Startall, StartAll in gompi; millions of messages/s, higher is better)",
	"farm":         "task farm, 2 ranks: 2000 tasks of 10-80 µs handed out from AnySource receives (ms, lower is better)",
	"allreduce":    "allreduce of float64 sum, 2 ranks (µs, max over ranks, lower is better)",
	"barrier":      "barrier, 2 ranks (µs, lower is better)",
	"overlap":      "Iallreduce overlapped with as much compute, 2 ranks (time / longer of the two alone; 1.0 is perfect overlap, lower is better)",
	"overlap_both": "Iallreduce + compute + Wait, 2 ranks (µs; overlap_comm: Allreduce alone, overlap_compute: compute alone)",
	"pairs4":       "one-way latency, 4 ranks on 2 cores, pairs 0-1 and 2-3 at once (µs, first start to last end)",
	"barrier4":     "barrier, 4 ranks on 2 cores (µs)",
}

func printOSU(res osuResults, impls []impl) {
	for _, b := range []string{"latency", "bw", "mr", "mrp", "farm", "allreduce", "barrier", "overlap", "overlap_both", "pairs4", "barrier4"} {
		bench, suffix := b, ""
		if strings.HasSuffix(b, "4") {
			bench, suffix = strings.TrimSuffix(b, "4"), "4"
		}
		fmt.Printf("%s\n", benchTitle[b])
		fmt.Printf("%10s", "bytes")
		for _, im := range impls {
			fmt.Printf(" %18s", im.label)
		}
		fmt.Printf(" %8s\n", "ratio")
		for _, n := range res.sizes("mpich"+suffix, bench) {
			fmt.Printf("%10d", n)
			for _, im := range impls {
				if v, ok := res.med(im.key+suffix, bench, n); ok {
					fmt.Printf(" %18.3f", v)
				} else {
					fmt.Printf(" %18s", "-")
				}
			}
			g, ok1 := res.med("gompi"+suffix, bench, n)
			m, ok2 := res.med("mpich"+suffix, bench, n)
			if ok1 && ok2 && m > 0 {
				fmt.Printf(" %7.2fx", g/m)
			}
			fmt.Println()
		}
		fmt.Println()
	}
}

// checkGoals prints the goals for the runtime, met or MISSED.
func checkGoals(res osuResults) {
	fmt.Println("goals (gompi runtime vs MPICH under hydra, same run)")
	ratio := func(bench string, n int) (g, m float64, ok bool) {
		g, ok1 := res.med("gompi", bench, n)
		m, ok2 := res.med("mpich", bench, n)
		return g, m, ok1 && ok2 && m > 0
	}
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "MISSED"
	}
	line := func(goal, got string) { fmt.Printf("  %-44s %s\n", goal, got) }
	if g, m, ok := ratio("latency", 8); ok {
		line("8 B latency <= 1.0x MPICH", fmt.Sprintf("%.2f vs %.2f µs = %.2fx  %s", g, m, g/m, verdict(g <= m)))
	} else {
		line("8 B latency <= 1.0x MPICH", "not measured")
	}
	if g, m, ok := ratio("bw", 4<<20); ok {
		line("4 MiB bandwidth >= 0.95x MPICH", fmt.Sprintf("%.2f vs %.2f GB/s = %.2fx  %s", g, m, g/m, verdict(g >= 0.95*m)))
	} else {
		line("4 MiB bandwidth >= 0.95x MPICH", "not measured")
	}
	if g, m, ok := ratio("mr", 8); ok {
		line("8 B message rate >= 1.0x MPICH", fmt.Sprintf("%.2f vs %.2f M/s = %.2fx  %s", g, m, g/m, verdict(g >= m)))
	} else {
		line("8 B message rate >= 1.0x MPICH", "not measured")
	}
	if g, m, ok := ratio("mrp", 8); ok {
		line("8 B message rate, persistent (mrp)", fmt.Sprintf("%.2f vs %.2f M/s = %.2fx  %s", g, m, g/m, verdict(g >= m)))
	}
	if g, m, ok := ratio("allreduce", 8<<20); ok {
		line("8 MiB allreduce <= 1.0x MPICH", fmt.Sprintf("%.0f vs %.0f µs = %.2fx  %s", g, m, g/m, verdict(g <= m)))
	} else {
		line("8 MiB allreduce <= 1.0x MPICH", "not measured")
	}
	if g, m, ok := ratio("barrier", 0); ok {
		line("barrier, 2 ranks <= 2 µs", fmt.Sprintf("%.2f µs (MPICH %.2f µs)  %s", g, m, verdict(g <= 2)))
	} else {
		line("barrier, 2 ranks <= 2 µs", "not measured")
	}
	if g, ok := res.med("gompi", "overlap", 8<<20); ok {
		m, _ := res.med("mpich", "overlap", 8<<20)
		line("8 MiB Iallreduce + compute <= 1.1x", fmt.Sprintf("%.2fx the longer alone (MPICH %.2fx)  %s", g, m, verdict(g <= 1.1)))
	} else {
		line("8 MiB Iallreduce + compute <= 1.1x", "not measured")
	}
	g, ok := res.med("gompi4", "pairs", 8)
	m, okm := res.med("mpich4", "pairs", 8)
	mpich := "MPICH not measured"
	if okm {
		mpich = fmt.Sprintf("MPICH %.0f µs", m)
	}
	if ok {
		line("4 ranks on 2 cores, 8 B pairs <= 100 µs", fmt.Sprintf("%.1f µs (%s)  %s", g, mpich, verdict(g <= 100)))
	} else {
		line("4 ranks on 2 cores, 8 B pairs <= 100 µs", "not measured")
	}
	fmt.Println()
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// summaryRows are the figures README.md quotes, with the goals.
var summaryRows = []struct {
	label, suffix, bench string
	bytes                int
	unit, goal           string
	met                  func(g, m float64) bool
}{
	{"latency, 8 B", "", "latency", 8, "µs", "<= 1.0x", func(g, m float64) bool { return g <= m }},
	{"latency, 1 MiB", "", "latency", 1 << 20, "µs", "", nil},
	{"bandwidth, 64 KiB", "", "bw", 64 << 10, "GB/s", "", nil},
	{"bandwidth, 4 MiB", "", "bw", 4 << 20, "GB/s", ">= 0.95x", func(g, m float64) bool { return g >= 0.95*m }},
	{"message rate, 8 B (osu_mbw_mr, window 64)", "", "mr", 8, "M msg/s", ">= 1.0x", func(g, m float64) bool { return g >= m }},
	{"message rate, 8 B, persistent requests (StartAll / MPI_Startall)", "", "mrp", 8, "M msg/s", "", nil},
	{"task farm, 2000 tasks of 10-80 µs (AnySource)", "", "farm", 8, "ms", "", nil},
	{"allreduce, 8 B", "", "allreduce", 8, "µs", "", nil},
	{"allreduce, 1 MiB", "", "allreduce", 1 << 20, "µs", "", nil},
	{"allreduce, 8 MiB", "", "allreduce", 8 << 20, "µs", "<= 1.0x", func(g, m float64) bool { return g <= m }},
	{"barrier", "", "barrier", 0, "µs", "<= 2 µs", func(g, m float64) bool { return g <= 2 }},
	{"Iallreduce 8 MiB + compute (overlap)", "", "overlap", 8 << 20, "x", "<= 1.1x", func(g, m float64) bool { return g <= 1.1 }},
	{"4 ranks on 2 cores: pairs, 8 B", "4", "pairs", 8, "µs", "<= 100 µs", func(g, m float64) bool { return g <= 100 }},
	{"4 ranks on 2 cores: barrier", "4", "barrier", 0, "µs", "", nil},
}

// printMarkdown prints the summary as a Markdown table for README.md.
func printMarkdown(res osuResults) {
	fmt.Println("summary (Markdown, for README.md)")
	fmt.Println()
	fmt.Println("| 2 ranks unless noted | gompi runtime | MPICH (hydra) | MPICH (gompiexec) | ratio | goal |")
	fmt.Println("|---|---|---|---|---|---|")
	cell := func(key, bench string, n int, unit string) string {
		v, ok := res.med(key, bench, n)
		if !ok {
			return "-"
		}
		switch {
		case v >= 100:
			return fmt.Sprintf("%.0f %s", v, unit)
		case v >= 10:
			return fmt.Sprintf("%.1f %s", v, unit)
		}
		return fmt.Sprintf("%.2f %s", v, unit)
	}
	for _, r := range summaryRows {
		g, ok1 := res.med("gompi"+r.suffix, r.bench, r.bytes)
		m, ok2 := res.med("mpich"+r.suffix, r.bench, r.bytes)
		ratio, goal := "-", r.goal
		if ok1 && ok2 && m > 0 {
			ratio = fmt.Sprintf("%.2fx", g/m)
			if g/m < 0.1 {
				ratio = fmt.Sprintf("%.3fx", g/m)
			}
		}
		if r.met != nil && ok1 && ok2 {
			if r.met(g, m) {
				goal += " met"
			} else {
				goal += " MISSED"
			}
		}
		fmt.Printf("| %s | %s | %s | %s | %s | %s |\n", r.label,
			cell("gompi"+r.suffix, r.bench, r.bytes, r.unit), cell("mpich"+r.suffix, r.bench, r.bytes, r.unit),
			cell("mpichg"+r.suffix, r.bench, r.bytes, r.unit), ratio, goal)
	}
	fmt.Println()
}
