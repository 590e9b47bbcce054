package ckpt

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
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

// TestCacheEpochKeptUntilPrefixCommitDurable: a cache epoch is retired
// only once its commit in the prefix is done, and a failed commit is tried
// again. Rank 0 counted an epoch as committed when it handed it to its
// committer goroutine: while that commit was still running (or after it
// failed) the nodes retired the cache's only complete copies, and the
// failed epoch was never committed.
func TestCacheEpochKeptUntilPrefixCommitDurable(t *testing.T) {
	for _, tc := range []struct {
		name string
		gate func(release <-chan struct{}, tries map[int]int) func(int) error
	}{
		{"delayed", func(release <-chan struct{}, _ map[int]int) func(int) error {
			return func(int) error { <-release; return nil }
		}},
		{"failed once", func(release <-chan struct{}, tries map[int]int) func(int) error {
			return func(e int) error {
				if tries[e]++; tries[e] == 1 {
					return fmt.Errorf("injected failure of epoch %d's commit", e)
				}
				return nil
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Prefix: t.TempDir(), Cache: t.TempDir(), Keep: 1}
			release := make(chan struct{})
			testCommitGate = tc.gate(release, map[int]int{})
			defer func() { testCommitGate = nil }()
			var log testkit.Buffer
			logOut = &log
			defer func() { logOut = os.Stderr }()
			var once sync.Once
			noErrs(t, runRanks(t, 2, func(comm *mpi.Comm) error {
				c, err := New(context.Background(), comm, cfg)
				if err != nil {
					return err
				}
				s := newState(comm.Rank(), 0)
				s.register(c)
				for _, st := range []int{10, 20, 30} {
					s.Step = st
					if err := c.Checkpoint(); err != nil {
						return err
					}
					c.queued.Wait() // this rank's flush is done
					if _, err := c.NeedCheckpoint(); err != nil {
						return err
					}
				}
				if err := comm.Barrier(); err != nil {
					return err
				}
				if comm.Rank() == 0 {
					// Every cache epoch newer than the newest committed in
					// the prefix must still be committed in the cache.
					p := 0
					if m, err := layout.Newest(cfg.Prefix); err == nil {
						p = m.Epoch
					}
					eps, err := layout.List(cfg.Cache)
					if err != nil {
						return err
					}
					in := map[int]bool{}
					for _, e := range eps {
						in[e.Epoch] = e.Committed()
					}
					for e := p + 1; e <= 3; e++ {
						if !in[e] {
							return fmt.Errorf("epoch %d retired from the cache, not committed in the prefix (newest there: %d)", e, p)
						}
					}
				}
				if err := comm.Barrier(); err != nil {
					return err
				}
				once.Do(func() { close(release) })
				if err := c.Flush(); err != nil {
					return err
				}
				return c.Close()
			}))
			m, err := layout.Newest(cfg.Prefix)
			if err != nil || m.Epoch != 3 {
				t.Fatalf("newest epoch in the prefix: %v %v, want 3", m, err)
			}
			if bad, err := layout.Verify(cfg.Prefix, 3); err != nil || bad != nil {
				t.Fatalf("epoch 3: %v %v", bad, err)
			}
		})
	}
}
