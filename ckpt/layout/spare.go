package layout

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// SpareName is the directory inside a node-local cache that holds spare
// rank files: the storage of retired epochs (and of files allocated ahead
// of time), overwritten by the next checkpoint instead of allocating and
// zeroing new pages while the application waits (docs/ckpt.md, "Spare
// files"). It holds at most one file per rank, named like the rank's file.
const SpareName = "spare"

// SpareDir is the spare-file directory of cache directory cache.
func SpareDir(cache string) string { return filepath.Join(cache, SpareName) }

// SparePath is rank r's spare file in cache directory cache.
func SparePath(cache string, r int) string { return filepath.Join(SpareDir(cache), RankName(r)) }

// Reuse starts rank r's file of epoch e under prefix as Create does, but
// in the file at spare when there is one: it is renamed to the temporary
// name before anything is written to it, then overwritten in place and
// cut to the size written on Close. So a crash while overwriting leaves a
// temporary file in an uncommitted epoch, never a committed file with
// another epoch's bytes in it.
func Reuse(prefix string, e, r int, spare string) (*Writer, error) {
	dir := EpochDir(prefix, e)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, RankName(r))
	if err := os.Rename(spare, path+tmpSuffix); err == nil {
		f, err := os.OpenFile(path+tmpSuffix, os.O_WRONLY, 0)
		if err == nil {
			return &Writer{f: f, path: path, rank: r, reuse: true}, nil
		}
		os.Remove(path + tmpSuffix)
	}
	return Create(prefix, e, r)
}

// Retire removes epoch e like Remove (the manifest first, synced, so the
// epoch is no longer committed before any file is touched), but keeps the
// storage of its rank files for reuse: each moves to spareDir under its
// own name, unless that rank has a spare already.
func Retire(prefix string, e int, spareDir string) error {
	dir := EpochDir(prefix, e)
	if err := os.Remove(filepath.Join(dir, ManifestName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := syncDir(dir); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	ranks, err := Ranks(prefix, e)
	if err == nil && len(ranks) > 0 {
		err = os.MkdirAll(spareDir, 0o755)
	}
	if err != nil {
		return err
	}
	for _, r := range ranks {
		// A link never replaces a spare that exists (one allocated ahead
		// of time by the rank's flusher meanwhile, say).
		if err := os.Link(RankPath(prefix, e, r), filepath.Join(spareDir, RankName(r))); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	return os.RemoveAll(dir)
}

// Preallocate makes a spare file at path of size bytes with its storage
// allocated (fallocate), unless one exists. It is built under a temporary
// name of its own (".rank.NNNNN.tmp": only that rank preallocates it, and
// a crash's leftover is reused) and linked into place, so a concurrent
// Retire's spare is kept and this one dropped. Where the file system
// cannot preallocate, it does nothing.
func Preallocate(path string, size int64) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.OpenFile(filepath.Join(dir, "."+filepath.Base(path)+tmpSuffix), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	err = fallocate(tmp, size)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, errNoFallocate) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("preallocate %s: %w", path, err)
	}
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return nil
}

// CleanSpares removes the spare files in spareDir, and the temporary files
// of their preallocation, of ranks keep says no to (ranks that no longer
// run on this node), and anything else found there.
func CleanSpares(spareDir string, keep func(r int) bool) error {
	ents, err := os.ReadDir(spareDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, de := range ents {
		name := strings.TrimSuffix(strings.TrimPrefix(de.Name(), "."), tmpSuffix)
		if s, ok := strings.CutPrefix(name, rankPrefix); ok && strings.Trim(s, "0123456789") == "" && s != "" {
			var r int
			if _, err := fmt.Sscanf(s, "%d", &r); err == nil && RankName(r) == name && keep(r) {
				continue
			}
		}
		if err := os.Remove(filepath.Join(spareDir, de.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}
