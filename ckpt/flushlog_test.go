package ckpt

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/gompi/gompi/ckpt/layout"
	"github.com/gompi/gompi/internal/testkit"
	mpi "github.com/gompi/gompi/runtime"
)

// TestFlushFailureSaidAtOnce: a flush that fails (here epoch 2's
// directory in the prefix is a file; a full or read-only prefix does the
// same) is reported when it happens, naming the rank and the epoch, not
// only by Flush or Close at the end of the job: until then the job ran
// with no epoch reaching the prefix and said nothing.
func TestFlushFailureSaidAtOnce(t *testing.T) {
	cfg := Config{Prefix: t.TempDir(), Cache: t.TempDir(), Keep: 2}
	if err := os.WriteFile(layout.EpochDir(cfg.Prefix, 2), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var log testkit.Buffer // the flushers of several ranks write to it
	logOut = &log
	defer func() { logOut = os.Stderr }()
	noErrs(t, runRanks(t, 2, func(comm *mpi.Comm) error {
		c, err := New(context.Background(), comm, cfg)
		if err != nil {
			return err
		}
		s := newState(comm.Rank(), 0)
		s.register(c)
		for _, st := range []int{10, 20} {
			s.Step = st
			if err := c.Checkpoint(); err != nil {
				return err
			}
		}
		c.queued.Wait()                        // this rank's flushes are done; the job goes on
		if err := comm.Barrier(); err != nil { // and every rank's
			return err
		}
		if comm.Rank() == 0 {
			for r := 0; r < 2; r++ {
				if want := "rank " + string(rune('0'+r)) + ": flush epoch 2"; !strings.Contains(log.String(), want) {
					t.Errorf("while the job runs: %q does not say %q", log.String(), want)
				}
			}
		}
		c.Close() // its error is the flush's, as before
		return nil
	}))
}
