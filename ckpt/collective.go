package ckpt

import (
	"errors"
	"fmt"

	mpi "github.com/gompi/gompi/runtime"
)

// ErrNotCollective: the ranks called different collective operations of
// package ckpt at the same point (Checkpoint on some ranks only, say).
// Every rank's call returns it, naming the calls, instead of waiting in
// mismatched exchanges for ever.
var ErrNotCollective = errors.New("ckpt: ranks called different collective operations")

// collective names the collective operation a rank is in, for sync's
// check that every rank is in the same one.
type collective int64

const (
	opNeed collective = iota + 1
	opCheckpoint
	opFlush
	opClose
	opRestore
	opHaveRestart
)

func (op collective) String() string {
	switch op {
	case opNeed:
		return "NeedCheckpoint"
	case opCheckpoint:
		return "Checkpoint"
	case opFlush:
		return "Flush"
	case opClose:
		return "Close"
	case opRestore:
		return "Restore"
	case opHaveRestart:
		return "HaveRestart"
	}
	return fmt.Sprintf("operation %d", int64(op))
}

// mismatch is the error of a rank in op when the ranks' operations ranged
// from lo to hi.
func (c *Ckpt) mismatch(op, hi, lo collective) error {
	others := hi.String()
	switch {
	case op == hi:
		others = lo.String()
	case op != lo:
		others = lo.String() + " and " + hi.String()
	}
	return fmt.Errorf("%w: rank %d called %s while other ranks called %s (every rank must call them in the same order)",
		ErrNotCollective, c.comm.Rank(), op, others)
}

// sync is the one reduction NeedCheckpoint costs: it agrees on whether to
// checkpoint and on which flushed epoch to commit in the prefix. With
// retry (Checkpoint, Flush, Close; not NeedCheckpoint, which a job calls at
// every step) the epochs whose commit in the prefix failed are committed
// again.
func (c *Ckpt) sync(op collective, want, retry bool) (bool, error) {
	// v[2]: the newest epoch whose commit in the prefix is done (what
	// pruning and the flushed entries go by); v[4]: the newest handed to
	// rank 0's committer (newer flushed ones are to be committed).
	// v[5], v[6]: the operation each rank is in, as its maximum and its
	// minimum (negated), so that every rank learns if they differ.
	v := []int64{0, -c.flushed.Load(), -1, c.reqSeq.Load(), -1, int64(op), -int64(op)}
	if want {
		v[0] = 1
	}
	if c.cfg.Cache == "" {
		v[1] = 0
	}
	if c.comm.Rank() == 0 {
		if c.cfg.Cache != "" {
			// Only a commit the committer finished counts: counting one
			// it was still doing (or had failed) let the nodes retire
			// the cache's copies of an epoch not in the prefix.
			c.prefixCommit = int(c.durable.Load())
			if retry && c.commitFailed.Swap(false) {
				c.queuedCommit = c.prefixCommit
			}
			for p := range c.pending {
				if p <= c.prefixCommit {
					delete(c.pending, p)
				}
			}
		} else {
			c.queuedCommit = c.prefixCommit
		}
		v[2], v[4] = int64(c.prefixCommit), int64(c.queuedCommit)
	}
	if err := mpi.Allreduce(c.comm, v, v, mpi.Max); err != nil {
		return false, err
	}
	if hi, lo := collective(v[5]), collective(-v[6]); hi != lo {
		return false, c.mismatch(op, hi, lo)
	}
	if v[3] > c.handled.Load() && op != opRestore && op != opHaveRestart { // a request is for a checkpoint
		c.handled.Store(v[3])
		v[0] = 1
	}
	flushed := int(-v[1])
	// Entries of epochs rank 0 has committed are done with (kept until
	// then: a commit that failed is tried again).
	c.flushMu.Lock()
	for e := range c.flushedFiles {
		if e <= int(v[2]) {
			delete(c.flushedFiles, e)
		}
	}
	c.flushMu.Unlock()
	if c.cfg.Cache != "" && flushed > int(v[4]) {
		// Every rank knows from the reduction that epoch flushed is
		// ready: gather its files' entries, whose checksums the flushes
		// computed.
		if err := c.commitFlushed(flushed); err != nil {
			return false, err
		}
	}
	if c.comm.Rank() != 0 {
		c.prefixCommit = int(v[2])
	}
	return v[0] == 1, nil
}
