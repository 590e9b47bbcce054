package ckpt

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gompi/gompi/ckpt/layout"
	mpi "github.com/gompi/gompi/runtime"
)

// ErrNothingRegistered: Restore found an epoch whose files hold state,
// and this rank has registered nothing to load it into (Restore called
// before Register). It returned the epoch with nothing loaded, and the
// program ran again from its initial state.
var ErrNothingRegistered = errors.New("ckpt: nothing registered to restore into")

// OldEpoch gives a redistribution callback the files of an epoch written
// by a different number of ranks.
type OldEpoch struct {
	Epoch int
	Ranks int // the size of the job that wrote it
	c     *Ckpt
	m     *layout.Manifest
	dir   map[int]string // where each old rank's verified file is
}

// Section returns old rank r's saved section name, read whole.
func (o *OldEpoch) Section(r int, name string) ([]byte, error) {
	if r < 0 || r >= o.Ranks {
		return nil, fmt.Errorf("ckpt: epoch %d has ranks 0..%d, not %d", o.Epoch, o.Ranks-1, r)
	}
	dir, ok := o.dir[r]
	if !ok {
		var err error
		dir, err = o.c.verified(o.m, r)
		if err != nil {
			return nil, err
		}
		o.dir[r] = dir
	}
	rf, err := openRankFile(layout.RankPath(dir, o.Epoch, r))
	if err != nil {
		return nil, err
	}
	defer rf.close()
	rd, _, err := rf.section(name)
	if err != nil {
		return nil, fmt.Errorf("ckpt: epoch %d rank %d: %w", o.Epoch, r, err)
	}
	return io.ReadAll(rd)
}

// SetRedistribute registers f to restore an epoch written by a different
// number of ranks: Restore calls it on every rank instead of loading the
// sections, and f reads what this rank needs with OldEpoch.Section.
func (c *Ckpt) SetRedistribute(f func(*OldEpoch) error) { c.redist = f }

// dirs are the places this rank looks for epochs: its cache, the partner
// copies in it, then the prefix.
func (c *Ckpt) dirs() []string {
	if c.cfg.Cache == "" {
		return []string{c.cfg.Prefix}
	}
	return []string{c.cfg.Cache, layout.PartnerDir(c.cfg.Cache), c.cfg.Prefix}
}

// candidates lists, newest first, the epochs some rank sees committed in
// the prefix, its cache or its partner copies.
func (c *Ckpt) candidates() ([]int, error) {
	var mine []int
	var damaged []layout.Epoch
	for _, d := range c.dirs() {
		eps, err := layout.List(d)
		if err != nil {
			return nil, fmt.Errorf("ckpt: rank %d: %w", c.comm.Rank(), err)
		}
		// A damaged manifest is said (once, by one rank per directory):
		// its epoch was passed over without a word.
		say := !c.saidDamage && (d == c.cfg.Prefix && c.comm.Rank() == 0 || d != c.cfg.Prefix && c.leader)
		for _, e := range eps {
			if e.Committed() {
				mine = append(mine, e.Epoch)
			} else if e.Err != nil && say && (c.cfg.Epoch == 0 || e.Epoch == c.cfg.Epoch) {
				damaged = append(damaged, e)
			}
		}
	}
	for _, e := range damaged {
		if !slices.Contains(mine, e.Epoch) { // else taken from another directory
			fmt.Fprintf(logOut, "ckpt: rank %d: epoch %d passed over in %s: %v\n", c.comm.Rank(), e.Epoch, filepath.Dir(e.Dir), e.Err)
		}
	}
	c.saidDamage = true
	all, err := mpi.AllgatherValue(c.comm, mine)
	if err != nil {
		return nil, err
	}
	seen := map[int]bool{}
	var out []int
	for _, l := range all {
		for _, e := range l {
			if !seen[e] && (c.cfg.Epoch == 0 || e == c.cfg.Epoch) {
				seen[e] = true
				out = append(out, e)
			}
		}
	}
	sort.Sort(sort.Reverse(sort.IntSlice(out)))
	return out, nil
}

// HaveRestart reports whether some rank sees a committed epoch to restart
// from (collective). Restore decides which one every rank can read.
func (c *Ckpt) HaveRestart() (bool, error) {
	if err := c.restoreStart(opHaveRestart); err != nil {
		return false, err
	}
	cs, err := c.candidates()
	return len(cs) > 0, err
}

// restoreStart checks a Restore or HaveRestart call (op; collective):
// every rank must be in the same.
func (c *Ckpt) restoreStart(op collective) error {
	if c.regErr != nil {
		return c.regErr
	}
	if c.closed {
		return errors.New("ckpt: Restore after Close")
	}
	_, err := c.sync(op, false, false)
	return err
}

// manifest is epoch e's manifest as this rank sees it: the cache copy
// first, then the partner copies', then the prefix's; but one with every
// checksum before one without (a cache manifest written before the flush
// computed them, when the prefix has the complete one).
func (c *Ckpt) manifest(e int) (*layout.Manifest, error) {
	var errs []string
	var partial *layout.Manifest
	for _, d := range c.dirs() {
		m, err := layout.ReadManifest(d, e)
		if err == nil && m.Checksummed() {
			return m, nil
		}
		if err == nil {
			if partial == nil {
				partial = m
			}
			continue
		}
		errs = append(errs, err.Error())
	}
	if partial != nil {
		return partial, nil
	}
	return nil, fmt.Errorf("epoch %d: %s", e, strings.Join(errs, "; "))
}

// verified returns the directory (cache or prefix) holding an intact copy
// of rank r's file of m.
func (c *Ckpt) verified(m *layout.Manifest, r int) (string, error) {
	var errs []string
	for _, d := range []string{c.cfg.Cache, c.cfg.Prefix} {
		if d == "" {
			continue
		}
		err := layout.VerifyFile(d, m.Epoch, m.Files[r])
		if err == nil {
			return d, nil
		}
		errs = append(errs, err.Error())
	}
	return "", fmt.Errorf("ckpt: epoch %d rank %d: %s", m.Epoch, r, strings.Join(errs, "; "))
}

// load reads this rank's sections of epoch e, described by m; dir, when
// set, is where this rank's file was already verified.
func (c *Ckpt) load(e int, m *layout.Manifest, dir string) (mismatch bool, err error) {
	rank, size := c.comm.Rank(), c.comm.Size()
	if m.Ranks != size {
		if c.redist == nil {
			return true, fmt.Errorf("%w: epoch %d in %s was written by %d ranks, this job has %d (restart with -n %d, or register a redistribution callback with SetRedistribute)",
				ErrRankCount, e, c.cfg.Prefix, m.Ranks, size, m.Ranks)
		}
		return false, c.redist(&OldEpoch{Epoch: e, Ranks: m.Ranks, c: c, m: m, dir: map[int]string{}})
	}
	if dir == "" {
		if dir, err = c.verified(m, rank); err != nil {
			return false, err
		}
	}
	rf, err := openRankFile(layout.RankPath(dir, e, rank))
	if err != nil {
		return false, err
	}
	defer rf.close()
	if rf.ix.Epoch != e || rf.ix.Rank != rank {
		return false, fmt.Errorf("ckpt: %s holds epoch %d rank %d", layout.RankPath(dir, e, rank), rf.ix.Epoch, rf.ix.Rank)
	}
	if len(c.secs) == 0 && len(rf.ix.Sections) > 0 {
		names := make([]string, len(rf.ix.Sections))
		for i, s := range rf.ix.Sections {
			names[i] = strconv.Quote(s.Name)
		}
		return false, fmt.Errorf("%w: rank %d: epoch %d holds sections %s: register the state (Register, RegisterSlice, RegisterStream) before Restore",
			ErrNothingRegistered, rank, e, strings.Join(names, ", "))
	}
	for _, s := range c.secs {
		rd, n, err := rf.section(s.name)
		if err != nil {
			return false, fmt.Errorf("ckpt: epoch %d rank %d: %w", e, rank, err)
		}
		if err := s.load(rd, n); err != nil {
			return false, fmt.Errorf("ckpt: epoch %d rank %d: section %q: %w", e, rank, s.name, err)
		}
	}
	return false, nil
}

// RestoreError lists why each failed epoch could not be restored.
type RestoreError struct {
	Tried []error // one per epoch tried, newest first (this rank's view)
}

func (e *RestoreError) Error() string {
	var b strings.Builder
	b.WriteString(ErrNoCheckpoint.Error())
	for _, err := range e.Tried {
		b.WriteString("; ")
		b.WriteString(err.Error())
	}
	return b.String()
}

func (e *RestoreError) Is(target error) bool { return target == ErrNoCheckpoint }

// Restore loads the newest epoch that every rank reads back intact
// (collective): each rank verifies its file's checksum and loads its
// sections; when any rank fails, all move to the next older epoch
// together. It returns the epoch restored, or an error matching
// ErrNoCheckpoint when there is none (start from the beginning), or
// ErrRankCount.
func (c *Ckpt) Restore() (int, error) {
	if err := c.restoreStart(opRestore); err != nil {
		return 0, err
	}
	cs, err := c.candidates()
	if err != nil {
		return 0, err
	}
	var tried []error
	partial := false // some epoch was loaded by some ranks only
	for _, e := range cs {
		var m *layout.Manifest
		var dir string
		var lerr error
		if c.cfg.Cache != "" {
			var fatal error
			if m, dir, lerr, fatal = c.rebuild(e); fatal != nil {
				return 0, fatal
			}
		} else {
			m, lerr = c.manifest(e)
		}
		// Check every rank's copy before any rank loads: a rank that
		// loaded an epoch another rank cannot read would keep its state
		// if no older epoch is restored, and the application, starting
		// from the beginning, then ran ranks at different steps (heat
		// hung with its only epoch damaged on one rank).
		var mismatch bool
		if lerr == nil && m.Ranks != c.comm.Size() && c.redist == nil {
			mismatch, lerr = c.load(e, m, dir) // ErrRankCount; loads nothing
		} else if lerr == nil && m.Ranks == c.comm.Size() && dir == "" {
			dir, lerr = c.verified(m, c.comm.Rank())
		}
		v := []int64{0, 0}
		if lerr != nil {
			v[0] = 1
			tried = append(tried, lerr)
		}
		if mismatch {
			v[1] = 1
		}
		if err := mpi.Allreduce(c.comm, v, v, mpi.Max); err != nil {
			return 0, err
		}
		if v[1] == 1 {
			if lerr == nil || !errors.Is(lerr, ErrRankCount) {
				lerr = fmt.Errorf("%w: epoch %d (another rank says so)", ErrRankCount, e)
			}
			return 0, lerr
		}
		if v[0] == 0 {
			// Every copy is intact; loading can still fail (the
			// application's reader), after other ranks loaded.
			_, lerr = c.load(e, m, dir)
			w := []int64{0, 0}
			if lerr != nil {
				w[0] = 1
				tried = append(tried, lerr)
			}
			if errors.Is(lerr, ErrNothingRegistered) {
				w[1] = 1
			}
			if err := mpi.Allreduce(c.comm, w, w, mpi.Max); err != nil {
				return 0, err
			}
			if w[1] == 1 {
				// A programming error, not a damaged epoch: no older
				// one would do better.
				if lerr == nil || !errors.Is(lerr, ErrNothingRegistered) {
					lerr = fmt.Errorf("%w on another rank (see its error): epoch %d not restored", ErrNothingRegistered, e)
				}
				return 0, lerr
			}
			v[0] = w[0]
			partial = partial || w[0] != 0
		}
		if v[0] == 0 {
			c.restored = e
			c.last = time.Now()
			if err := c.completeFlush(m, dir); err != nil {
				return 0, err
			}
			return e, nil
		}
		if lerr == nil {
			tried = append(tried, fmt.Errorf("epoch %d: another rank could not read its file", e))
		} else {
			// Said now, not only if no epoch is restored: the job resumed
			// from an older epoch with nothing said of the damage.
			fmt.Fprintf(logOut, "ckpt: rank %d: epoch %d not restored (every rank moves to an older one): %s\n",
				c.comm.Rank(), e, strings.TrimPrefix(lerr.Error(), "ckpt: "))
		}
		if c.unreadable == nil {
			c.unreadable = map[int]bool{}
		}
		c.unreadable[e] = true
	}
	if c.cfg.Epoch > 0 {
		// Not ErrNoCheckpoint: an application that starts from the
		// beginning on that (as documented) would run from step 0 and
		// prune the epochs the user asked to restart from.
		why := "not committed on any rank"
		if len(tried) > 0 {
			why = strings.TrimPrefix((&RestoreError{Tried: tried}).Error(), ErrNoCheckpoint.Error()+"; ")
		}
		return 0, fmt.Errorf("ckpt: -ckpoint-num %d: %w: %s", c.cfg.Epoch, ErrEpochUnavailable, why)
	}
	if partial {
		return 0, fmt.Errorf("%w: %s", ErrPartialRestore, strings.TrimPrefix((&RestoreError{Tried: tried}).Error(), ErrNoCheckpoint.Error()+"; "))
	}
	return 0, &RestoreError{Tried: tried}
}

// Restored is the epoch Restore loaded (0: none).
func (c *Ckpt) Restored() int { return c.restored }

// completeFlush (collective) finishes the flush of restored epoch m when
// the prefix has not committed it: the epoch came from the caches (or
// partner copies), and until it is in the prefix a second lost node could
// take it away. Each rank flushes its file in the background from where
// it verified it; the next collective call commits it, as after a
// checkpoint.
func (c *Ckpt) completeFlush(m *layout.Manifest, dir string) error {
	if c.cfg.Cache == "" || m.Ranks != c.comm.Size() {
		return nil
	}
	var need bool
	if c.comm.Rank() == 0 {
		_, err := layout.ReadManifest(c.cfg.Prefix, m.Epoch)
		need = err != nil
	}
	if err := mpi.BcastValue(c.comm, &need, 0); err != nil {
		return err
	}
	if !need {
		return nil
	}
	if dir == "" {
		var err error
		if dir, err = c.verified(m, c.comm.Rank()); err != nil {
			return err
		}
	}
	if c.comm.Rank() == 0 {
		c.pending[m.Epoch] = m
	}
	c.queue(flushJob{epoch: m.Epoch, from: dir, file: m.Files[c.comm.Rank()]})
	return nil
}
