package layout

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// OwnerFile names, in a node-local cache directory, the prefix whose
// checkpoints the cache holds.
const OwnerFile = "PREFIX"

// ErrForeignCache: a cache directory holds another prefix's checkpoints.
var ErrForeignCache = errors.New("checkpoint cache belongs to another prefix")

// ClaimCache records in cache that it holds prefix's checkpoints, or
// checks that it does. A cache is found by restarts as a source of epochs
// (those not yet flushed), so a job whose prefix differs must not use a
// cache another job left: it would restart from that job's state. An empty
// cache without the record is claimed; one without the record that already
// holds epochs (left by a build from before the record, or with the record
// removed) is refused, since nothing tells whose they are.
func ClaimCache(cache, prefix string) error {
	abs, err := filepath.Abs(prefix)
	if err != nil {
		return err
	}
	p := filepath.Join(cache, OwnerFile)
	b, err := os.ReadFile(p)
	if err == nil {
		if owner := strings.TrimSpace(string(b)); owner != abs {
			return fmt.Errorf("%w: %s holds the checkpoints of %s, not of %s (use another cache directory, or remove it if that job is done and flushed)", ErrForeignCache, cache, owner, abs)
		}
		return nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for _, dir := range []string{cache, PartnerDir(cache)} {
		eps, err := List(dir)
		if err != nil {
			return err
		}
		if len(eps) > 0 {
			return fmt.Errorf("%w: %s holds epochs (%s) but no %s record of whose they are (if they are %s's, write that path into %s; else use another cache directory)",
				ErrForeignCache, cache, eps[0].Dir, OwnerFile, abs, p)
		}
	}
	// Ranks of one node may claim at once: each renames its own
	// temporary file, all with the same content.
	tmp, err := os.CreateTemp(cache, OwnerFile+".tmp*")
	if err != nil {
		return err
	}
	_, err = tmp.WriteString(abs + "\n")
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), p)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}
