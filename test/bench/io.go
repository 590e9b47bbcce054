package main

import (
	"bufio"
	"context"
	"encoding/csv"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"
)

// ioConfig is `make bench-io` (go run ./test/bench -io): MPI-IO of the Go
// runtime (cmd/gompi-iobench on runtime/mpiio) against ROMIO
// (test/bench/io/iobench.c built with Debian's mpicc) and dd of the same
// bytes, in one run, both MPI programs under the same gompiexec.
type ioConfig struct {
	gompiexec string
	iobench   string // gompi-iobench; "" builds it
	dir       string // where the files go (a real disk, not tmpfs)
	cacheDir  string // node-local cache for the cached mode
	bytes     int64  // all ranks together, per run
	reps      int
	ranks     []int
	csv, svg  string
	timeout   time.Duration
}

// ioCase is one row of the table.
type ioCase struct {
	np      int
	pattern string // hard, contig, fpp
	how     string // coll, indep
}

func (c ioCase) String() string { return fmt.Sprintf("%s %s", c.pattern, c.how) }

// ioKey is one measured quantity: impl is dd, romio, gompi, gompi-cached
// gompi-snap (the cache with gompi_cache_snapshot=enable) or gompi-snapcow
// (the same, the buffer from cow.Make); op is write, read or block (time in the write calls).
type ioKey struct {
	c        ioCase
	impl, op string
}

type ioResults map[ioKey][]float64 // MB/s (block: seconds)

func (r ioResults) med(k ioKey) (float64, bool) {
	v := append([]float64(nil), r[k]...)
	if len(v) == 0 {
		return 0, false
	}
	sort.Float64s(v)
	return v[len(v)/2], true
}

func benchIO(cfg ioConfig, tmp string) error {
	romio := filepath.Join(tmp, "iobench")
	if out, err := exec.Command("mpicc", "-O2", "-o", romio, "test/bench/io/iobench.c").CombinedOutput(); err != nil {
		return fmt.Errorf("mpicc: %v\n%s", err, out)
	}
	if cfg.iobench != "none" && cfg.iobench == "" {
		cfg.iobench = filepath.Join(tmp, "gompi-iobench")
		if out, err := exec.Command("go", "build", "-o", cfg.iobench, "./cmd/gompi-iobench").CombinedOutput(); err != nil {
			return fmt.Errorf("building gompi-iobench: %v\n%s", err, out)
		}
	}
	dir, err := os.MkdirTemp(cfg.dir, "gompi-bench-io-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cache, err := os.MkdirTemp(cfg.cacheDir, "gompi-bench-io-cache-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(cache)
	// MPICH's UCX: every rank is on this host.
	env := append(os.Environ(), "UCX_NET_DEVICES=lo")

	fmt.Printf("MPI-IO comparison, %s, %d CPUs, load average %s\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU(), loadavg())
	fmt.Printf("files in %s (%s), cache in %s; %d MB per run; medians of %d rounds, runs of a round interleaved\n",
		cfg.dir, fsType(cfg.dir), cfg.cacheDir, cfg.bytes/1e6, cfg.reps)
	fmt.Printf("writes include fsync (dd: conv=fdatasync; MPI: File_sync); reads are from the page cache (no cache drop on a shared machine)\n\n")
	res := ioResults{}
	file := filepath.Join(dir, "f")
	start := time.Now()
	var cases []ioCase
	for _, np := range cfg.ranks {
		for _, p := range []string{"hard", "contig", "fpp"} {
			for _, how := range []string{"coll", "indep"} {
				if p == "fpp" && how == "coll" {
					continue
				}
				cases = append(cases, ioCase{np, p, how})
			}
		}
	}
	mpiRun := func(impl, prog string, c ioCase, op string, extra ...string) error {
		args := []string{"-n", strconv.Itoa(c.np), prog}
		if c.how == "indep" {
			args = append(args, "-i")
		}
		args = append(args, extra...)
		args = append(args, op, c.pattern, file, strconv.FormatInt(cfg.bytes/int64(c.np), 10))
		ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, cfg.gompiexec, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("gompiexec %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		sc := bufio.NewScanner(strings.NewReader(string(out)))
		found := false
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) != 7 || (f[0] != "io" && f[0] != "block") {
				continue
			}
			bytes, _ := strconv.ParseFloat(f[5], 64)
			secs, err := strconv.ParseFloat(f[6], 64)
			if err != nil || secs <= 0 {
				return fmt.Errorf("%s: bad line %q", prog, sc.Text())
			}
			if f[0] == "block" {
				res[ioKey{c, impl, "block"}] = append(res[ioKey{c, impl, "block"}], secs)
			} else {
				res[ioKey{c, impl, op}] = append(res[ioKey{c, impl, op}], bytes/secs/1e6)
				found = true
			}
		}
		if !found {
			return fmt.Errorf("gompiexec %s printed no result:\n%s", strings.Join(args, " "), out)
		}
		return nil
	}
	clean := func() {
		ms, _ := filepath.Glob(file + "*")
		for _, m := range ms {
			os.Remove(m)
		}
	}
	ddRun := func(c ioCase) error {
		// The same bytes as one rank count's runs write, 8 MiB blocks.
		count := cfg.bytes / (8 << 20)
		t0 := time.Now()
		if out, err := exec.Command("dd", "if=/dev/zero", "of="+file, "bs=8M", "count="+strconv.FormatInt(count, 10), "conv=fdatasync").CombinedOutput(); err != nil {
			return fmt.Errorf("dd: %v: %s", err, out)
		}
		w := time.Since(t0).Seconds()
		t0 = time.Now()
		if out, err := exec.Command("dd", "if="+file, "of=/dev/null", "bs=8M").CombinedOutput(); err != nil {
			return fmt.Errorf("dd: %v: %s", err, out)
		}
		r := time.Since(t0).Seconds()
		b := float64(count * (8 << 20))
		res[ioKey{c, "dd", "write"}] = append(res[ioKey{c, "dd", "write"}], b/w/1e6)
		res[ioKey{c, "dd", "read"}] = append(res[ioKey{c, "dd", "read"}], b/r/1e6)
		clean()
		return nil
	}
	type runner struct {
		impl string
		run  func(c ioCase) error
	}
	pair := func(impl, prog string, extra ...string) runner {
		return runner{impl, func(c ioCase) error {
			defer clean()
			if err := mpiRun(impl, prog, c, "write", extra...); err != nil {
				return err
			}
			return mpiRun(impl, prog, c, "read", extra...)
		}}
	}
	runners := []runner{{"dd", ddRun}, pair("romio", romio)}
	cached := pair("gompi-cached", cfg.iobench, "-H", "gompi_cache_dir="+cache)
	snap := pair("gompi-snap", cfg.iobench, "-H", "gompi_cache_dir="+cache, "-H", "gompi_cache_snapshot=enable")
	snapCow := pair("gompi-snapcow", cfg.iobench, "-cow", "-H", "gompi_cache_dir="+cache, "-H", "gompi_cache_snapshot=enable")
	if cfg.iobench != "none" {
		runners = append(runners, pair("gompi", cfg.iobench))
	}
	runs, failed := 0, 0
	for _, c := range cases {
		for rep := 0; rep < cfg.reps; rep++ {
			rs := runners
			if c.pattern == "hard" && c.how == "coll" && cfg.iobench != "none" {
				rs = append(rs[:len(rs):len(rs)], cached, snap, snapCow)
			}
			for k := range rs {
				r := rs[(k+rep)%len(rs)]
				if err := r.run(c); err != nil {
					// One implementation failing a case is a result too:
					// the row shows it missing and the rest still runs.
					msg := strings.SplitN(err.Error(), "\n", 3)
					fmt.Printf("  %s %d ranks, %s failed: %s\n", c, c.np, r.impl, strings.Join(msg[:min(2, len(msg))], ": "))
					failed++
					continue
				}
				runs++
			}
		}
		printIORow(res, c)
	}
	fmt.Printf("(%d runs in %s, %d failed; load average now %s)\n\n", runs, time.Since(start).Round(time.Second), failed, loadavg())
	printIOGoals(res, cfg.ranks)
	if cfg.csv != "" {
		if err := writeIOCSV(res, cases, cfg.csv); err != nil {
			return err
		}
	}
	if cfg.svg != "" {
		if err := plotIO(res, cases, cfg.ranks, cfg.svg); err != nil {
			return err
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d runs failed", failed)
	}
	return nil
}

var ioImpls = []string{"dd", "romio", "gompi", "gompi-cached", "gompi-snap", "gompi-snapcow"}

var ioHeaderDone bool

func printIORow(res ioResults, c ioCase) {
	if !ioHeaderDone {
		fmt.Printf("%-3s %-13s %-5s %9s %9s %9s %9s %9s %9s %8s %9s\n", "np", "case", "op", "dd MB/s", "ROMIO", "gompi", "cached", "snapshot", "snap cow", "gompi/dd", "gompi/RO")
		ioHeaderDone = true
	}
	for _, op := range []string{"write", "read"} {
		v := map[string]string{}
		for _, im := range ioImpls {
			v[im] = "-"
			if x, ok := res.med(ioKey{c, im, op}); ok {
				v[im] = fmt.Sprintf("%.0f", x)
			}
		}
		dd, _ := res.med(ioKey{c, "dd", op})
		g, _ := res.med(ioKey{c, "gompi", op})
		ro, _ := res.med(ioKey{c, "romio", op})
		ratio := func(a, b float64) string {
			if a <= 0 || b <= 0 {
				return "-"
			}
			return fmt.Sprintf("%.2fx", a/b)
		}
		fmt.Printf("%-3d %-13s %-5s %9s %9s %9s %9s %9s %9s %8s %9s\n", c.np, c.String(), op, v["dd"], v["romio"], v["gompi"], v["gompi-cached"], v["gompi-snap"], v["gompi-snapcow"], ratio(g, dd), ratio(g, ro))
	}
}

// printIOGoals checks issue 10's goals: collective IOR-hard write >= 0.7x dd
// and >= ROMIO's better mode (collective or independent), and the cached
// mode blocking for at most 0.1x of the direct write.
func printIOGoals(res ioResults, ranks []int) {
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "MISSED"
	}
	fmt.Println("goals (same-run ratios):")
	for _, np := range ranks {
		coll, indep := ioCase{np, "hard", "coll"}, ioCase{np, "hard", "indep"}
		g, _ := res.med(ioKey{coll, "gompi", "write"})
		dd, _ := res.med(ioKey{coll, "dd", "write"})
		rc, _ := res.med(ioKey{coll, "romio", "write"})
		ri, _ := res.med(ioKey{indep, "romio", "write"})
		best := max(rc, ri)
		if g == 0 {
			fmt.Printf("  np=%d IOR-hard write: dd %.0f MB/s, ROMIO's better mode %.0f MB/s (no gompi run)\n", np, dd, best)
			continue
		}
		fmt.Printf("  np=%d IOR-hard collective write: gompi %.0f MB/s = %.2fx dd (goal >= 0.7x: %s), %.2fx ROMIO's better mode %.0f MB/s (goal >= 1x: %s)\n",
			np, g, g/dd, verdict(g/dd >= 0.7), g/best, best, verdict(g >= best))
		direct, _ := res.med(ioKey{coll, "gompi", "block"})
		cached, ok := res.med(ioKey{coll, "gompi-cached", "block"})
		if ok && direct > 0 {
			fmt.Printf("  np=%d cached mode (copy): write calls block %.3f s vs %.3f s direct = %.2fx (goal <= 0.1x: %s)\n",
				np, cached, direct, cached/direct, verdict(cached/direct <= 0.1))
		}
		for _, im := range []string{"gompi-snap", "gompi-snapcow"} {
			snap, ok := res.med(ioKey{coll, im, "block"})
			if ok && direct > 0 {
				fmt.Printf("  np=%d cached mode with gompi_cache_snapshot=enable, %s buffer: write calls block %.3f s vs %.3f s direct = %.2fx (goal <= 0.1x: %s)\n",
					np, map[string]string{"gompi-snap": "Go heap", "gompi-snapcow": "cow.Make"}[im], snap, direct, snap/direct, verdict(snap/direct <= 0.1))
			}
		}
	}
	fmt.Println()
}

func writeIOCSV(res ioResults, cases []ioCase, path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	w.Write([]string{"ranks", "pattern", "access", "impl", "op", "median", "unit", "runs"})
	for _, c := range cases {
		for _, im := range ioImpls {
			for _, op := range []string{"write", "read", "block"} {
				k := ioKey{c, im, op}
				v, ok := res.med(k)
				if !ok {
					continue
				}
				unit := "MB/s"
				if op == "block" {
					unit = "s"
				}
				w.Write([]string{strconv.Itoa(c.np), c.pattern, c.how, im, op, strconv.FormatFloat(v, 'f', 4, 64), unit, strconv.Itoa(len(res[k]))})
			}
		}
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	fmt.Printf("csv: %s\n", path)
	return f.Close()
}

// fsType names the file system holding dir (from /proc/mounts, the longest
// mount point that is a prefix).
func fsType(dir string) string {
	abs, _ := filepath.Abs(dir)
	b, err := os.ReadFile("/proc/mounts")
	if err != nil {
		return "?"
	}
	best, typ := "", "?"
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 3 {
			continue
		}
		if (abs == f[1] || strings.HasPrefix(abs, strings.TrimSuffix(f[1], "/")+"/")) && len(f[1]) >= len(best) {
			best, typ = f[1], f[2]
		}
	}
	return typ
}
