package layout

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// PrefixIDFile names, in a prefix, its identity: a random id made by the
// first job that uses the prefix. Removing a prefix's epochs (gompiexec
// ckpt rm -all, or rm -rf) removes it, so the next job makes a new one,
// and node caches holding the old id's epochs know them for copies of
// what the user removed (AdoptPrefixID).
const PrefixIDFile = "ID"

// CacheIDFile names, in a node-local cache, the id of the prefix whose
// epochs it holds.
const CacheIDFile = "PREFIX.ID"

// PrefixID is prefix's id, made if it has none. Jobs racing to make it
// all get the one that won (a complete file linked into place: no reader
// sees it empty).
func PrefixID(prefix string) (string, error) {
	path := filepath.Join(prefix, PrefixIDFile)
	for try := 0; ; try++ {
		b, err := os.ReadFile(path)
		if id := strings.TrimSpace(string(b)); err == nil && id != "" {
			return id, nil
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("prefix id: %w", err)
		}
		if try == 3 {
			return "", fmt.Errorf("prefix id: %s is empty (remove it)", path)
		}
		var r [8]byte
		if _, err := rand.Read(r[:]); err != nil {
			return "", err
		}
		tmp := path + ".new." + strconv.Itoa(os.Getpid())
		err = os.WriteFile(tmp, []byte(hex.EncodeToString(r[:])+"\n"), 0o644)
		if err == nil {
			if f, ferr := os.Open(tmp); ferr == nil {
				err = f.Sync()
				f.Close()
			}
		}
		if err == nil {
			err = os.Link(tmp, path)
			if errors.Is(err, os.ErrExist) {
				err = nil // another job's won: read it
			} else if err != nil {
				// No hard links here (some FUSE file systems): a rename
				// can replace a concurrent one, once, at a first start.
				err = os.Rename(tmp, path)
			}
		}
		os.Remove(tmp)
		if err == nil {
			err = syncDir(prefix)
		}
		if err != nil {
			return "", fmt.Errorf("prefix id: %w", err)
		}
	}
}

// AdoptPrefixID makes cache the cache of the prefix whose id is id (the
// caller holds the cache's lock). When the cache holds epochs of another
// id, the prefix's epochs were removed since (or the prefix replaced):
// those copies are removed, so that no restart takes what the user
// removed, and their numbers returned. A cache without a recorded id (a
// new one, or one of a build from before the id) takes id as it is.
func AdoptPrefixID(cache, id string) (removed []int, err error) {
	path := filepath.Join(cache, CacheIDFile)
	b, err := os.ReadFile(path)
	old := strings.TrimSpace(string(b))
	switch {
	case err == nil && old == id:
		return nil, nil
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return nil, err
	case err == nil && old != "": // empty: a write cut short by a crash, naming no one

		for _, dir := range []string{cache, PartnerDir(cache)} {
			eps, err := List(dir)
			if err != nil {
				return removed, err
			}
			for _, e := range eps {
				if err := Remove(dir, e.Epoch); err != nil {
					return removed, err
				}
				if e.Committed() {
					removed = append(removed, e.Epoch)
				}
			}
		}
	}
	// Synced before the rename: an empty record after a crash would
	// not say whose the epochs are.
	tmp := path + ".new"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err == nil {
		_, err = f.WriteString(id + "\n")
		if serr := f.Sync(); err == nil {
			err = serr
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return removed, err
	}
	return removed, syncDir(cache)
}
