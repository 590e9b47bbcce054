package ckpt

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/gompi/gompi/ckpt/layout"
	mpi "github.com/gompi/gompi/runtime"
)

// EnvOwnerStale overrides DefaultOwnerStale (seconds).
const EnvOwnerStale = "GOMPI_CKPT_OWNER_STALE"

// DefaultOwnerStale is how long a prefix's owner record of a job on
// another host must stay unchanged before another job takes the prefix
// over (docs/ckpt.md, "One job per prefix"). Its owner refreshes it six
// times as often. Generous: a shared file system's attribute and data
// caches (sshfs: 20 s by default) can hide a refresh from another client
// for a while.
const DefaultOwnerStale = layout.DefaultOwnerStale

func ownerStale() (time.Duration, error) {
	v := os.Getenv(EnvOwnerStale)
	if v == "" {
		return DefaultOwnerStale, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f <= 0 {
		return 0, fmt.Errorf("ckpt: %s=%q: want seconds > 0", EnvOwnerStale, v)
	}
	return time.Duration(f * float64(time.Second)), nil
}

// claimPrefix (collective): rank 0 makes this job the prefix's owner
// (layout.ClaimPrefix) and refreshes the record until Close; every rank
// fails if another running job owns it. Two jobs on one prefix (a job
// submitted twice, on other nodes, where the cache locks do not meet)
// numbered, pruned and committed epochs over each other's.
func (c *Ckpt) claimPrefix(ctx context.Context) error {
	type verdict struct {
		Msg   string
		InUse bool
	}
	var v verdict
	var claimErr error
	if c.comm.Rank() == 0 {
		stale, err := ownerStale()
		if err == nil {
			me := layout.ThisProcess(os.Getenv("GOMPI_JOBID"))
			c.owner, err = layout.ClaimPrefix(ctx, c.cfg.Prefix, me, stale, func(s string) { fmt.Fprintln(logOut, s) })
		}
		if errors.Is(err, syscall.EROFS) || errors.Is(err, os.ErrPermission) {
			// A prefix this job cannot write (restoring from a read-only
			// copy): nothing to protect, and Checkpoint fails anyway.
			err = nil
		}
		if err != nil {
			claimErr = err
			v = verdict{Msg: err.Error(), InUse: errors.Is(err, layout.ErrPrefixInUse)}
		} else if c.owner != nil {
			go c.refreshOwner(stale / 6)
		}
	}
	if err := mpi.BcastValue(c.comm, &v, 0); err != nil {
		if c.owner != nil {
			c.owner.Release()
		}
		return err
	}
	switch {
	case v.Msg == "":
		return nil
	case claimErr != nil:
		return fmt.Errorf("ckpt: rank 0: %w", claimErr)
	case v.InUse:
		return fmt.Errorf("ckpt: rank %d: %w (rank 0: %s)", c.comm.Rank(), layout.ErrPrefixInUse, v.Msg)
	default:
		return fmt.Errorf("ckpt: rank %d: owner record of %s: %s", c.comm.Rank(), c.cfg.Prefix, v.Msg)
	}
}

// refreshOwner (rank 0) refreshes the prefix's owner record until Close.
// A record taken over by another job is said at once (Checkpoint then
// fails); a failed refresh (a file system error) is said and tried again.
func (c *Ckpt) refreshOwner(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		if err := c.owner.Refresh(); err != nil {
			fmt.Fprintf(logOut, "ckpt: rank 0: %v\n", err)
			if c.owner.Lost() != nil {
				return
			}
		}
	}
}
