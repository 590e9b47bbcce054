// Command benchckpt is `make bench-ckpt`: checkpoints of 4 ranks x
// 256 MiB through package ckpt, written straight to the prefix and through
// a node-local cache (/dev/shm, flushed to the prefix in the background),
// next to dd writing and syncing the same bytes to the same file system,
// interleaved in one run. Each run of the rank program takes three
// checkpoints: the first (compared with dd) and two later ones (the
// steady state of a run that checkpoints many times, where the cache
// reuses its files). A fourth case keeps the rank program's state in
// runtime/cow's memory, so that its cached checkpoints are copy-on-write
// snapshots (docs/ckpt.md, "Snapshots"). In every case the rank program
// changes all its state right after each Checkpoint (-pass-after), while
// the background phase (flush, snapshot) goes on, and reports how long
// that pass took next to the same pass with nothing in the background: the
// application's time is what it is blocked plus what its computation
// slows down. It prints a table and writes a plot.
//
// "The same bytes" literally: dd copies, from files in the cache
// directory, the state the rank program checkpoints (the same generator
// and seeds). Zeros from /dev/zero would flatter dd: the virtual disks
// here write zero blocks several times faster than data.
//
// The machine is shared and loaded, so each round runs the three cases in
// a rotated order, syncs every file system before each case (so that one
// case's leftover writeback and the discards of the files it removed are
// not charged to the next), and the ratios are the medians of each
// round's own ratios, next to the medians of the times.
package main

import (
	"encoding/binary"
	"flag"
	"fmt"
	"image/color"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

func main() {
	gompiexec := flag.String("gompiexec", "bin/gompiexec", "gompiexec")
	rank := flag.String("rank", "bin/ckptbench-rank", "the rank program (test/benchckpt/rank)")
	dir := flag.String("dir", "/var/tmp", "file system to write to (the prefix)")
	cacheDir := flag.String("cache", "/dev/shm", "node-local cache")
	np := flag.Int("np", 4, "ranks")
	mib := flag.Int("mib", 256, "MiB per rank")
	rounds := flag.Int("rounds", 5, "interleaved rounds (medians reported)")
	out := flag.String("svg", "bench-out/ckpt.svg", "plot (SVG and PNG)")
	flag.Parse()
	if err := run(*gompiexec, *rank, *dir, *cacheDir, *np, *mib, *rounds, *out); err != nil {
		fmt.Fprintln(os.Stderr, "benchckpt:", err)
		os.Exit(1)
	}
}

var (
	lineRE = regexp.MustCompile(`blocked ([0-9.]+) total ([0-9.]+) steady ([0-9. ]+)`)
	snapRE = regexp.MustCompile(`snapshots (\d+)`)
	passRE = regexp.MustCompile(`pass alone ([0-9.]+) after ([0-9.]+)`)
)

func run(gompiexec, rank, dir, cacheDir string, np, mib, rounds int, out string) error {
	work, err := os.MkdirTemp(dir, "gompi-bench-ckpt-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	cache, err := os.MkdirTemp(cacheDir, "gompi-bench-ckpt-cache-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(cache)
	src, err := os.MkdirTemp(cacheDir, "gompi-bench-ckpt-src-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(src)
	for i := 0; i < np; i++ {
		if err := os.WriteFile(filepath.Join(src, strconv.Itoa(i)), rankState(i, mib), 0o644); err != nil {
			return err
		}
	}
	var dd, direct, directSteady, cached, cachedTotal, cachedSteady, rDirect, rCached, rSteady, rSteadyFirst []float64
	var cowFirst, cowSteady, rCow, rCowSteady []float64
	var passDirect, passCache, passCow []float64 // slowdown of the pass after Checkpoint, seconds
	for r := 0; r < rounds; r++ {
		var t float64
		var d, b, cw ckptTimes
		cases := []func() error{
			func() (err error) { t, err = ddRun(src, work, np, mib); return },
			func() (err error) {
				d, err = ckptRun(gompiexec, rank, filepath.Join(work, "direct"), "", np, mib, false)
				return
			},
			func() (err error) {
				b, err = ckptRun(gompiexec, rank, filepath.Join(work, "cached"), cache, np, mib, false)
				return
			},
			func() (err error) {
				cw, err = ckptRun(gompiexec, rank, filepath.Join(work, "cow"), cache, np, mib, true)
				return
			},
		}
		for i := range cases {
			syscall.Sync()
			if err := cases[(r+i)%len(cases)](); err != nil {
				return err
			}
		}
		dd, direct, directSteady = append(dd, t), append(direct, d.blocked), append(directSteady, d.steady)
		cached, cachedTotal, cachedSteady = append(cached, b.blocked), append(cachedTotal, b.total), append(cachedSteady, b.steady)
		rDirect, rCached, rSteady = append(rDirect, t/d.blocked), append(rCached, b.blocked/d.blocked), append(rSteady, b.steady/d.steady)
		rSteadyFirst = append(rSteadyFirst, b.steady/d.blocked)
		cowFirst, cowSteady = append(cowFirst, cw.blocked), append(cowSteady, cw.steady)
		rCow, rCowSteady = append(rCow, cw.blocked/d.blocked), append(rCowSteady, cw.steady/d.blocked)
		passDirect = append(passDirect, d.during-d.alone)
		passCache = append(passCache, b.during-b.alone)
		passCow = append(passCow, cw.during-cw.alone)
		fmt.Fprintf(os.Stderr, "round %d: dd %.3fs, direct %.3fs (%.2fx dd; later %.3fs), cache blocked %.3fs (%.3fx direct; flushed after %.3fs; later %.3fs: %.3fx direct's later), snapshot blocked %.4fs (%.3fx direct; later %.4fs; %d snapshots); a pass over the state after Checkpoint: direct %.3fs, cache %.3fs, snapshot %.3fs (alone %.3fs, %.3fs, %.3fs)\n",
			r+1, t, d.blocked, t/d.blocked, d.steady, b.blocked, b.blocked/d.blocked, b.total, b.steady, b.steady/d.steady,
			cw.blocked, cw.blocked/d.blocked, cw.steady, cw.snaps, d.during, b.during, cw.during, d.alone, b.alone, cw.alone)
		if cw.snaps == 0 {
			return fmt.Errorf("the cow case took no snapshot (GOMPI_COW=off, or fork failed?)")
		}
	}
	bytes := float64(np*mib) * (1 << 20)
	mdd, mdir, mdirSteady, mcache, mcacheTot, mcacheSteady := median(dd), median(direct), median(directSteady), median(cached), median(cachedTotal), median(cachedSteady)
	ratioDir, ratioCache, ratioSteady, ratioSteadyFirst := median(rDirect), median(rCached), median(rSteady), median(rSteadyFirst)
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("\n%d ranks x %d MiB, prefix on %s, cache on %s, %d rounds, medians (load average %s)\n\n", np, mib, dir, cacheDir, rounds, string(load[:14]))
	fmt.Println("| case | time | throughput | ratio | goal |")
	fmt.Println("|---|---|---|---|---|")
	fmt.Printf("| dd of the same bytes (%d in parallel, bs=1M conv=fsync) | %.3f s | %.0f MiB/s | 1.00x | |\n", np, mdd, bytes/mdd/(1<<20))
	fmt.Printf("| ckpt straight to the prefix (first checkpoint) | %.3f s | %.0f MiB/s | %.2fx dd (rounds %s) | >= 0.8x %s |\n",
		mdir, bytes/mdir/(1<<20), ratioDir, span(rDirect), verdict(ratioDir >= 0.8))
	fmt.Printf("| ckpt straight to the prefix (later checkpoints) | %.3f s | %.0f MiB/s | | |\n", mdirSteady, bytes/mdirSteady/(1<<20))
	fmt.Printf("| ckpt via node-local cache, first checkpoint: application blocked | %.3f s | | %.3fx direct (rounds %s) | <= 0.1x %s |\n",
		mcache, ratioCache, span(rCached), verdict(ratioCache <= 0.1))
	// Judged against the direct first checkpoint too: the direct later
	// ones also pay for removing the previous epoch (on a disk mounted
	// with discard, a slow unlink), which flatters the cache.
	fmt.Printf("| ckpt via node-local cache, later checkpoints: application blocked | %.3f s | | %.3fx direct's first (rounds %s); %.3fx direct's later (rounds %s) | <= 0.1x %s |\n",
		mcacheSteady, ratioSteadyFirst, span(rSteadyFirst), ratioSteady, span(rSteady), verdict(ratioSteadyFirst <= 0.1))
	fmt.Printf("| ckpt via node-local cache: until the first is flushed and committed | %.3f s | %.0f MiB/s | | |\n", mcacheTot, bytes/mcacheTot/(1<<20))
	mcow, mcowSteady, ratioCow, ratioCowSteady := median(cowFirst), median(cowSteady), median(rCow), median(rCowSteady)
	fmt.Printf("| ckpt via node-local cache, copy-on-write snapshot (runtime/cow state), first checkpoint: application blocked | %.4f s | | %.3fx direct (rounds %s) | <= 0.1x %s |\n",
		mcow, ratioCow, span(rCow), verdict(ratioCow <= 0.1))
	fmt.Printf("| ckpt via node-local cache, copy-on-write snapshot, later checkpoints: application blocked | %.4f s | | %.3fx direct's first (rounds %s) | <= 0.1x %s |\n",
		mcowSteady, ratioCowSteady, span(rCowSteady), verdict(ratioCowSteady <= 0.1))
	fmt.Printf("| a pass over all the state right after the first or second Checkpoint, minus the same pass alone: direct | %.3f s | | | |\n", median(passDirect))
	fmt.Printf("| the same: via node-local cache (the flush in the background) | %.3f s | | | |\n", median(passCache))
	fmt.Printf("| the same: copy-on-write snapshot (the writer and the flush in the background: page copies) | %.3f s | | | |\n", median(passCow))
	return plotBars(out, []string{"dd", "ckpt direct", "direct (later)", "cache blocked", "cache blocked (later)", "cache flushed", "snapshot blocked", "snapshot (later)"},
		[]float64{mdd, mdir, mdirSteady, mcache, mcacheSteady, mcacheTot, mcow, mcowSteady})
}

// span is "min-max" of v.
func span(v []float64) string {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return fmt.Sprintf("%.2f-%.2f", s[0], s[len(s)-1])
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}

// rankState is rank's state in the rank program (test/benchckpt/rank),
// as the bytes its checkpoint writes.
func rankState(rank, mib int) []byte {
	b := make([]byte, mib<<20)
	x := uint64(rank) + 1
	for i := 0; i < len(b); i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.NativeEndian.PutUint64(b[i:], x)
	}
	return b
}

// ddRun copies np files of mib MiB from src to dir with dd at once, each
// synced, and returns the wall time.
func ddRun(src, dir string, np, mib int) (float64, error) {
	var wg sync.WaitGroup
	errs := make([]error, np)
	t0 := time.Now()
	for i := 0; i < np; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			f := filepath.Join(dir, "dd."+strconv.Itoa(i))
			out, err := exec.Command("dd", "if="+filepath.Join(src, strconv.Itoa(i)), "of="+f, "bs=1M", "count="+strconv.Itoa(mib), "conv=fsync").CombinedOutput()
			if err != nil {
				errs[i] = fmt.Errorf("dd: %v: %s", err, out)
			}
		}(i)
	}
	wg.Wait()
	t := time.Since(t0).Seconds()
	for i := 0; i < np; i++ {
		os.Remove(filepath.Join(dir, "dd."+strconv.Itoa(i)))
	}
	for _, err := range errs {
		if err != nil {
			return 0, err
		}
	}
	return t, nil
}

// ckptTimes is what the rank program reports (the slowest rank's):
// seconds blocked in the first Checkpoint, until that epoch was committed
// in the prefix, and blocked in the later ones (their mean).
// Also the snapshots taken (the fewest of any rank) and the seconds of a
// pass over the state alone and right after a Checkpoint (the longest).
type ckptTimes struct {
	blocked, total, steady float64
	snaps                  int
	alone, during          float64
}

func ckptRun(gompiexec, rank, prefix, cache string, np, mib int, useCow bool) (ckptTimes, error) {
	var t ckptTimes
	os.RemoveAll(prefix)
	args := []string{"-ckpoint-prefix", prefix}
	if cache != "" {
		os.RemoveAll(cache)
		args = append(args, "-ckpoint-cache", cache)
	}
	args = append(args, "-n", strconv.Itoa(np), rank, "-mib", strconv.Itoa(mib))
	args = append(args, "-pass-after")
	if useCow {
		args = append(args, "-cow")
	}
	out, err := exec.Command(gompiexec, args...).CombinedOutput()
	if err != nil {
		return t, fmt.Errorf("gompiexec %v: %v\n%s", args, err, out)
	}
	m := lineRE.FindSubmatch(out)
	if m == nil {
		return t, fmt.Errorf("no timing in:\n%s", out)
	}
	t.blocked, _ = strconv.ParseFloat(string(m[1]), 64)
	t.total, _ = strconv.ParseFloat(string(m[2]), 64)
	steady := strings.Fields(string(m[3]))
	if len(steady) == 0 {
		return t, fmt.Errorf("no later checkpoints in:\n%s", out)
	}
	for _, f := range steady {
		v, _ := strconv.ParseFloat(f, 64)
		t.steady += v / float64(len(steady))
	}
	sm, pm := snapRE.FindSubmatch(out), passRE.FindSubmatch(out)
	if sm == nil || pm == nil {
		return t, fmt.Errorf("no snapshot or pass figures in:\n%s", out)
	}
	t.snaps, _ = strconv.Atoi(string(sm[1]))
	t.alone, _ = strconv.ParseFloat(string(pm[1]), 64)
	t.during, _ = strconv.ParseFloat(string(pm[2]), 64)
	os.RemoveAll(prefix)
	return t, nil
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// plotBars writes a bar chart of the seconds per case: an SVG at path and
// a PNG next to it.
func plotBars(path string, names []string, secs []float64) error {
	p := plot.New()
	p.Title.Text = "checkpoint of 4 ranks x 256 MiB (lower is better)"
	p.Y.Label.Text = "seconds"
	bars, err := plotter.NewBarChart(plotter.Values(secs), vg.Points(40))
	if err != nil {
		return err
	}
	bars.Color = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	p.Add(bars)
	p.NominalX(names...)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := p.Save(11*vg.Inch, 4*vg.Inch, path); err != nil {
		return err
	}
	png := path[:len(path)-len(filepath.Ext(path))] + ".png"
	return p.Save(11*vg.Inch, 4*vg.Inch, png)
}
