package mpiio_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"testing"

	mpi "github.com/gompi/gompi/runtime"
	"github.com/gompi/gompi/runtime/mpiio"
)

// FuzzParseHints: no hint value panics the parser; a refused known key is
// a *HintError naming it; accepted hints, read back from what is in force
// (MPI_File_get_info), give the same.
func FuzzParseHints(f *testing.F) {
	for _, s := range [][2]string{{"cb_buffer_size", "16777216"}, {"cb_nodes", "2"}, {"romio_cb_write", "enable"},
		{"striping_unit", "1099511627776"}, {"gompi_cache_flush_delay", "10ms"}, {"gompi_cache_dir", " "},
		{"ind_rd_buffer_size", "-1"}, {"cb_buffer_size", "99999999999999999999"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, k, v string) {
		in, err := mpiio.ParseHints(mpiio.Hints{k: v})
		if err != nil {
			var he *mpiio.HintError
			if !errors.As(err, &he) || he.Key != k {
				t.Fatalf("%s=%q: %v, not a *HintError naming the key", k, v, err)
			}
			return
		}
		again, err := mpiio.ParseHints(in)
		if err != nil || !maps.Equal(again, in) {
			t.Fatalf("%s=%q: in force %v; read back %v, %v", k, v, in, again, err)
		}
	})
}

// A striping_unit far above cb_buffer_size aligns the aggregators' file
// domains, but the buffers stay cb_buffer_size: a 1 TiB value made every
// collective write allocate 2 TiB and die of it.
func TestHugeStripingUnit(t *testing.T) {
	for _, n := range []int{1, 2, 4} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "f")
			const piece = 3000
			runRanks(t, n, func(c *mpi.Comm) error {
				f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeCreate|mpiio.ModeRdwr,
					mpiio.Hints{"striping_unit": "1099511627776", "cb_buffer_size": "8192", "romio_cb_write": "enable", "romio_cb_read": "enable"})
				if err != nil {
					return err
				}
				defer f.Close()
				mine := bytes.Repeat([]byte{byte('a' + c.Rank())}, piece)
				if _, err := f.WriteAtAll(mine, int64(c.Rank()*piece)); err != nil {
					return err
				}
				all := make([]byte, n*piece)
				if _, err := f.ReadAtAll(all, 0); err != nil {
					return err
				}
				for r := 0; r < n; r++ {
					if want := bytes.Repeat([]byte{byte('a' + r)}, piece); !bytes.Equal(all[r*piece:(r+1)*piece], want) {
						return fmt.Errorf("rank %d's piece reads back wrong", r)
					}
				}
				return f.Close()
			})
		})
	}
}
