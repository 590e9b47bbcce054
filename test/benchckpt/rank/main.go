// Command rank is the rank program of `make bench-ckpt`: it fills -mib MiB
// of state and takes -ckpts checkpoints through package ckpt (settings
// from gompiexec's -ckpoint-* options), changing all of its state before
// each one, as a solver does between checkpoints. After each checkpoint it
// waits for the background flush (Flush), as a real run's interval
// (minutes) would. It prints, at rank 0, how long the application was
// blocked in the first Checkpoint, how long until that epoch was committed
// in the prefix, and how long it was blocked in each later Checkpoint (the
// steady state, when the cache's files are reused): each the slowest
// rank's.
//
// With -cow the state lives in runtime/cow's memory, so that with a cache
// level each Checkpoint is a copy-on-write snapshot. With -pass-after the
// program changes its state right after each Checkpoint (while the flush,
// or the snapshot, goes on in the background) rather than just before the
// next, and reports the longest such pass next to the same pass with
// nothing in the background: what the background phase costs the
// application's computation (for a snapshot, the page copies).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/gompi/gompi/ckpt"
	mpi "github.com/gompi/gompi/runtime"
	"github.com/gompi/gompi/runtime/cow"
)

func main() {
	mib := flag.Int("mib", 256, "MiB of state per rank")
	ckpts := flag.Int("ckpts", 3, "checkpoints to take (the first, then the steady state)")
	prime := flag.Bool("prime", false, "call NeedCheckpoint (and wait for what it starts) before the first checkpoint, as a solver's loop does for minutes")
	poll := flag.Duration("poll", 0, "instead of Flush after each checkpoint, call NeedCheckpoint every 5 ms for this long, as a solver's loop does while the flush goes on, and report the longest call")
	useCow := flag.Bool("cow", false, "keep the state in runtime/cow's memory (snapshotted checkpoints with a cache level)")
	passAfter := flag.Bool("pass-after", false, "change the state right after each Checkpoint, and report how long that took")
	flag.Parse()
	if err := run(*mib, *ckpts, *prime, *poll, *useCow, *passAfter); err != nil {
		fmt.Fprintln(os.Stderr, "rank:", err)
		os.Exit(1)
	}
}

func xorshift(x uint64) uint64 {
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	return x
}

func run(mib, ckpts int, prime bool, poll time.Duration, useCow, passAfter bool) error {
	world, err := mpi.Init(context.Background())
	if err != nil {
		return err
	}
	state := make([]uint64, mib<<20/8)
	if useCow {
		if state, err = cow.Make[uint64](mib << 20 / 8); err != nil {
			return err
		}
	}
	update := func() time.Duration {
		t := time.Now()
		for i := range state {
			state[i] = xorshift(state[i])
		}
		return time.Since(t)
	}
	x := uint64(world.Rank()) + 1
	for i := range state {
		x = xorshift(x)
		state[i] = x
	}
	cfg := ckpt.FromEnv()
	cfg.Keep = 1
	c, err := ckpt.New(context.Background(), world, cfg)
	if err != nil {
		return err
	}
	ckpt.RegisterSlice(c, "state", &state)
	if prime {
		if _, err := c.NeedCheckpoint(); err != nil {
			return err
		}
		if err := c.Flush(); err != nil {
			return err
		}
	}
	// v[0]: blocked in the first checkpoint, v[1]: until it was flushed
	// and committed, v[2:]: blocked in the later ones.
	v := make([]float64, ckpts+1)
	var needMax float64 // the longest NeedCheckpoint call (-poll)
	// -pass-after: one pass over the state with nothing in the
	// background, and the longest pass right after a Checkpoint.
	var alone, during float64
	if passAfter {
		if err := world.Barrier(); err != nil {
			return err
		}
		alone = update().Seconds()
	}
	updated := false
	for k := 0; k < ckpts; k++ {
		if k > 0 && !updated {
			update()
		}
		if err := world.Barrier(); err != nil {
			return err
		}
		t0 := time.Now()
		if err := c.Checkpoint(); err != nil {
			return err
		}
		blocked := time.Since(t0)
		updated = false
		if passAfter && k < ckpts-1 {
			during = max(during, update().Seconds())
			updated = true
		}
		// A fixed count, not a deadline: NeedCheckpoint is collective.
		for i := 0; i < int(poll/(5*time.Millisecond)); i++ {
			time.Sleep(5 * time.Millisecond)
			t := time.Now()
			if _, err := c.NeedCheckpoint(); err != nil {
				return err
			}
			needMax = max(needMax, time.Since(t).Seconds())
		}
		if err := c.Flush(); err != nil {
			return err
		}
		if k == 0 {
			v[0], v[1] = blocked.Seconds(), time.Since(t0).Seconds()
		} else {
			v[k+1] = blocked.Seconds()
		}
	}
	if err := c.Close(); err != nil {
		return err
	}
	snaps := float64(c.Snapshots())
	v = append(v, alone, during, -snaps, needMax)
	if err := mpi.Allreduce(world, v, v, mpi.Max); err != nil {
		return err
	}
	if world.Rank() == 0 {
		var steady []string
		alone, during, snaps, needMax = v[len(v)-4], v[len(v)-3], -v[len(v)-2], v[len(v)-1]
		v = v[:len(v)-4]
		for _, s := range v[2:] {
			steady = append(steady, fmt.Sprintf("%.6f", s))
		}
		fmt.Printf("blocked %.6f total %.6f steady %s\n", v[0], v[1], strings.Join(steady, " "))
		fmt.Printf("snapshots %d\n", int(snaps))
		if passAfter {
			fmt.Printf("pass alone %.6f after %.6f\n", alone, during)
		}
		if poll > 0 {
			fmt.Printf("longest NeedCheckpoint %.6f\n", needMax)
		}
	}
	return world.Finalize()
}
