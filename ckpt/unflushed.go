package ckpt

import (
	"slices"

	mpi "github.com/gompi/gompi/runtime"
)

// A flush that failed is not tried again, so its epoch never reaches the
// prefix: its cache copy is pruned like a flushed one (newest Keep kept),
// not kept for ever as the only copy. With a full prefix every flush
// failed and the cache kept every epoch, filling /dev/shm (the node's
// memory) one epoch at a time (TestCacheBoundedWhileFlushesFail).

// flushEnd notes that this rank's flush of epoch e ended (the flusher).
func (c *Ckpt) flushEnd(e int, failed bool) {
	if failed {
		c.flushMu.Lock()
		c.flushFails[e] = true
		c.flushMu.Unlock()
	}
	c.flushEnds.Store(int64(e))
}

// flushReport fills in res this rank's failed flushes not yet reported,
// and the newest epoch whose flush ended.
func (c *Ckpt) flushReport(res *result) {
	res.FlushEnded = int(c.flushEnds.Load())
	c.flushMu.Lock()
	for e := range c.flushFails {
		res.FlushFailed = append(res.FlushFailed, e)
	}
	c.flushMu.Unlock()
	slices.Sort(res.FlushFailed)
}

// mergeFlushReports takes in every rank's report (all), which every rank
// received: the reported failures need not be sent again.
func (c *Ckpt) mergeFlushReports(all []result, mine result) {
	c.allEnded = -1
	for _, r := range all {
		for _, e := range r.FlushFailed {
			c.unflushable[e] = true
		}
		if c.allEnded < 0 || r.FlushEnded < c.allEnded {
			c.allEnded = r.FlushEnded
		}
	}
	c.flushMu.Lock()
	for _, e := range mine.FlushFailed {
		delete(c.flushFails, e)
	}
	c.flushMu.Unlock()
}

// neverFlushed: epoch e's flush failed on some rank and has ended on
// every rank (no flusher reads its cache files any more).
func (c *Ckpt) neverFlushed(e int) bool { return c.unflushable[e] && e <= c.allEnded }

// gatherFlushReports (collective; Close, once the flushes ended) learns
// every rank's failed flushes.
func (c *Ckpt) gatherFlushReports() error {
	var mine result
	c.flushReport(&mine)
	all, err := mpi.AllgatherValue(c.comm, mine)
	if err != nil {
		return err
	}
	c.mergeFlushReports(all, mine)
	return nil
}
