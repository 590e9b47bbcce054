package ckpt

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"

	"github.com/gompi/gompi/ckpt/layout"
	mpi "github.com/gompi/gompi/runtime"
)

// Partner copies (docs/ckpt.md, "Partner copies"): with a cache level and
// Config.Partner, every rank sends its cache file to a rank on another
// node, which stores it under its own cache's partner directory, before
// the epoch counts as committed in the caches. A node lost before the
// flush to the prefix completed then loses no epoch: on restart, rebuild
// brings every missing rank file back from whichever rank holds a copy.

// Tags on the library's private communicator.
const (
	tagCopyHdr = 101 + iota
	tagCopyData
	tagRebuildHdr
	tagRebuildData
)

// copyChunk is how much of a file one message carries.
const copyChunk = 4 << 20

// partnerPlan maps every rank to its partner: the nodes are ordered by
// their first rank, and the i-th rank of a node sends to the
// (i mod k)-th of the k ranks of the next node (cyclically). With a
// single node there is no partner (-1 everywhere).
func partnerPlan(nodes []string) []int {
	var order []string
	members := map[string][]int{}
	for r, n := range nodes {
		if members[n] == nil {
			order = append(order, n)
		}
		members[n] = append(members[n], r)
	}
	plan := make([]int, len(nodes))
	for i, n := range order {
		next := members[order[(i+1)%len(order)]]
		for li, r := range members[n] {
			plan[r] = -1
			if len(order) > 1 {
				plan[r] = next[li%len(next)]
			}
		}
	}
	return plan
}

// fileHeader precedes a file sent between ranks.
type fileHeader struct {
	Epoch int
	File  layout.File
	Err   string // the sender has no file to send
}

// sendFile sends path's bytes (described by f) to dst. When serr is set
// or path cannot be opened, it sends only a header saying why, so the
// receiver never waits for bytes that will not come.
func (c *Ckpt) sendFile(dst, tagHdr, tagData, e int, path string, f layout.File, serr error) error {
	var src *os.File
	if serr == nil {
		src, serr = os.Open(path)
	}
	h := fileHeader{Epoch: e, File: f}
	if serr != nil {
		h.Err = fmt.Sprintf("rank %d: %v", c.comm.Rank(), serr)
	}
	if err := c.comm.SendValue(h, dst, tagHdr); err != nil || serr != nil {
		return errors.Join(err, serr)
	}
	defer src.Close()
	buf := make([]byte, min(f.Size, copyChunk))
	var rerr error
	for left := f.Size; left > 0; {
		b := buf[:min(left, int64(len(buf)))]
		if rerr == nil {
			if _, err := io.ReadFull(src, b); err != nil {
				// The receiver still expects f.Size bytes: send zeros,
				// which its checksum refuses.
				rerr = fmt.Errorf("%s: %w", path, err)
				clear(b)
			}
		}
		if err := mpi.Send(c.comm, b, dst, tagData); err != nil {
			return err
		}
		left -= int64(len(b))
	}
	return rerr
}

// recvFile receives a file from src into dir's epoch (as the rank named in
// the header) and checks it arrived intact. It drains every byte the
// sender sends even when writing fails, so the pair stays in step.
func (c *Ckpt) recvFile(src, tagHdr, tagData int, dir string) (fileHeader, error) {
	var h fileHeader
	if _, err := c.comm.RecvValue(&h, src, tagHdr); err != nil {
		return h, err
	}
	if h.Err != "" {
		return h, fmt.Errorf("no copy from rank %d: %s", src, h.Err)
	}
	w, werr := layout.Create(dir, h.Epoch, h.File.Rank)
	buf := make([]byte, min(h.File.Size, copyChunk))
	for left := h.File.Size; left > 0; {
		b := buf[:min(left, int64(len(buf)))]
		if _, err := mpi.Recv(c.comm, b, src, tagData); err != nil {
			if w != nil {
				w.Abort()
			}
			return h, err
		}
		if werr == nil {
			_, werr = w.Write(b)
		}
		left -= int64(len(b))
	}
	if werr != nil {
		if w != nil {
			w.Abort()
		}
		return h, werr
	}
	got, err := w.Close()
	if err != nil {
		return h, err
	}
	if got.Size != h.File.Size || (h.File.CRC32C != "" && got.CRC32C != h.File.CRC32C) {
		os.Remove(layout.RankPath(dir, h.Epoch, h.File.Rank))
		return h, fmt.Errorf("%s: %w: received %d bytes crc32c %s from rank %d, expected %d bytes %s",
			layout.RankPath(dir, h.Epoch, h.File.Rank), layout.ErrCorrupt, got.Size, got.CRC32C, src, h.File.Size, h.File.CRC32C)
	}
	return h, nil
}

// partnerCopy sends this rank's cache file of epoch e to its partner and
// stores the files of the ranks whose partner it is. werr is this rank's
// own write error (its partner is told, so it does not wait).
func (c *Ckpt) partnerCopy(e int, f layout.File, werr error) error {
	rank := c.comm.Rank()
	var wg sync.WaitGroup
	errs := make([]error, len(c.partnerFrom)+1)
	for i, src := range c.partnerFrom {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.recvFile(src, tagCopyHdr, tagCopyData, layout.PartnerDir(c.cfg.Cache)); err != nil {
				errs[i] = fmt.Errorf("partner copy of rank %d: %w", src, err)
			}
		}()
	}
	if err := c.sendFile(c.partnerTo, tagCopyHdr, tagCopyData, e, layout.RankPath(c.cfg.Cache, e, rank), f, werr); err != nil && werr == nil {
		errs[len(errs)-1] = fmt.Errorf("partner copy to rank %d: %w", c.partnerTo, err)
	}
	wg.Wait()
	return errors.Join(errs...)
}

// holding is what one rank reports to rebuild an epoch.
type holding struct {
	Manifest bool  // it has the epoch's manifest (cache, partner copy or prefix)
	Partner  []int // rank files of the epoch in its cache's partner directory
	Cache    []int // rank files of the epoch in its cache
}

// source is where rank r's file comes from in a rebuild: the rank holding
// it and the directory. Partner copies come first: a file in a cache may
// be the very copy that failed its check.
func source(all []holding, r int, cache string) (holder int, dir string) {
	if slices.Contains(all[r].Partner, r) {
		return r, layout.PartnerDir(cache)
	}
	if h := slices.IndexFunc(all, func(h holding) bool { return slices.Contains(h.Partner, r) }); h >= 0 {
		return h, layout.PartnerDir(cache)
	}
	for h := range all {
		if h != r && slices.Contains(all[h].Cache, r) {
			return h, cache
		}
	}
	return -1, ""
}

// rebuild prepares epoch e for loading (collective, only with a cache):
// every rank agrees on one manifest, and a rank that finds no intact copy
// of its file in its cache or the prefix gets one from a rank holding it
// (in its cache or partner directory) into its own cache. It returns the
// manifest and the directory this rank's verified file is in; err is this
// rank's reason it cannot load e (the caller's reduction makes every rank
// move on), fatal an error of the communicator.
func (c *Ckpt) rebuild(e int) (m *layout.Manifest, dir string, err, fatal error) {
	rank, size := c.comm.Rank(), c.comm.Size()
	m, merr := c.manifest(e)
	var h holding
	h.Manifest = merr == nil
	var lerr error
	h.Cache, lerr = layout.Ranks(c.cfg.Cache, e)
	if lerr == nil {
		h.Partner, lerr = layout.Ranks(layout.PartnerDir(c.cfg.Cache), e)
	}
	if lerr != nil {
		return nil, "", nil, fmt.Errorf("ckpt: rank %d: %w", rank, lerr)
	}
	all, ferr := mpi.AllgatherValue(c.comm, h)
	if ferr != nil {
		return nil, "", nil, ferr
	}
	root := slices.IndexFunc(all, func(h holding) bool { return h.Manifest })
	if root < 0 {
		return nil, "", merr, nil // every rank says the same
	}
	// One manifest for all, so every rank checks against the same sums.
	if ferr := mpi.BcastValue(c.comm, &m, root); ferr != nil {
		return nil, "", nil, ferr
	}
	if m.Ranks != size {
		return m, "", nil, nil // load refuses or redistributes
	}
	dir, err = c.verified(m, rank)
	needs, ferr := mpi.AllgatherValue(c.comm, err != nil)
	if ferr != nil {
		return nil, "", nil, ferr
	}
	// Every rank computes the same transfers: each needing rank gets its
	// file from one holder (source).
	var wg sync.WaitGroup
	var sendErr error
	var mu sync.Mutex
	for r, need := range needs {
		if !need {
			continue
		}
		holder, from := source(all, r, c.cfg.Cache)
		switch {
		case holder < 0:
			// Nobody has a copy: r's err stands.
		case holder == rank && r == rank:
			// Our own copy is in our partner directory (placement
			// changed): a local copy.
			if _, cerr := layout.CopyFile(from, c.cfg.Cache, e, m.Files[r]); cerr != nil {
				err = fmt.Errorf("%w; rebuilding from the partner copy: %v", err, cerr)
			} else {
				dir, err = c.cfg.Cache, nil
			}
		case holder == rank:
			wg.Add(1)
			go func() {
				defer wg.Done()
				path := layout.RankPath(from, e, r)
				if serr := c.sendFile(r, tagRebuildHdr, tagRebuildData, e, path, m.Files[r], nil); serr != nil {
					mu.Lock()
					sendErr = errors.Join(sendErr, serr)
					mu.Unlock()
				}
			}()
		case r == rank:
			got, rerr := c.recvFile(holder, tagRebuildHdr, tagRebuildData, c.cfg.Cache)
			if rerr == nil && got.File != m.Files[r] {
				rerr = fmt.Errorf("rank %d sent %+v, the manifest says %+v", holder, got.File, m.Files[r])
			}
			if rerr != nil {
				err = fmt.Errorf("%w; rebuilding from rank %d's copy: %v", err, holder, rerr)
			} else {
				dir, err = c.cfg.Cache, nil
			}
		}
	}
	wg.Wait()
	if sendErr != nil {
		// Our copy could not be read: the receiver's checksum fails and
		// it says so; here it is only worth a note.
		fmt.Fprintf(os.Stderr, "ckpt: rank %d: rebuild epoch %d: %v\n", rank, e, sendErr)
	}
	if err == nil && dir == c.cfg.Cache {
		// A rebuilt file: give this node's cache the manifest too, so a
		// second failure before the flush still finds the epoch here.
		if _, rerr := layout.ReadManifest(c.cfg.Cache, e); rerr != nil {
			if cerr := layout.Commit(c.cfg.Cache, m); cerr != nil {
				err = fmt.Errorf("ckpt: rank %d: %w", rank, cerr)
			}
		}
	}
	return m, dir, err, nil
}
