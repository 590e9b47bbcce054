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

// LockFile names, in a node-local cache directory, the file whose flock
// the running job's first rank on the node holds.
const LockFile = "LOCK"

// ErrCacheInUse: another running job uses the cache directory.
var ErrCacheInUse = errors.New("checkpoint cache in use by another running job")

// LockCache takes the cache's lock for a job's lifetime on the node (an
// exclusive flock, released by unlock or by the holder's death, kill -9
// included). Two jobs sharing a cache moved, pruned and renamed each
// other's epoch and spare files: a restart from the cache, which checks
// an unflushed file by its size and index only, could take a mixture
// of the two jobs' states for a whole epoch. The holder's pid and host
// are written into the file for the message of the job refused.
func LockCache(cache string) (unlock func(), err error) {
	p := filepath.Join(cache, LockFile)
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := flock(f); err != nil {
		holder, _ := os.ReadFile(p)
		f.Close()
		if h := strings.TrimSpace(string(holder)); h != "" {
			return nil, fmt.Errorf("%w: %s is locked by %s (%v; or by another node of this job, if the directory is not node-local)", ErrCacheInUse, cache, h, err)
		}
		return nil, fmt.Errorf("%w: %s (%v)", ErrCacheInUse, p, err)
	}
	host, _ := os.Hostname()
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(fmt.Sprintf("pid %d on %s\n", os.Getpid(), host)), 0)
	}
	return func() { f.Close() }, nil
}
