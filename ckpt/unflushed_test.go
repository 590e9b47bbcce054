package ckpt

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gompi/gompi/ckpt/layout"
	mpi "github.com/gompi/gompi/runtime"
)

// TestCloseAfterOneRankFlushFailed: when one rank's flush failed (here
// rank 1's temporary file in the prefix is a directory), that rank's
// Close returns the flush's error once it has done Close's collective
// part with the others: it returned at once, skipping it, and the other
// ranks' Close failed with "peer finalized" (or waited, had rank 1 gone
// on to anything but Finalize).
func TestCloseAfterOneRankFlushFailed(t *testing.T) {
	cfg := Config{Prefix: t.TempDir(), Cache: t.TempDir(), Keep: 2}
	logOut = &strings.Builder{}
	defer func() { logOut = os.Stderr }()
	closeErrs := make([]error, 2)
	done := make(chan []error, 1)
	go func() {
		done <- runRanks(t, 2, func(comm *mpi.Comm) error {
			c, err := New(context.Background(), comm, cfg)
			if err != nil {
				return err
			}
			if comm.Rank() == 1 { // after New, which numbers epochs past any directory
				if err := os.MkdirAll(layout.RankPath(cfg.Prefix, 1, 1)+".tmp", 0o755); err != nil {
					return err
				}
			}
			s := newState(comm.Rank(), 10)
			s.register(c)
			if err := c.Checkpoint(); err != nil {
				return err
			}
			closeErrs[comm.Rank()] = c.Close()
			return nil
		})
	}()
	select {
	case errs := <-done:
		noErrs(t, errs)
	case <-time.After(20 * time.Second):
		t.Fatal("Close did not return on every rank within 20s after rank 1's flush failed")
	}
	t.Logf("Close: %v", closeErrs)
	if closeErrs[1] == nil || !strings.Contains(closeErrs[1].Error(), "rank 1: flush epoch 1") {
		t.Fatalf("rank 1's Close: %v, want its flush's error", closeErrs[1])
	}
	if closeErrs[0] != nil {
		t.Fatalf("rank 0's Close: %v, want nil (its flush succeeded; rank 1 must not leave its Close early)", closeErrs[0])
	}
}
