package ckpt

import (
	"fmt"
	"os"
	"slices"

	"github.com/gompi/gompi/ckpt/layout"
	mpi "github.com/gompi/gompi/runtime"
)

// commitFlushed (collective) commits in the prefix (rank 0), oldest
// first, every epoch up to flushed (the newest every rank has flushed)
// that every rank has flushed, with the checksums the flushes computed,
// and gives them to the cache manifests (the first rank of each node).
// Only the newest was committed: an epoch whose flush ended together
// with the next one's (before a collective call of the library) was left
// uncommitted in the prefix and then removed as a leftover, so the prefix
// kept epochs 8 and 10 of -ckpoint-keep 2, not 9 and 10.
func (c *Ckpt) commitFlushed(flushed int) error {
	var mine flushedSet
	c.flushMu.Lock()
	for e, f := range c.flushedFiles {
		if e <= flushed {
			mine.Files = append(mine.Files, result{Epoch: e, File: f})
		}
	}
	if _, ok := c.flushedFiles[flushed]; !ok {
		mine.Err = fmt.Sprintf("rank %d has no flushed file of epoch %d (its flush failed: %v)", c.comm.Rank(), flushed, c.FlushError())
	}
	c.flushMu.Unlock()
	sets, err := mpi.AllgatherValue(c.comm, mine)
	if err != nil {
		return err
	}
	byEpoch := map[int][]result{}
	for r, set := range sets {
		if set.Err != "" {
			if c.comm.Rank() == 0 {
				fmt.Fprintf(os.Stderr, "ckpt: epoch %d not committed in %s: %s\n", flushed, c.cfg.Prefix, set.Err)
			}
			return nil
		}
		for _, x := range set.Files {
			if byEpoch[x.Epoch] == nil {
				byEpoch[x.Epoch] = make([]result, len(sets))
			}
			byEpoch[x.Epoch][r] = x
		}
	}
	var epochs []int
	for e, all := range byEpoch {
		if !slices.ContainsFunc(all, func(x result) bool { return x.Epoch != e }) {
			epochs = append(epochs, e) // every rank flushed it
		}
	}
	slices.Sort(epochs)
	for _, e := range epochs {
		c.commitEpoch(e, byEpoch[e])
	}
	return nil
}

// flushedSet is what a rank tells commitFlushed: its flushed files not
// yet committed, and why it has none of the newest epoch, if so.
type flushedSet struct {
	Files []result
	Err   string
}

// commitEpoch commits flushed epoch e, whose files every rank flushed
// (all), in the prefix (rank 0, through the committer) and in this node's
// cache manifest (its first rank).
func (c *Ckpt) commitEpoch(e int, all []result) {
	if c.leader {
		c.fillCacheChecksums(e, all)
	}
	if c.comm.Rank() != 0 {
		return
	}
	m := c.pending[e]
	if m == nil || e <= c.queuedCommit {
		return
	}
	for i, r := range all {
		if r.File.Size != m.Files[i].Size {
			fmt.Fprintf(os.Stderr, "ckpt: epoch %d not committed in %s: rank %d flushed %d bytes, wrote %d\n",
				e, c.cfg.Prefix, i, r.File.Size, m.Files[i].Size)
			return
		}
		m.Files[i].CRC32C = r.File.CRC32C
	}
	// The commit (three fsyncs) and the removal of the epochs it makes
	// old (on a disk mounted with discard, 0.3-0.7 s per GiB here) go to
	// the committer goroutine: done here, they stalled rank 0 inside
	// NeedCheckpoint, and every rank at its next exchange with it. The
	// epoch counts as committed (prefixCommit, by which the nodes retire
	// cache epochs) only once the committer has done it; the manifest
	// stays pending until then, for a retry if the commit fails.
	c.queuedCommit = e
	c.commits.Add(1)
	c.commitQ <- m
}

// testCommitGate, when set (by tests), runs before each commit in the
// prefix; an error fails that commit.
var testCommitGate func(epoch int) error

// committer (rank 0, with a cache) commits flushed epochs in the prefix
// and prunes it, in order.
func (c *Ckpt) committer() {
	defer c.commitWG.Done()
	for m := range c.commitQ {
		var err error
		if testCommitGate != nil {
			err = testCommitGate(m.Epoch)
		}
		if err == nil {
			err = layout.Commit(c.cfg.Prefix, m)
		}
		if err != nil {
			err = fmt.Errorf("ckpt: commit flushed epoch %d in %s: %w", m.Epoch, c.cfg.Prefix, err)
			fmt.Fprintf(logOut, "%v (tried again at the next Checkpoint, Flush or Close; until then the epoch is only in the node caches)\n", err)
			c.commitErr.Store(&err)
			c.commitFailed.Store(true)
		} else {
			c.durable.Store(int64(m.Epoch))
			c.commitErr.Store(nil)
			if err := layout.PruneUnreadable(c.cfg.Prefix, c.cfg.Keep, c.unreadable); err != nil {
				fmt.Fprintf(os.Stderr, "ckpt: prune %s: %v\n", c.cfg.Prefix, err)
			}
		}
		c.commits.Done()
	}
}

// fillCacheChecksums rewrites this node's cache manifest of epoch e with
// the checksums its flush computed, if it was committed without them, so
// that a restart from the cache checks every byte again.
func (c *Ckpt) fillCacheChecksums(e int, all []result) {
	m, err := layout.ReadManifest(c.cfg.Cache, e)
	if d := c.deferred[e]; err != nil && d != nil {
		// Written by snapshots: committed in the cache only now that
		// every rank's file is written and synced.
		m, err = d, nil
	}
	for d := range c.deferred {
		if d <= e {
			delete(c.deferred, d)
		}
	}
	if err != nil || m.Ranks != len(all) || m.Checksummed() {
		return
	}
	for i, r := range all {
		if m.Files[i].Size != r.File.Size {
			return
		}
		m.Files[i].CRC32C = r.File.CRC32C
	}
	if err := layout.Commit(c.cfg.Cache, m); err != nil {
		fmt.Fprintf(os.Stderr, "ckpt: rank %d: %v\n", c.comm.Rank(), err)
	}
}
