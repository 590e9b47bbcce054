package ckpt

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"runtime/debug"
	"sync"
	"testing"

	"github.com/gompi/gompi/ckpt/layout"
	mpi "github.com/gompi/gompi/runtime"
	"github.com/gompi/gompi/runtime/cow"
)

// gridAt is rank's grid at step k.
func gridAt(rank, k, n int) []float64 {
	g := make([]float64, n)
	for i := range g {
		g[i] = float64(rank*1_000_000+k*1000) + math.Sqrt(float64(i))
	}
	return g
}

// TestSnapshotCheckpoint: a cow.Make grid is saved as it was at
// Checkpoint while the application overwrites it at once (eight
// goroutines, garbage collection in a loop at GOGC=1, a Recv into it),
// by a snapshot when there is a cache and it is not turned off, by the
// copy path otherwise; every way restores the state bit for bit, and a
// snapshotted epoch's cache manifest is committed (with checksums) once
// flushed.
func TestSnapshotCheckpoint(t *testing.T) {
	const n = 1 << 19 // 4 MiB per rank
	for _, tc := range []struct {
		name    string
		cache   bool
		env     string // GOMPI_COW
		noSnap  bool
		snapped bool
	}{
		{name: "snapshot", cache: true, snapped: true},
		{name: "GOMPI_COW=off", cache: true, env: "off"},
		{name: "NoSnapshot", cache: true, noSnap: true},
		{name: "no cache", cache: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(cow.EnvDisable, tc.env)
			cfg := Config{Prefix: t.TempDir(), Keep: 2, NoSnapshot: tc.noSnap}
			if tc.cache {
				cfg.Cache = t.TempDir()
			}
			defer debug.SetGCPercent(debug.SetGCPercent(1))
			noErrs(t, runRanks(t, 2, func(comm *mpi.Comm) error {
				var grid []float64
				c, err := newGrid(comm, cfg, &grid, n)
				if err != nil {
					return err
				}
				defer cow.Free(grid)
				step := 0
				c.Register("step", &step)
				rank, peer := comm.Rank(), 1-comm.Rank()
				for k := 1; k <= 3; k++ {
					copy(grid, gridAt(rank, k, n))
					step = k
					if err := c.Checkpoint(); err != nil {
						return err
					}
					// Overwrite everything at once.
					var wg sync.WaitGroup
					for g := 0; g < 8; g++ {
						wg.Add(1)
						go func(g int) {
							defer wg.Done()
							part := grid[g*n/8 : (g+1)*n/8]
							for i := range part {
								part[i] = -1
							}
							runtime.GC()
						}(g)
					}
					wg.Wait()
					if _, err := mpi.Sendrecv(comm, grid[:1024], peer, k, grid[1024:2048], peer, k); err != nil {
						return err
					}
				}
				if got, want := c.Snapshots(), map[bool]int{true: 3}[tc.snapped]; got != want {
					return fmt.Errorf("rank %d: %d checkpoints snapshotted, want %d", rank, got, want)
				}
				if err := c.Flush(); err != nil {
					return err
				}
				if tc.cache {
					m, err := layout.ReadManifest(cfg.Cache, 3)
					if err != nil {
						return fmt.Errorf("rank %d: cache epoch 3 after Flush: %w", rank, err)
					}
					if !m.Checksummed() {
						return fmt.Errorf("rank %d: cache epoch 3 committed without checksums", rank)
					}
				}
				if err := c.Close(); err != nil {
					return err
				}
				// Restore into a cow slice of another length: it is
				// resized in cow's memory.
				var back []float64
				c, err = newGrid(comm, cfg, &back, 1)
				if err != nil {
					return err
				}
				c.Register("step", &step)
				step = 0
				e, err := c.Restore()
				if err != nil {
					return err
				}
				defer cow.Free(back)
				if e != 3 || step != 3 || !cow.Owns(back) {
					return fmt.Errorf("rank %d: restored epoch %d step %d (in cow memory: %v), want 3, 3, true", rank, e, step, cow.Owns(back))
				}
				want := gridAt(rank, 3, n)
				for i := range want {
					if math.Float64bits(back[i]) != math.Float64bits(want[i]) {
						return fmt.Errorf("rank %d: grid[%d] = %v, saved %v", rank, i, back[i], want[i])
					}
				}
				return c.Close()
			}))
		})
	}
}

// TestCloseDuringSnapshot: Close right after a snapshotted Checkpoint
// waits for the writer, commits the epoch in the prefix, and a restart
// restores it.
func TestCloseDuringSnapshot(t *testing.T) {
	const n = 1 << 20 // 8 MiB per rank
	cfg := Config{Prefix: t.TempDir(), Cache: t.TempDir()}
	noErrs(t, runRanks(t, 2, func(comm *mpi.Comm) error {
		var grid []float64
		c, err := newGrid(comm, cfg, &grid, n)
		if err != nil {
			return err
		}
		defer cow.Free(grid)
		copy(grid, gridAt(comm.Rank(), 1, n))
		if err := c.Checkpoint(); err != nil {
			return err
		}
		snap := c.snap
		for i := range grid {
			grid[i] = 0
		}
		if err := c.Close(); err != nil {
			return err
		}
		select {
		case <-snap.Done():
		default:
			return fmt.Errorf("rank %d: Close returned with the snapshot writer running", comm.Rank())
		}
		// Rank 0's Close returns after its commit.
		if err := comm.Barrier(); err != nil {
			return err
		}
		if m, err := layout.Newest(cfg.Prefix); err != nil || m.Epoch != 1 {
			return fmt.Errorf("rank %d: prefix after Close: %+v, %v; want epoch 1", comm.Rank(), m, err)
		}
		c, err = New(context.Background(), comm, cfg)
		if err != nil {
			return err
		}
		RegisterSlice(c, "grid", &grid)
		if _, err := c.Restore(); err != nil {
			return err
		}
		want := gridAt(comm.Rank(), 1, n)
		for i := range want {
			if grid[i] != want[i] {
				return fmt.Errorf("rank %d: grid[%d] = %v, saved %v", comm.Rank(), i, grid[i], want[i])
			}
		}
		return c.Close()
	}))
}

// newGrid starts checkpointing comm's ranks with cfg and a "grid" of n
// float64s in cow memory (MakeSlice).
func newGrid(comm *mpi.Comm, cfg Config, grid *[]float64, n int) (*Ckpt, error) {
	c, err := New(context.Background(), comm, cfg)
	if err != nil {
		return nil, err
	}
	if err := MakeSlice(c, "grid", grid, n); err != nil {
		return nil, err
	}
	return c, nil
}
