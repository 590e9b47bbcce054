package ckpt

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gompi/gompi/ckpt/layout"
	"github.com/gompi/gompi/internal/testkit"
	mpi "github.com/gompi/gompi/runtime"
	"github.com/gompi/gompi/runtime/cow"
)

// TestCheckpointIntoFullCache: a checkpoint whose files do not fit in the
// node-local cache is written straight to the prefix and committed there,
// on the copy path and on the snapshot path, saying so; the job restarts
// from it. Checkpoint failed with ENOSPC (so a job whose state outgrew its
// cache could take none), and on the snapshot path it returned as taken
// and the forked writer then failed for want of space, so the epoch was
// lost (its storage is now reserved before the fork).
func TestCheckpointIntoFullCache(t *testing.T) {
	const n = 1 << 19 // 4 MiB per rank
	for _, tc := range []struct {
		name string
		cow  bool
	}{{"copy", false}, {"snapshot", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(cow.EnvDisable, "")
			cfg := Config{Prefix: t.TempDir(), Cache: filepath.Join(testkit.SmallTmpfs(t, 4<<20), "cache")}
			var log testkit.Buffer
			logOut = &log
			defer func() { logOut = os.Stderr }()
			noErrs(t, runRanks(t, 2, func(comm *mpi.Comm) error {
				c, err := New(context.Background(), comm, cfg)
				if err != nil {
					return err
				}
				var grid []float64
				if tc.cow {
					if err := MakeSlice(c, "grid", &grid, n); err != nil {
						return err
					}
					defer cow.Free(grid)
				} else {
					grid = make([]float64, n)
					RegisterSlice(c, "grid", &grid)
				}
				step := 0
				c.Register("step", &step)
				for k := 1; k <= 2; k++ {
					copy(grid, gridAt(comm.Rank(), k, n))
					step = k
					if err := c.Checkpoint(); err != nil {
						return err
					}
				}
				return c.Close()
			}))
			if !strings.Contains(log.String(), "written straight to "+cfg.Prefix) {
				t.Fatalf("nothing said of the full cache; log:\n%s", log.String())
			}
			m, err := layout.Newest(cfg.Prefix)
			if err != nil || m.Epoch != 2 {
				t.Fatalf("newest epoch in the prefix: %v %v, want 2", m, err)
			}
			if bad, err := layout.Verify(cfg.Prefix, 2); err != nil || bad != nil {
				t.Fatalf("epoch 2: %v %v", bad, err)
			}
			noErrs(t, runRanks(t, 2, func(comm *mpi.Comm) error {
				c, err := New(context.Background(), comm, cfg)
				if err != nil {
					return err
				}
				grid := make([]float64, n)
				RegisterSlice(c, "grid", &grid)
				step := 0
				c.Register("step", &step)
				e, err := c.Restore()
				if err != nil || e != 2 || step != 2 || !slices.Equal(grid, gridAt(comm.Rank(), 2, n)) {
					c.Close()
					return fmt.Errorf("restored epoch %d step %d (%v), want epoch 2, step 2's grid", e, step, err)
				}
				return c.Close()
			}))
		})
	}
}
