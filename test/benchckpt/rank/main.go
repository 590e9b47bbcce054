// Command rank is the rank program of `make bench-ckpt`: it fills -mib MiB
// of state, takes one checkpoint through package ckpt (settings from
// gompiexec's -ckpoint-* options) and prints, at rank 0, how long the
// application was blocked in Checkpoint and how long until the epoch was
// in the prefix (Close waits for the flush), both the slowest rank's.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/gompi/gompi/ckpt"
	mpi "github.com/gompi/gompi/runtime"
)

func main() {
	mib := flag.Int("mib", 256, "MiB of state per rank")
	flag.Parse()
	if err := run(*mib); err != nil {
		fmt.Fprintln(os.Stderr, "rank:", err)
		os.Exit(1)
	}
}

func run(mib int) error {
	world, err := mpi.Init(context.Background())
	if err != nil {
		return err
	}
	state := make([]uint64, mib<<20/8)
	x := uint64(world.Rank()) + 1
	for i := range state {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		state[i] = x
	}
	cfg := ckpt.FromEnv()
	cfg.Keep = 1
	c, err := ckpt.New(context.Background(), world, cfg)
	if err != nil {
		return err
	}
	ckpt.RegisterSlice(c, "state", &state)
	if err := world.Barrier(); err != nil {
		return err
	}
	t0 := time.Now()
	if err := c.Checkpoint(); err != nil {
		return err
	}
	blocked := time.Since(t0)
	if err := c.Close(); err != nil {
		return err
	}
	total := time.Since(t0)
	v := []float64{blocked.Seconds(), total.Seconds()}
	if err := mpi.Allreduce(world, v, v, mpi.Max); err != nil {
		return err
	}
	if world.Rank() == 0 {
		fmt.Printf("blocked %.6f total %.6f\n", v[0], v[1])
	}
	return world.Finalize()
}
