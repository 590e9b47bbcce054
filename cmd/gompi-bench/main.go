// Command gompi-bench is an OSU-style micro-benchmark for the Go rank
// runtime (package mpi), run as the ranks of a job:
//
//	gompiexec -n 2 gompi-bench latency
//	gompiexec -n 2 gompi-bench -table bw 1048576
//
// It mirrors test/bench/osu/osu.c, the MPICH reference it is compared with
// (go run ./test/bench -osu, make bench), exactly: same message sizes
// (1 B to 8 MiB, doubling), same iteration counts, warm-up and window, and
// the same output lines "<bench> <bytes> <value>" printed by rank 0:
//
//	latency    one-way ping-pong time between ranks 0 and 1, µs (other ranks
//	           wait in the barrier that starts each size)
//	pairs      the same between ranks 2k and 2k+1, all pairs at once, µs, from
//	           the first rank's start to the last rank's end on the host's
//	           wall clock (the oversubscribed case: 4 ranks on 2 cores)
//	bw         streaming bandwidth 0 -> 1, windows of 64 nonblocking sends
//	           answered by a 1-byte acknowledgement, GB/s (1e9 bytes/s)
//	allreduce  time per Allreduce of float64s (sum), µs, max over ranks
//	barrier    time per Barrier, µs
//	mr         message rate, osu_mbw_mr: ranks i and i+size/2 in pairs, all
//	           at once, windows of 64 nonblocking sends each acknowledged,
//	           millions of messages per second summed over pairs, 1 B to
//	           64 KiB (mr.go)
//	mrp        mr with persistent requests: windows of 64 persistent sends
//	           and receives made once per size, started with StartAll
//	           (mr.go; osu.c: MPI_Send_init, MPI_Recv_init, MPI_Startall)
//	farm       task farm: rank 0 hands 2000 tasks (8 B) to the workers that
//	           ask first (Recv from AnySource), each computes 10-80 µs;
//	           time of the whole farm, ms (farm.go; -iters: the task count)
//	overlap    Iallreduce of the largest size hidden behind as much local
//	           compute: ratio of the overlapped time to the longer of the two
//	           alone (1.0: perfect), with the three times (overlap.go)
//
// Usage: gompi-bench [-table] [-max BYTES] [-iters N] BENCH [MAXBYTES [ITERS]].
// The positional MAXBYTES and ITERS are osu.c's; -iters N replaces the
// iteration count of every size (warm-up scaled as osu.c does), for quick
// runs and the oversubscribed case. -table prints a table for humans
// instead of the machine lines.
package main

import (
	"context"
	"flag"
	"fmt"
	"github.com/gompi/gompi/internal/manpage"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"text/tabwriter"
	"time"

	mpi "github.com/gompi/gompi/runtime"
)

// result is one measured line.
type result struct {
	bench string
	bytes int
	value float64
}

type bench struct {
	c     *mpi.Comm
	max   int
	iters int // 0: osu.c's counts
	table bool
	a, b  []byte
	out   []result
}

// count is osu.c's iters(n, small, large), or the -iters override.
func (b *bench) count(n, small, large int) int {
	if b.iters > 0 {
		return b.iters
	}
	if n <= 8192 {
		return small
	}
	return large
}

// cliFlags are gompi-bench's options; defineFlags puts them on fs, so that
// the man page is written from the same flag set main parses. No <...> in
// the help texts: the man page generator drops them as HTML tags.
type cliFlags struct {
	table                  *bool
	maxBytes, iters        *int
	cpuProfile, memProfile *string
}

func defineFlags(fs *flag.FlagSet) cliFlags {
	return cliFlags{
		table:      fs.Bool("table", false, "print a table for humans instead of \"BENCH BYTES VALUE\" lines"),
		maxBytes:   fs.Int("max", 8<<20, "largest message size in bytes (osu.c's MAXBYTES)"),
		iters:      fs.Int("iters", 0, "iterations per size instead of osu.c's counts (0: osu.c's)"),
		cpuProfile: fs.String("cpuprofile", "", "write each rank's CPU profile of the benchmark to `PREFIX`.RANK, one file per rank (go tool pprof)"),
		memProfile: fs.String("memprofile", "", "write each rank's allocation profile (every allocation sampled) to `PREFIX`.RANK, one file per rank (go tool pprof -sample_index=alloc_space)"),
	}
}

func main() {
	cf := defineFlags(flag.CommandLine)
	table, maxBytes, iters, cpuProfile, memProfile := cf.table, cf.maxBytes, cf.iters, cf.cpuProfile, cf.memProfile
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: gompi-bench [-table] [-max BYTES] [-iters N] latency|pairs|bw|mr|mrp|farm|allreduce|barrier|overlap [MAXBYTES [ITERS]]\n")
		flag.PrintDefaults()
	}
	if len(os.Args) == 3 && os.Args[1] == manpage.GenFlag {
		os.Exit(writeMan(os.Args[2], flag.CommandLine))
	}
	flag.Parse()
	name := "latency"
	args := flag.Args()
	if len(args) > 0 {
		name = args[0]
	}
	for i, p := range []*int{maxBytes, iters} {
		if len(args) > i+1 {
			v, err := strconv.Atoi(args[i+1])
			if err != nil || v < 0 {
				fmt.Fprintf(os.Stderr, "gompi-bench: bad number %q\n", args[i+1])
				os.Exit(2)
			}
			*p = v
		}
	}
	if len(args) > 3 || *maxBytes < 0 || *iters < 0 {
		flag.Usage()
		os.Exit(2)
	}
	run := map[string]func(*bench) error{
		"latency":   (*bench).latency,
		"pairs":     (*bench).pairs,
		"bw":        (*bench).bw,
		"allreduce": (*bench).allreduce,
		"barrier":   (*bench).barrier,
		"overlap":   (*bench).overlap,
		"mr":        (*bench).mr,
		"mrp":       (*bench).mrp,
		"farm":      (*bench).farm,
	}[name]
	if run == nil {
		fmt.Fprintf(os.Stderr, "gompi-bench: unknown benchmark %s (latency, pairs, bw, mr, mrp, farm, allreduce, barrier, overlap)\n", name)
		os.Exit(2)
	}

	c, err := mpi.Init(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "gompi-bench:", err)
		os.Exit(1)
	}
	if (name == "latency" || name == "pairs" || name == "bw" || name == "mr" || name == "mrp" || name == "farm") && c.Size() < 2 {
		fmt.Fprintf(os.Stderr, "gompi-bench: %s needs at least 2 ranks\n", name)
		c.Finalize()
		os.Exit(2)
	}
	b := &bench{c: c, max: *maxBytes, iters: *iters, table: *table,
		a: make([]byte, max(*maxBytes, 1)), b: make([]byte, max(*maxBytes, 1))}
	for i := range b.a {
		b.a[i] = 1
	}
	if *memProfile != "" {
		// Every allocation: the message-rate loops must allocate nothing,
		// and a sampled profile could miss the few that remain.
		runtime.MemProfileRate = 1
		defer func() {
			if err := writeMemProfile(fmt.Sprintf("%s.%d", *memProfile, c.Rank())); err != nil {
				fmt.Fprintln(os.Stderr, "gompi-bench:", err)
			}
		}()
	}
	if *cpuProfile != "" {
		stop, err := startProfile(fmt.Sprintf("%s.%d", *cpuProfile, c.Rank()))
		if err != nil {
			fmt.Fprintln(os.Stderr, "gompi-bench:", err)
			c.Abort(1)
			os.Exit(1)
		}
		defer stop()
	}
	if err := run(b); err != nil {
		fmt.Fprintf(os.Stderr, "gompi-bench: rank %d: %s: %v\n", c.Rank(), name, err)
		c.Abort(1)
		os.Exit(1)
	}
	if c.Rank() == 0 && *table {
		printTable(name, c.Size(), b.out)
	}
	if err := c.Finalize(); err != nil {
		fmt.Fprintf(os.Stderr, "gompi-bench: rank %d: finalize: %v\n", c.Rank(), err)
		os.Exit(1)
	}
}

// startProfile starts a CPU profile into path; stop ends it.
func startProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// writeMemProfile writes the allocation profile so far into path.
func writeMemProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// emit records a result at rank 0 and prints its machine line unless a
// table was asked for.
func (b *bench) emit(name string, n int, v float64) {
	if b.c.Rank() != 0 {
		return
	}
	b.out = append(b.out, result{name, n, v})
	if !b.table {
		prec := 3
		if name == "bw" || name == "mr" || name == "mrp" {
			prec = 4 // as osu.c: small messages move well under 1 MB/s
		}
		fmt.Printf("%s %d %.*f\n", name, n, prec, v)
	}
}

func (b *bench) latency() error {
	c, r := b.c, b.c.Rank()
	for n := 1; n <= b.max; n *= 2 {
		it := b.count(n, 10000, 200)
		warm := it / 10
		var t0 time.Time
		if err := c.Barrier(); err != nil {
			return err
		}
		a, bb := b.a[:n], b.b[:n]
		for i := 0; i < it+warm; i++ {
			if i == warm {
				t0 = time.Now()
			}
			switch r {
			case 0:
				if err := mpi.Send(c, a, 1, 1); err != nil {
					return err
				}
				if _, err := mpi.Recv(c, bb, 1, 1); err != nil {
					return err
				}
			case 1:
				if _, err := mpi.Recv(c, bb, 0, 1); err != nil {
					return err
				}
				if err := mpi.Send(c, a, 0, 1); err != nil {
					return err
				}
			}
		}
		b.emit("latency", n, float64(time.Since(t0).Nanoseconds())/1e3/(2*float64(it)))
	}
	return nil
}

// pairs is timed on the host's wall clock from the earliest rank's start
// to the latest rank's end, so a pair that runs while the other waits for a
// CPU is not timed alone. All ranks must share the clock (one host).
func (b *bench) pairs() error {
	c, r := b.c, b.c.Rank()
	peer := r ^ 1
	active := peer < c.Size()
	t, red := make([]int64, 2), make([]int64, 2)
	for n := 1; n <= b.max; n *= 2 {
		it := b.count(n, 10000, 200)
		warm := it / 10
		a, bb := b.a[:n], b.b[:n]
		for phase := 0; phase < 2; phase++ {
			if err := c.Barrier(); err != nil {
				return err
			}
			t[0] = -time.Now().UnixNano()
			rounds := warm
			if phase == 1 {
				rounds = it
			}
			for i := 0; i < rounds && active; i++ {
				if r%2 == 0 {
					if err := mpi.Send(c, a, peer, 1); err != nil {
						return err
					}
					if _, err := mpi.Recv(c, bb, peer, 1); err != nil {
						return err
					}
				} else {
					if _, err := mpi.Recv(c, bb, peer, 1); err != nil {
						return err
					}
					if err := mpi.Send(c, a, peer, 1); err != nil {
						return err
					}
				}
			}
			t[1] = time.Now().UnixNano()
		}
		// The max of -start is -(earliest start).
		if err := mpi.Reduce(c, t, red, mpi.Max, 0); err != nil {
			return err
		}
		b.emit("pairs", n, float64(red[1]+red[0])/1e3/(2*float64(it)))
	}
	return nil
}

func (b *bench) bw() error {
	const W = 64
	c, r := b.c, b.c.Rank()
	ctx := context.Background()
	reqs := make([]*mpi.Request, W)
	ack := make([]byte, 1)
	for n := 1; n <= b.max; n *= 2 {
		it := b.count(n, 200, 20)
		warm := 2
		var t0 time.Time
		if err := c.Barrier(); err != nil {
			return err
		}
		a, bb := b.a[:n], b.b[:n]
		for i := 0; i < it+warm; i++ {
			if i == warm {
				t0 = time.Now()
			}
			switch r {
			case 0:
				for w := range reqs {
					reqs[w] = mpi.Isend(c, a, 1, 2)
				}
				if _, err := mpi.WaitAll(ctx, reqs...); err != nil {
					return err
				}
				if _, err := mpi.Recv(c, ack, 1, 3); err != nil {
					return err
				}
			case 1:
				for w := range reqs {
					reqs[w] = mpi.Irecv(c, bb, 0, 2)
				}
				if _, err := mpi.WaitAll(ctx, reqs...); err != nil {
					return err
				}
				if err := mpi.Send(c, ack, 0, 3); err != nil {
					return err
				}
			}
		}
		b.emit("bw", n, float64(n)*W*float64(it)/time.Since(t0).Seconds()/1e9)
	}
	return nil
}

func (b *bench) allreduce() error {
	c := b.c
	// osu.c reduces its byte buffers reinterpreted as doubles; the values
	// do not matter for the timing.
	in := make([]float64, b.max/8)
	for i := range in {
		in[i] = 1
	}
	out := make([]float64, b.max/8)
	worst := make([]float64, 1)
	for n := 8; n <= b.max; n *= 2 {
		cnt := n / 8
		it := b.count(n, 2000, 50)
		warm := it/10 + 1
		var t0 time.Time
		if err := c.Barrier(); err != nil {
			return err
		}
		for i := 0; i < it+warm; i++ {
			if i == warm {
				t0 = time.Now()
			}
			if err := mpi.Allreduce(c, in[:cnt], out[:cnt], mpi.Sum); err != nil {
				return err
			}
		}
		dt := []float64{float64(time.Since(t0).Nanoseconds()) / 1e3 / float64(it)}
		if err := mpi.Reduce(c, dt, worst, mpi.Max, 0); err != nil {
			return err
		}
		b.emit("allreduce", n, worst[0])
	}
	return nil
}

func (b *bench) barrier() error {
	c := b.c
	it, warm := 20000, 1000
	if b.iters > 0 {
		it, warm = b.iters, b.iters/20
	}
	var t0 time.Time
	for i := 0; i < it+warm; i++ {
		if i == warm {
			t0 = time.Now()
		}
		if err := c.Barrier(); err != nil {
			return err
		}
	}
	b.emit("barrier", 0, float64(time.Since(t0).Nanoseconds())/1e3/float64(it))
	return nil
}

func printTable(name string, ranks int, rs []result) {
	unit := map[string]string{"latency": "one-way latency (µs)", "pairs": "one-way latency, all pairs at once (µs)", "bw": "bandwidth (GB/s)",
		"allreduce": "allreduce of float64 (µs, max over ranks)", "barrier": "barrier (µs)",
		"mr":      "message rate, all pairs (millions of messages/s)",
		"mrp":     "message rate, persistent requests, all pairs (millions of messages/s)",
		"farm":    "task farm, whole time (ms)",
		"overlap": "Iallreduce overlapped with compute (µs; overlap: ratio)"}[name]
	fmt.Printf("# gompi-bench %s, %d ranks\n", name, ranks)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "bytes\tsize\t%s\t\n", unit)
	for _, r := range rs {
		fmt.Fprintf(tw, "%d\t%s\t%.3f\t\n", r.bytes, human(r.bytes), r.value)
	}
	tw.Flush()
}

// human writes a byte count as B, KiB or MiB.
func human(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}
