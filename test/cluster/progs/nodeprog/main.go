// Command nodeprog is the Go rank program of the multi-host tests. Every
// mode reports the host it runs on as the content of /tmp/gompi-host,
// which only that host's private /tmp holds (the hostname is shared).
//
//	nodeprog where          PMI put/fence/get: print rank, size, local rank,
//	                        host and the host of the right-hand neighbour
//	nodeprog cat            copy stdin to stdout, then report the byte count
//	nodeprog exit CODE RANK rank RANK exits with CODE, the others sleep
//	nodeprog sleep DUR      print "ready", then sleep
//	nodeprog wheresleep DUR as where, then print "ready" and sleep
//	nodeprog trap           print "ready", then report every SIGINT (and keep running)
//	nodeprog failbarrier R  mpi.Init; rank R exits 7, the others enter a barrier
//	nodeprog trapterm       print "ready"; report SIGUSR1/2; on SIGTERM save and exit 3
//	nodeprog deadlist R     rank R exits 5; the others wait until PMI_dead_processes
//	                        is "R" (gompiexec -disable-auto-cleanup), print it, finalize
//	nodeprog coll           the runtime's collectives (node-aware across hosts)
//	                        small and large, checked; print "coll ok"
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gompi/gompi/pmi/client"
	mpi "github.com/gompi/gompi/runtime"
)

func host() string {
	b, err := os.ReadFile("/tmp/gompi-host")
	if err != nil {
		return "unknown(" + err.Error() + ")"
	}
	return strings.TrimSpace(string(b))
}

func main() {
	rank := os.Getenv("PMI_RANK")
	args := os.Args[1:]
	if len(args) == 0 {
		args = []string{"where"}
	}
	switch args[0] {
	case "where":
		if err := where(); err != nil {
			fmt.Fprintf(os.Stderr, "nodeprog: rank %s on %s: %v\n", rank, host(), err)
			os.Exit(1)
		}
	case "cat":
		n, _ := io.Copy(os.Stdout, os.Stdin)
		fmt.Printf("rank %s on %s read %d bytes\n", rank, host(), n)
	case "exit":
		code, _ := strconv.Atoi(args[1])
		if args[2] == rank {
			fmt.Fprintf(os.Stderr, "rank %s on %s exits with %d\n", rank, host(), code)
			os.Exit(code)
		}
		time.Sleep(60 * time.Second)
	case "trap":
		c := make(chan os.Signal, 4)
		signal.Notify(c, syscall.SIGINT)
		fmt.Printf("rank %s on %s ready\n", rank, host())
		for range c {
			fmt.Printf("rank %s on %s got interrupt\n", rank, host())
		}
	case "trapterm":
		// As a code that checkpoints at the time limit: SIGUSR1 and
		// SIGUSR2 are reported, SIGTERM saves (a moment) and exits 3.
		c := make(chan os.Signal, 4)
		signal.Notify(c, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGTERM)
		fmt.Printf("rank %s on %s ready\n", rank, host())
		for sig := range c {
			if sig != syscall.SIGTERM {
				fmt.Printf("rank %s on %s got %v\n", rank, host(), sig)
				continue
			}
			time.Sleep(200 * time.Millisecond)
			fmt.Printf("rank %s on %s saved after %v\n", rank, host(), sig)
			os.Exit(3)
		}
	case "failbarrier":
		// Rank RANK exits 7 after Init; the others enter a barrier.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c, err := mpi.Init(ctx)
		if err != nil {
			fmt.Fprintf(os.Stderr, "nodeprog: rank %s: init: %v\n", rank, err)
			os.Exit(1)
		}
		fmt.Printf("rank %d of %d on %s ready\n", c.Rank(), c.Size(), host())
		if strconv.Itoa(c.Rank()) == args[1] {
			os.Exit(7)
		}
		if err := c.Barrier(); err != nil {
			fmt.Fprintf(os.Stderr, "rank %d on %s: barrier: %v\n", c.Rank(), host(), err)
			os.Exit(1)
		}
		fmt.Printf("rank %d passed the barrier\n", c.Rank())
		c.Finalize()
	case "deadlist":
		if err := deadList(rank, args[1]); err != nil {
			fmt.Fprintf(os.Stderr, "nodeprog: rank %s on %s: %v\n", rank, host(), err)
			os.Exit(1)
		}
	case "wheresleep":
		if err := where(); err != nil {
			fmt.Fprintf(os.Stderr, "nodeprog: rank %s on %s: %v\n", rank, host(), err)
			os.Exit(1)
		}
		d, _ := time.ParseDuration(args[1])
		fmt.Printf("rank %s on %s ready\n", rank, host())
		time.Sleep(d)
	case "coll":
		if err := coll(); err != nil {
			fmt.Fprintf(os.Stderr, "nodeprog: rank %s on %s: coll: %v\n", rank, host(), err)
			os.Exit(1)
		}
		fmt.Printf("rank %s on %s coll ok\n", rank, host())
	case "sleep":
		d, _ := time.ParseDuration(args[1])
		fmt.Printf("rank %s on %s ready\n", rank, host())
		time.Sleep(d)
	default:
		fmt.Fprintf(os.Stderr, "nodeprog: unknown mode %q\n", args[0])
		os.Exit(2)
	}
}

func deadList(rank, victim string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pc, err := client.New(ctx)
	if err != nil {
		return err
	}
	if rank == victim {
		os.Exit(5)
	}
	var got string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if got, err = pc.Get(ctx, "PMI_dead_processes"); err == nil && got == victim {
			fmt.Printf("rank %s on %s: dead %s\n", rank, host(), got)
			return pc.Finalize()
		}
	}
	return fmt.Errorf("PMI_dead_processes = %q, %v; want %q", got, err, victim)
}

func where() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.New(ctx)
	if err != nil {
		return err
	}
	me := host()
	if err := c.Put("host-"+strconv.Itoa(c.Rank()), me); err != nil {
		return err
	}
	if err := c.Fence(ctx); err != nil {
		return err
	}
	right := (c.Rank() + 1) % c.Size()
	there, err := c.Get(ctx, "host-"+strconv.Itoa(right))
	if err != nil {
		return err
	}
	fmt.Printf("rank=%d size=%d local=%s/%s host=%s right=%d@%s\n", c.Rank(), c.Size(),
		os.Getenv("MPI_LOCALRANKID"), os.Getenv("MPI_LOCALNRANKS"), me, right, there)
	return c.Finalize()
}

// coll runs Barrier, Bcast, Reduce and Allreduce below and above the
// 64 KiB switch points, with a commutative and a non-commutative op, and
// checks the results exactly (small integers).
func coll() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := mpi.Init(ctx)
	if err != nil {
		return err
	}
	defer c.Finalize()
	n, r := c.Size(), c.Rank()
	val := func(r, i int) float64 { return float64((r*7+i*3)%5 + 1) }
	fill := func(r, cnt int) []float64 {
		b := make([]float64, cnt)
		for i := range b {
			b[i] = val(r, i)
		}
		return b
	}
	// first keeps the lowest rank's value: order-sensitive.
	first := mpi.NewOp("first", func(in, inout []float64) { copy(inout, in) }, false)
	for _, cnt := range []int{3, 20000} {
		if err := c.Barrier(); err != nil {
			return err
		}
		buf := make([]float64, cnt)
		if r == n-1 {
			buf = fill(n-1, cnt)
		}
		if err := mpi.Bcast(c, buf, n-1); err != nil {
			return err
		}
		sum := make([]float64, cnt)
		if err := mpi.Allreduce(c, fill(r, cnt), sum, mpi.Sum); err != nil {
			return err
		}
		low := make([]float64, cnt)
		if err := mpi.Reduce(c, fill(r, cnt), low, first, n/2); err != nil {
			return err
		}
		for i := 0; i < cnt; i++ {
			want := 0.0
			for q := 0; q < n; q++ {
				want += val(q, i)
			}
			switch {
			case buf[i] != val(n-1, i):
				return fmt.Errorf("bcast of %d: [%d] = %v", cnt, i, buf[i])
			case sum[i] != want:
				return fmt.Errorf("allreduce of %d: [%d] = %v, want %v", cnt, i, sum[i], want)
			case r == n/2 && low[i] != val(0, i):
				return fmt.Errorf("reduce of %d: [%d] = %v, want %v", cnt, i, low[i], val(0, i))
			}
		}
	}
	return c.Barrier()
}
