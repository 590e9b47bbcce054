// Command ckprobe is a small rank program for test/ckpt: it registers a
// numeric slice (and a step counter), restores, and takes checkpoints,
// or misuses the library in the ways -misuse names, printing what each
// call returned.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gompi/gompi/ckpt"
	mpi "github.com/gompi/gompi/runtime"
)

func main() {
	size := flag.Int("size", 1024, "float64s of state per rank")
	ckpts := flag.Int("ckpts", 3, "checkpoints to take")
	misuse := flag.String("misuse", "", "after-close, register-after-restore, loop=N, or OP0/OP: rank 0 calls OP0, the others OP (Checkpoint, NeedCheckpoint, Flush, Close, Restore, HaveRestart)")
	hold := flag.Duration("hold", 0, "sleep after each checkpoint")
	flag.Parse()
	if err := run(*size, *ckpts, *misuse, *hold); err != nil {
		fmt.Fprintln(os.Stderr, "ckprobe:", err)
		os.Exit(1)
	}
}

func run(size, ckpts int, misuse string, hold time.Duration) error {
	world, err := mpi.Init(context.Background())
	if err != nil {
		return err
	}
	rank := world.Rank()
	c, err := ckpt.New(context.Background(), world, ckpt.FromEnv())
	if err != nil {
		return err
	}
	step := 0
	state := make([]float64, size)
	if misuse != "register-after-restore" {
		c.Register("step", &step)
		ckpt.RegisterSlice(c, "state", &state)
	}
	e, err := c.Restore()
	if misuse == "register-after-restore" {
		c.Register("step", &step)
		ckpt.RegisterSlice(c, "state", &state)
	}
	switch {
	case err == nil:
		fmt.Printf("rank %d: restored epoch %d step %d\n", rank, e, step)
	case errors.Is(err, ckpt.ErrNoCheckpoint):
		fmt.Printf("rank %d: no checkpoint\n", rank)
	default:
		return err
	}
	for i := range state {
		if state[i] != float64(step*1000+rank) {
			if step != 0 {
				return fmt.Errorf("rank %d: restored state[%d] = %v, want %v", rank, i, state[i], step*1000+rank)
			}
		}
	}
	if d, ok := strings.CutPrefix(misuse, "loop="); ok {
		// Ask NeedCheckpoint N times, every 10 ms (a count, not a time:
		// every rank must make the same calls), checkpointing when it
		// says so and going on after a failed checkpoint, as a long job
		// that logs the failure would; print how many were tried.
		n, err := strconv.Atoi(d)
		if err != nil {
			return err
		}
		tries, failed, start := 0, 0, time.Now()
		for i := 0; i < n; i++ {
			time.Sleep(10 * time.Millisecond)
			need, err := c.NeedCheckpoint()
			if err != nil {
				return err
			}
			if need {
				tries++
				if err := c.Checkpoint(); err != nil {
					failed++
				}
			}
		}
		fmt.Printf("rank %d: %d checkpoints tried, %d failed in %.1f s\n", rank, tries, failed, time.Since(start).Seconds())
		c.Close()
		return world.Finalize()
	}
	if op0, others, ok := strings.Cut(misuse, "/"); ok {
		// Rank 0 calls op0, the others another collective operation:
		// each returns the error that says so, or the job hangs.
		op := others
		if rank == 0 {
			op = op0
		}
		for i := 0; i < 3; i++ {
			var err error
			switch op {
			case "Checkpoint":
				err = c.Checkpoint()
			case "NeedCheckpoint":
				_, err = c.NeedCheckpoint()
			case "Flush":
				err = c.Flush()
			case "Close":
				err = c.Close()
			case "Restore":
				_, err = c.Restore()
			case "HaveRestart":
				_, err = c.HaveRestart()
			default:
				return fmt.Errorf("-misuse %s: unknown operation %q", misuse, op)
			}
			fmt.Printf("rank %d: %s: %v\n", rank, op, err)
			if err != nil {
				return err
			}
		}
		return c.Close()
	}
	for k := 0; k < ckpts; k++ {
		step++
		for i := range state {
			state[i] = float64(step*1000 + rank)
		}
		c.SetStep(int64(step))
		if err := c.Checkpoint(); err != nil {
			return err
		}
		fmt.Printf("rank %d: committed epoch %d step %d\n", rank, c.Epoch(), step)
		time.Sleep(hold)
	}
	if err := c.Close(); err != nil {
		return err
	}
	if misuse == "after-close" {
		_, err := c.NeedCheckpoint()
		fmt.Printf("rank %d: NeedCheckpoint after Close: %v\n", rank, err)
		fmt.Printf("rank %d: Checkpoint after Close: %v\n", rank, c.Checkpoint())
		fmt.Printf("rank %d: Flush after Close: %v\n", rank, c.Flush())
		e, err := c.Restore()
		fmt.Printf("rank %d: Restore after Close: %d %v\n", rank, e, err)
		fmt.Printf("rank %d: Close again: %v\n", rank, c.Close())
	}
	return world.Finalize()
}
