package ckpt

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/gompi/gompi/ckpt/layout"
	mpi "github.com/gompi/gompi/runtime"
)

// noSpace: err says a directory is full.
func noSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// cacheFull: the ranks' cache writes of an epoch (all) failed only for
// want of room in some node's cache, and the epoch can go straight to the
// prefix instead (not with partner copies, which live in the caches).
func (c *Ckpt) cacheFull(all []result) bool {
	if c.cfg.Cache == "" || c.cfg.Partner {
		return false
	}
	full := false
	for _, r := range all {
		if r.Err != "" && !r.NoSpace {
			return false
		}
		full = full || r.NoSpace
	}
	return full
}

// checkpointDirect (collective) writes epoch e straight to the prefix and
// commits it there (through rank 0's committer, after the epochs it is
// committing), as without a cache: some node's cache had no room for it
// (all: the failed cache writes). Checkpoint failed with ENOSPC instead,
// and a job whose state outgrew its node-local cache (a /dev/shm smaller
// than the ranks' files) could take no checkpoint at all.
func (c *Ckpt) checkpointDirect(e int, all []result) error {
	rank := c.comm.Rank()
	if rank == 0 {
		for _, r := range all {
			if r.NoSpace {
				fmt.Fprintf(logOut, "ckpt: epoch %d written straight to %s: no room in the cache (%s)\n", e, c.cfg.Prefix, r.Err)
				break
			}
		}
	}
	// The earlier epochs' flushes end first: committing e prunes the
	// prefix of uncommitted epochs older than e, under a flush's feet.
	c.queued.Wait()
	res, _, err := c.writeFile(c.cfg.Prefix, e)
	if err != nil {
		res.Err = fmt.Sprintf("rank %d: %v", rank, err)
	}
	all, err = mpi.AllgatherValue(c.comm, res)
	if err != nil {
		return err
	}
	m := &layout.Manifest{Epoch: e, Ranks: c.comm.Size(), Step: c.step, Time: time.Now().UTC()}
	for _, r := range all {
		if r.Err != "" {
			return fmt.Errorf("ckpt: epoch %d not committed (written straight to the prefix, the cache being full): %s", e, r.Err)
		}
		m.Files = append(m.Files, r.File)
	}
	var commitErr string
	if rank == 0 {
		c.queuedCommit = e
		c.commits.Add(1)
		c.commitQ <- m
		c.commits.Wait()
		if p := c.commitErr.Load(); c.durable.Load() < int64(e) && p != nil {
			commitErr = (*p).Error()
		}
	}
	if err := mpi.BcastValue(c.comm, &commitErr, 0); err != nil {
		return err
	}
	if commitErr != "" {
		return fmt.Errorf("ckpt: epoch %d not committed: %s", e, commitErr)
	}
	c.last = time.Now()
	return nil
}
