package mpiio_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	mpi "github.com/gompi/gompi/runtime"
	"github.com/gompi/gompi/runtime/mpiio"
)

// TestCollectiveOverlapAtomic: in atomic mode, a collective write whose
// ranks' views overlap leaves the file as if the ranks' writes happened
// one after another: the overlapped range is all one rank's bytes.
func TestCollectiveOverlapAtomic(t *testing.T) {
	const n = 3 << 20
	for _, tc := range []struct {
		name  string
		hints func(dir string) mpiio.Hints
	}{
		{"two-phase", func(string) mpiio.Hints { return mpiio.Hints{"romio_cb_write": "enable", "cb_nodes": "4"} }},
		{"two-phase small rounds", func(string) mpiio.Hints {
			return mpiio.Hints{"romio_cb_write": "enable", "cb_nodes": "2", "cb_buffer_size": "65536"}
		}},
		{"cached", func(dir string) mpiio.Hints {
			return mpiio.Hints{"gompi_cache_dir": dir, "gompi_cache_flush": "65536"}
		}},
		{"cached snapshot", func(dir string) mpiio.Hints {
			h := snapHints(dir)
			h["gompi_cache_flush"] = "65536"
			return h
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "f")
			for round := 0; round < 3; round++ {
				runRanks(t, 4, func(c *mpi.Comm) error {
					f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeCreate|mpiio.ModeRdwr, tc.hints(filepath.Join(dir, fmt.Sprint("cache", c.Rank()))))
					if err != nil {
						return err
					}
					if err := f.SetAtomicity(true); err != nil {
						return err
					}
					buf := snapPattern(c.Rank()+1+round*4, c.Rank(), n)
					// Every rank writes the same range, shifted by a
					// block per rank: each byte is written by 1 to 4 ranks.
					if _, err := f.WriteAtAll(buf, int64(c.Rank())*4096); err != nil {
						return err
					}
					return f.Close()
				})
				got, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				// The bytes every rank wrote: [3*4096, n): one rank's.
				want := map[int][]byte{}
				for r := 0; r < 4; r++ {
					want[r] = snapPattern(r+1+round*4, r, n)[(3-r)*4096 : n-r*4096]
				}
				common := got[3*4096 : n]
				winner := -1
				for r := 0; r < 4; r++ {
					if string(common) == string(want[r]) {
						winner = r
					}
				}
				if winner < 0 {
					for i := 0; i < len(common); i += 4096 {
						who := -1
						for r := 0; r < 4; r++ {
							if string(common[i:i+4096]) == string(want[r][i:i+4096]) {
								who = r
							}
						}
						if i%(256<<10) == 0 {
							t.Logf("block at %d: rank %d", 3*4096+i, who)
						}
					}
					t.Fatalf("round %d: the range every rank wrote is not one rank's write", round)
				}
			}
		})
	}
}
