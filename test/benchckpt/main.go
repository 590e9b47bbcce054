// Command benchckpt is `make bench-ckpt`: one checkpoint of 4 ranks x
// 256 MiB through package ckpt, written straight to the prefix and through
// a node-local cache (/dev/shm, flushed to the prefix in the background),
// next to dd writing and syncing the same bytes to the same file system,
// interleaved in one run. It prints a table and writes a plot.
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

var lineRE = regexp.MustCompile(`blocked ([0-9.]+) total ([0-9.]+)`)

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
	var dd, direct, cached, cachedTotal, rDirect, rCached []float64
	for r := 0; r < rounds; r++ {
		var t, d, b, tot float64
		cases := []func() error{
			func() (err error) { t, err = ddRun(src, work, np, mib); return },
			func() (err error) {
				d, _, err = ckptRun(gompiexec, rank, filepath.Join(work, "direct"), "", np, mib)
				return
			},
			func() (err error) {
				b, tot, err = ckptRun(gompiexec, rank, filepath.Join(work, "cached"), cache, np, mib)
				return
			},
		}
		for i := range cases {
			syscall.Sync()
			if err := cases[(r+i)%len(cases)](); err != nil {
				return err
			}
		}
		dd, direct, cached, cachedTotal = append(dd, t), append(direct, d), append(cached, b), append(cachedTotal, tot)
		rDirect, rCached = append(rDirect, t/d), append(rCached, b/d)
		fmt.Fprintf(os.Stderr, "round %d: dd %.3fs, direct %.3fs (%.2fx dd), cache blocked %.3fs (%.3fx direct; flushed after %.3fs)\n",
			r+1, t, d, t/d, b, b/d, tot)
	}
	bytes := float64(np*mib) * (1 << 20)
	mdd, mdir, mcache, mcacheTot := median(dd), median(direct), median(cached), median(cachedTotal)
	ratioDir, ratioCache := median(rDirect), median(rCached)
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("\n%d ranks x %d MiB, prefix on %s, cache on %s, %d rounds, medians (load average %s)\n\n", np, mib, dir, cacheDir, rounds, string(load[:14]))
	fmt.Println("| case | time | throughput | ratio | goal |")
	fmt.Println("|---|---|---|---|---|")
	fmt.Printf("| dd of the same bytes (%d in parallel, bs=1M conv=fsync) | %.3f s | %.0f MiB/s | 1.00x | |\n", np, mdd, bytes/mdd/(1<<20))
	fmt.Printf("| ckpt straight to the prefix | %.3f s | %.0f MiB/s | %.2fx dd (rounds %s) | >= 0.8x %s |\n",
		mdir, bytes/mdir/(1<<20), ratioDir, span(rDirect), verdict(ratioDir >= 0.8))
	fmt.Printf("| ckpt via node-local cache: application blocked | %.3f s | | %.3fx direct (rounds %s) | <= 0.1x %s |\n",
		mcache, ratioCache, span(rCached), verdict(ratioCache <= 0.1))
	fmt.Printf("| ckpt via node-local cache: until flushed and committed | %.3f s | %.0f MiB/s | | |\n", mcacheTot, bytes/mcacheTot/(1<<20))
	return plotBars(out, []string{"dd", "ckpt direct", "ckpt cache (blocked)", "ckpt cache (flushed)"},
		[]float64{mdd, mdir, mcache, mcacheTot})
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

func ckptRun(gompiexec, rank, prefix, cache string, np, mib int) (blocked, total float64, err error) {
	os.RemoveAll(prefix)
	args := []string{"-ckpoint-prefix", prefix}
	if cache != "" {
		os.RemoveAll(cache)
		args = append(args, "-ckpoint-cache", cache)
	}
	args = append(args, "-n", strconv.Itoa(np), rank, "-mib", strconv.Itoa(mib))
	out, err := exec.Command(gompiexec, args...).CombinedOutput()
	if err != nil {
		return 0, 0, fmt.Errorf("gompiexec %v: %v\n%s", args, err, out)
	}
	m := lineRE.FindSubmatch(out)
	if m == nil {
		return 0, 0, fmt.Errorf("no timing in:\n%s", out)
	}
	blocked, _ = strconv.ParseFloat(string(m[1]), 64)
	total, _ = strconv.ParseFloat(string(m[2]), 64)
	os.RemoveAll(prefix)
	return blocked, total, nil
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
	if err := p.Save(9*vg.Inch, 4*vg.Inch, path); err != nil {
		return err
	}
	png := path[:len(path)-len(filepath.Ext(path))] + ".png"
	return p.Save(9*vg.Inch, 4*vg.Inch, png)
}
