// Command heat solves the 2-D heat equation on a square plate (Jacobi
// iteration, rows split across ranks, halo exchange, a global residual)
// and checkpoints through package ckpt. It prints `checksum <hex>` of its
// final grid, identical however often it was interrupted and restarted.
//
//	gompiexec -ckpoint-prefix /tmp/heat -max-restarts 1 -n 4 ./heat -crash-at 60
//
// -crash-at STEP kills one rank at that step in a run that started from
// scratch (not restored from a checkpoint, not a relaunch), to try restart.
// -cow keeps the grid in runtime/cow's memory, so that with a cache level
// checkpoints save it by a copy-on-write snapshot (docs/ckpt.md,
// "Snapshots").
package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"syscall"
	"time"

	"github.com/gompi/gompi/ckpt"
	mpi "github.com/gompi/gompi/runtime"
	"github.com/gompi/gompi/runtime/cow"
)

type params struct {
	n, steps, every, crashAt, crashRank int
	delay                               time.Duration
	failRestore                         int
	cow                                 bool
}

func main() {
	var p params
	flag.IntVar(&p.n, "n", 256, "grid points per side")
	flag.IntVar(&p.steps, "steps", 300, "iterations")
	flag.IntVar(&p.every, "ckpt-every", 20, "checkpoint every this many steps (0: only when the launcher's interval or SIGUSR1 asks)")
	flag.IntVar(&p.crashAt, "crash-at", -1, "kill one rank at this step in a run that started from scratch")
	flag.IntVar(&p.crashRank, "crash-rank", -1, "the rank -crash-at kills (default: the last)")
	flag.DurationVar(&p.delay, "delay", 8*time.Millisecond, "sleep per step (stands for real work)")
	flag.IntVar(&p.failRestore, "fail-restore-rank", -1, "this rank reports a failed read of the newest epoch on restart (tests)")
	flag.BoolVar(&p.cow, "cow", false, "allocate the grid with runtime/cow (snapshotted checkpoints with a cache level)")
	flag.Parse()
	if err := run(p); err != nil {
		fmt.Fprintln(os.Stderr, "heat:", err)
		os.Exit(1)
	}
}

func run(p params) error {
	world, err := mpi.Init(context.Background())
	if err != nil {
		return err
	}
	rank, size := world.Rank(), world.Size()
	if p.n < size {
		return fmt.Errorf("-n %d: need at least one row per rank (%d ranks)", p.n, size)
	}
	// Rows [lo, hi) of the plate are this rank's; u holds them with a
	// ghost row above and below.
	lo, hi := rank*p.n/size, (rank+1)*p.n/size
	rows, w := hi-lo, p.n
	u := make([]float64, (rows+2)*w)
	v := make([]float64, (rows+2)*w)
	if p.cow {
		if u, err = cow.Make[float64]((rows + 2) * w); err != nil {
			return err
		}
		if v, err = cow.Make[float64]((rows + 2) * w); err != nil {
			return err
		}
	}
	for i := 0; i < rows; i++ {
		for j := 0; j < w; j++ {
			u[(i+1)*w+j] = initial(lo+i, j, p.n)
		}
	}
	step := 0

	var cp *ckpt.Ckpt
	restored := false
	cfg := ckpt.FromEnv()
	if cfg.Prefix != "" {
		if cp, err = ckpt.New(context.Background(), world, cfg); err != nil {
			return err
		}
		cp.Register("step", &step)
		ckpt.RegisterSlice(cp, "grid", &u)
		if rank == p.failRestore {
			cp.RegisterStream("probe", probe{}, &failOnce{})
		} else {
			cp.RegisterStream("probe", probe{}, &failOnce{done: true})
		}
		e, err := cp.Restore()
		switch {
		case err == nil:
			// Restore resizes the grid to what the epoch saved: one
			// written with another -n (or job size) is not this run's.
			if len(u) != (rows+2)*w {
				return fmt.Errorf("epoch %d in %s holds %d grid points on rank %d, this run (-n %d on %d ranks) has %d: it was written with another -n; use another -ckpoint-prefix", e, cfg.Prefix, len(u), rank, p.n, size, (rows+2)*w)
			}
			restored = true
			if rank == 0 {
				fmt.Printf("heat: restored epoch %d at step %d\n", e, step)
			}
		case errors.Is(err, ckpt.ErrNoCheckpoint):
			if rank == 0 {
				fmt.Printf("heat: no checkpoint to restore, starting from step 0\n")
			}
		default:
			return err
		}
	}
	crashRank := p.crashRank
	if crashRank < 0 {
		crashRank = size - 1
	}
	firstRun := !restored && os.Getenv("GOMPI_RESTART") == ""
	up, down := rank-1, rank+1
	for ; step < p.steps; step++ {
		if step == p.crashAt && firstRun && rank == crashRank {
			fmt.Fprintf(os.Stderr, "heat: rank %d crashing at step %d as asked\n", rank, step)
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		// Halo exchange: my first row goes up, my last row down.
		if up >= 0 {
			if _, err := mpi.Sendrecv(world, u[w:2*w], up, 1, u[:w], up, 2); err != nil {
				return err
			}
		}
		if down < size {
			if _, err := mpi.Sendrecv(world, u[rows*w:(rows+1)*w], down, 2, u[(rows+1)*w:], down, 1); err != nil {
				return err
			}
		}
		local := 0.0
		for i := 1; i <= rows; i++ {
			g := lo + i - 1
			for j := 0; j < w; j++ {
				k := i*w + j
				if g == 0 || g == p.n-1 || j == 0 || j == w-1 {
					v[k] = u[k] // fixed boundary
					continue
				}
				v[k] = 0.25 * (u[k-w] + u[k+w] + u[k-1] + u[k+1])
				d := v[k] - u[k]
				local += d * d
			}
		}
		u, v = v, u
		res := []float64{local}
		if err := mpi.Allreduce(world, res, res, mpi.Sum); err != nil {
			return err
		}
		if rank == 0 && (step+1)%100 == 0 {
			fmt.Printf("heat: step %d residual %.6e\n", step+1, math.Sqrt(res[0]))
		}
		if p.delay > 0 {
			time.Sleep(p.delay)
		}
		if cp != nil {
			need, err := cp.NeedCheckpoint()
			if err != nil {
				return err
			}
			if need || (p.every > 0 && (step+1)%p.every == 0) {
				// The saved step is the next one to run.
				step++
				cp.SetStep(int64(step))
				err := cp.Checkpoint()
				step--
				if err != nil {
					return err
				}
			}
		}
	}
	if cp != nil {
		if err := cp.Close(); err != nil {
			return err
		}
		if p.cow && rank == 0 {
			fmt.Printf("heat: rank 0 snapshotted %d checkpoints\n", cp.Snapshots())
		}
	}
	sum, err := checksum(world, u[w:(rows+1)*w], p.n)
	if err != nil {
		return err
	}
	if rank == 0 {
		fmt.Printf("checksum %s\n", sum)
	}
	return world.Finalize()
}

// initial is the plate at step 0: a hot top edge and a warm square.
func initial(i, j, n int) float64 {
	switch {
	case i == 0:
		return 100
	case i > n/4 && i < n/2 && j > n/4 && j < n/2:
		return 50
	}
	return 0
}

// checksum is the SHA-256 of the whole grid (little-endian float64s, row
// by row), computed at rank 0.
func checksum(world *mpi.Comm, mine []float64, n int) (string, error) {
	size := world.Size()
	counts, displs := make([]int, size), make([]int, size)
	for r := 0; r < size; r++ {
		counts[r] = ((r+1)*n/size - r*n/size) * n
		displs[r] = r * n / size * n
	}
	var all []float64
	if world.Rank() == 0 {
		all = make([]float64, n*n)
	}
	if err := mpi.Gatherv(world, mine, all, counts, displs, 0); err != nil {
		return "", err
	}
	h := sha256.New()
	var b [8]byte
	for _, x := range all {
		binary.LittleEndian.PutUint64(b[:], math.Float64bits(x))
		h.Write(b[:])
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// probe is a small stream section; failOnce reads it back, and can
// report a failed read the first time, as an application that finds its
// state inconsistent would (the ranks then fall back to an older epoch).
type probe struct{}

func (probe) WriteTo(w io.Writer) (int64, error) {
	n, err := w.Write([]byte("heat"))
	return int64(n), err
}

type failOnce struct{ done bool }

func (f *failOnce) ReadFrom(r io.Reader) (int64, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return int64(len(b)), err
	}
	if !f.done {
		f.done = true
		return int64(len(b)), errors.New("heat: -fail-restore-rank: refusing this epoch")
	}
	return int64(len(b)), nil
}
