package ckpt

import (
	"errors"
	"fmt"
	"os"

	"github.com/gompi/gompi/ckpt/layout"
	mpi "github.com/gompi/gompi/runtime"
	"github.com/gompi/gompi/runtime/cow"
)

// MakeSlice sets *s to n zeroed elements allocated with cow.Make, outside
// the Go heap, and registers it like RegisterSlice: with a cache level,
// Checkpoint saves it by a copy-on-write snapshot (docs/ckpt.md,
// "Snapshots"). Free it with cow.Free(*s) when done (after Close).
func MakeSlice[T mpi.Number](c *Ckpt, name string, s *[]T, n int) error {
	v, err := cow.Make[T](n)
	if err != nil {
		return err
	}
	*s = v
	RegisterSlice(c, name, s)
	return nil
}

// Snapshots is how many of this rank's checkpoints saved their cow.Make
// slices by a copy-on-write snapshot (the rest copied them inside
// Checkpoint).
func (c *Ckpt) Snapshots() int { return c.snapshots }

// snapshotting says whether this checkpoint may snapshot: with a cache
// level (its flush is the background phase that waits for the snapshot),
// without partner copies (which send the whole file inside Checkpoint).
func (c *Ckpt) snapshotting() bool {
	return c.cfg.Cache != "" && c.partnerTo < 0 && !c.cfg.NoSnapshot
}

// writeFile writes this rank's file of epoch e in dir (the cache, or the
// prefix). It returns the open writer when a snapshot is still writing
// the file (res.Deferred): the flush closes it once the snapshot is done.
func (c *Ckpt) writeFile(dir string, e int) (res result, open *layout.Writer, err error) {
	rank := c.comm.Rank()
	var w *layout.Writer
	cached := c.cfg.Cache != "" && dir == c.cfg.Cache
	if cached {
		// Overwrite this rank's spare file, if it has one: its pages are
		// allocated already (docs/ckpt.md, "Spare files").
		w, err = layout.Reuse(dir, e, rank, layout.SparePath(c.cfg.Cache, rank))
	} else {
		w, err = layout.Create(dir, e, rank)
	}
	if err != nil {
		return res, nil, err
	}
	if c.snapNoSpace.Load() {
		w.ReserveAlways()
	}
	if cached && c.partnerTo < 0 {
		// The flush computes the checksum, off the application's time
		// (docs/ckpt.md, "Levels"). A partner copy needs it now.
		w.NoChecksum()
	}
	// One snapshot at a time: a new one waits for the previous (whose
	// error, if any, its flush reports). Usually long done.
	if c.snap != nil {
		c.snap.Wait()
		c.snap = nil
	}
	var regions []cow.Region
	ix := index{Epoch: e, Rank: rank, Ranks: c.comm.Size()}
	for _, s := range c.secs {
		var mem []byte
		if s.mem != nil && cached && c.snapshotting() {
			mem = s.mem()
		}
		if mem == nil {
			cw := &countWriter{w: w}
			if _, err := s.save(cw); err != nil {
				w.Abort()
				return res, nil, fmt.Errorf("section %q: %w", s.name, err)
			}
			ix.Sections = append(ix.Sections, sectionEntry{Name: s.name, Kind: s.kind, Size: cw.n})
			continue
		}
		off, err := w.Skip(int64(len(mem)))
		if err != nil {
			w.Abort()
			return res, nil, err
		}
		regions = append(regions, cow.Region{Mem: mem, Off: off})
		ix.Sections = append(ix.Sections, sectionEntry{Name: s.name, Kind: s.kind, Size: int64(len(mem))})
	}
	if err := writeIndex(w, ix); err != nil {
		w.Abort()
		return res, nil, err
	}
	if len(regions) > 0 {
		snap, err := cow.Snapshot(w.File(), regions)
		if err == nil {
			c.snap = snap
			c.snapshots++
			return result{File: w.Entry(), Deferred: true}, w, nil
		}
		if !errors.Is(err, cow.ErrUnavailable) {
			w.Abort()
			return res, nil, err
		}
		// No snapshot here: the copy path, into the ranges left for it.
		for _, r := range regions {
			if err := w.WriteAt(r.Mem, r.Off); err != nil {
				w.Abort()
				return res, nil, err
			}
		}
	}
	res.File, err = w.Close()
	return res, nil, err
}

// abandon drops the file a snapshot is writing for an epoch that will not
// be committed, once the snapshot is done.
func (c *Ckpt) abandon(w *layout.Writer) {
	if w == nil {
		return
	}
	snap := c.snap
	go func() {
		if err := snap.Wait(); err != nil {
			fmt.Fprintf(os.Stderr, "ckpt: rank %d: %v\n", c.comm.Rank(), err)
		}
		w.Abort()
	}()
}
