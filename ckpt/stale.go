package ckpt

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"

	"github.com/gompi/gompi/ckpt/layout"
	mpi "github.com/gompi/gompi/runtime"
)

// prefixID (collective) is the prefix's id (layout.PrefixID), made by
// rank 0 if the prefix has none; "" when it cannot be read or made (a
// read-only prefix): the caches are then taken as they are.
func (c *Ckpt) prefixID() (string, error) {
	var id string
	if c.comm.Rank() == 0 {
		var err error
		id, err = layout.PrefixID(c.cfg.Prefix)
		if err != nil && !errors.Is(err, syscall.EROFS) && !errors.Is(err, os.ErrPermission) {
			fmt.Fprintf(logOut, "ckpt: rank 0: %s: %v (the node caches' epochs are taken without checking that the prefix still has them)\n", c.cfg.Prefix, err)
		}
	}
	err := mpi.BcastValue(c.comm, &id, 0)
	return id, err
}

// adoptPrefixID (this node's first rank, holding the cache's lock): the
// cache's epochs of a prefix whose epochs were removed since (gompiexec
// ckpt rm -all, rm -rf: the prefix has a new id) are removed, and said
// so. A restart took them: the job resumed from state the user had
// removed, from /dev/shm, with nothing said.
func (c *Ckpt) adoptPrefixID(id string) error {
	removed, err := layout.AdoptPrefixID(c.cfg.Cache, id)
	if len(removed) > 0 {
		slices.Sort(removed)
		removed = slices.Compact(removed)
		s := make([]string, len(removed))
		for i, e := range removed {
			s[i] = fmt.Sprint(e)
		}
		fmt.Fprintf(logOut, "ckpt: rank %d: epochs %s removed from %s: they are copies of epochs removed from %s (its %s changed), not restarted from\n",
			c.comm.Rank(), strings.Join(s, ", "), c.cfg.Cache, c.cfg.Prefix, layout.PrefixIDFile)
	}
	if err != nil {
		return fmt.Errorf("%s: removing epochs of the prefix's former contents: %w", c.cfg.Cache, err)
	}
	return nil
}
