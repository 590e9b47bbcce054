package ckpt

import (
	"fmt"
	"os"

	"github.com/gompi/gompi/ckpt/layout"
	mpi "github.com/gompi/gompi/runtime"
)

// pruneCache keeps the newest Keep committed epochs of a cache (or its
// partner directory), and never one newer than the newest epoch committed
// in the prefix (its only copy). With recycle, the removed epochs' files
// become their ranks' spares, and spares of ranks no longer on this node
// are removed.
func (c *Ckpt) pruneCache(dir string, recycle bool) {
	eps, err := layout.List(dir)
	if err != nil {
		return
	}
	if recycle {
		here := map[int]bool{}
		for _, r := range c.onNode {
			here[r] = true
		}
		if err := layout.CleanSpares(layout.SpareDir(dir), func(r int) bool { return here[r] }); err != nil {
			fmt.Fprintf(os.Stderr, "ckpt: rank %d: %v\n", c.comm.Rank(), err)
		}
	}
	kept := 0
	for i := len(eps) - 1; i >= 0; i-- {
		e := eps[i]
		if e.Committed() {
			if c.unreadable[e.Epoch] { // as layout.PruneUnreadable
				if kept < c.cfg.Keep {
					continue
				}
			} else if kept++; kept <= c.cfg.Keep {
				continue
			}
		}
		if e.Epoch > c.prefixCommit && !c.neverFlushed(e.Epoch) {
			continue // not yet in the prefix: the only copy
		}
		if recycle {
			layout.Retire(dir, e.Epoch, layout.SpareDir(dir))
		} else {
			layout.Remove(dir, e.Epoch)
		}
	}
}

// pruneAtClose: the last commits made older cache epochs removable, and no
// checkpoint follows to prune them: learn rank 0's newest commit and keep
// K, as a checkpoint would. Collective (Close).
func (c *Ckpt) pruneAtClose() error {
	if err := c.gatherFlushReports(); err != nil {
		return err
	}
	v := []int64{0}
	if c.comm.Rank() == 0 {
		v[0] = c.durable.Load() // the committer has ended
	}
	if err := mpi.Allreduce(c.comm, v, v, mpi.Max); err != nil {
		return err
	}
	c.prefixCommit = int(v[0])
	if c.leader {
		c.pruneCache(c.cfg.Cache, false)
		if c.partnerTo >= 0 {
			c.pruneCache(layout.PartnerDir(c.cfg.Cache), false)
		}
	}
	return nil
}
