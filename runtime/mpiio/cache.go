package mpiio

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gompi/gompi/runtime/cow"
	"github.com/gompi/gompi/runtime/mpiio/journal"
	"golang.org/x/sys/unix"
)

// cache is one rank's node-local write-back cache of a file: writes are
// appended to a data file in the cache directory and journaled, and a
// flusher goroutine writes them to the shared file in order. Collective
// writes put only aggregators' (block-aligned) windows here, so flushes
// from different hosts never share a block.
type cache struct {
	target     *os.File
	abs        string // the shared file's absolute name, for the journal header
	data, jnl  *os.File
	jnlPath    string
	dataPath   string
	flushChunk int64
	// noCRC: the cache is on tmpfs, whose data file dies only with the
	// machine, as its journal does: the data's checksum would guard
	// nothing the cache promises, and costs a fifth of a cached write.
	noCRC bool
	delay time.Duration // test knob: pause before each flush, cut short by a drain
	// lock: some rank may sieve independent writes (a read-modify-write
	// of a span under a byte-range lock, which may hold bytes of this
	// cache's extents): flushes take the same lock on their span, or the
	// sieve wrote back the bytes it read before the flush over them.
	lock atomic.Bool
	// snapMin > 0: a write of at least snapMin bytes from private memory
	// is written by a copy-on-write snapshot writer (gompi_cache_snapshot).
	snapMin int64

	mu      sync.Mutex
	cond    *sync.Cond
	seq     uint64
	dataEnd int64
	// reserved: the data file's bytes [0, reserved) have storage (written,
	// or allocated for a snapshot writer); only beyond is fallocate needed.
	reserved int64
	queue    []journal.Extent // acknowledged, not yet flushed, in order
	maxEnd   int64            // largest file end of a queued extent
	err      error            // the flusher's first failure (sticky)
	drains   int              // drains waiting: the flusher skips its delay
	stop     bool
	stopped  chan struct{}
	// snaps: the snapshot writers of queued extents, by Seq, until the
	// flusher (or close) saw them finish; nsnaps counts them all.
	snaps  map[uint64]*cow.Snap
	nsnaps int
	// through counts the writes too large for the cache directory, written
	// to the file itself.
	through int
	// held: writers forked by the collective call in progress, which
	// start writing when it returns (release; cow.Options.Hold).
	held []*cow.Snap
}

// lockWait bounds how long Open waits for a journal's lock held by
// another process while the journal has an uncommitted snapshot extent: a
// killed rank's snapshot writer holds it until its bytes are in (about a
// second per GB). Otherwise Open waits only lockGrace (a writer that has
// just committed is exiting): a live cache of another job holds the lock
// for good, and Open then fails with journal.ErrInUse soon.
const (
	lockWait  = 30 * time.Second
	lockGrace = 2 * time.Second
)

func lockWaiting(ctx context.Context, f *os.File) error {
	start := time.Now()
	for {
		err := journal.Lock(f)
		if !errors.Is(err, journal.ErrInUse) {
			return err
		}
		waited := time.Since(start)
		if waited > lockWait || waited > lockGrace && !journal.Writing(f) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (stopped waiting: %w)", err, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// cacheKey names a file's journal pair for one rank.
func cacheKey(path string, rank int) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	h := sha256.Sum256([]byte(abs))
	return hex.EncodeToString(h[:12]) + "-r" + strconv.Itoa(rank), nil
}

func openCache(f *File) (*cache, error) {
	dir := f.hints.cacheDir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, &HintError{"gompi_cache_dir", dir, err}
	}
	key, err := cacheKey(f.path, f.rank)
	if err != nil {
		return nil, err
	}
	c := &cache{target: f.fd, jnlPath: filepath.Join(dir, key+journal.JournalSuffix),
		dataPath: filepath.Join(dir, key+journal.DataSuffix), flushChunk: f.hints.cacheFlush,
		delay: f.hints.flushDelay, stopped: make(chan struct{}), snaps: map[uint64]*cow.Snap{}}
	if f.hints.snapshot {
		c.snapMin = f.hints.snapMin
	}
	c.cond = sync.NewCond(&c.mu)
	var st unix.Statfs_t
	c.noCRC = unix.Statfs(dir, &st) == nil && st.Type == unix.TMPFS_MAGIC
	// The journal is locked for as long as this cache lives, so that
	// nobody replays it under the flusher (journal.ReplayDir skips it).
	if c.jnl, err = os.OpenFile(c.jnlPath, os.O_RDWR|os.O_CREATE, 0o600); err != nil {
		return nil, err
	}
	fail := func(err error) (*cache, error) {
		c.jnl.Close()
		if c.data != nil {
			c.data.Close()
		}
		return nil, err
	}
	if err := lockWaiting(f.ctx, c.jnl); err != nil {
		return fail(fmt.Errorf("cache: %w", err))
	}
	if err := staleJournal(f, c.jnl); err != nil {
		return fail(err)
	}
	// A journal left by a crashed run: write what it acknowledged.
	if _, _, err := journal.ReplayFile(c.jnl); err != nil {
		return fail(fmt.Errorf("cache recovery: %w", err))
	}
	abs, _ := filepath.Abs(f.path)
	c.abs = abs
	// Replayed (a crash before the truncation replays it again, which
	// writes the same bytes): start a new journal, and only then a new
	// data file, so no journal ever names bytes the data file lost.
	if err := c.jnl.Truncate(0); err != nil {
		return fail(err)
	}
	if _, err := c.jnl.Write(journal.Header(abs)); err != nil {
		return fail(err)
	}
	if c.data, err = os.OpenFile(c.dataPath, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600); err != nil {
		return fail(err)
	}
	go c.flusher()
	return c, nil
}

// replayOnly (a read-only Open with a cache directory) writes what this
// rank's journal of the file, left by a crashed run, acknowledged, and
// removes the journal pair, as openCache's recovery does, keeping no cache.
func replayOnly(f *File) error {
	key, err := cacheKey(f.path, f.rank)
	if err != nil {
		return err
	}
	jnlPath := filepath.Join(f.hints.cacheDir, key+journal.JournalSuffix)
	jf, err := os.OpenFile(jnlPath, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cache recovery: %w", err)
	}
	defer jf.Close() // releases the lock, after the removals
	if err := lockWaiting(f.ctx, jf); err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	if _, _, err := journal.ReplayFile(jf); err != nil {
		return fmt.Errorf("cache recovery: %w", err)
	}
	// The journal first: a data file alone is garbage, never a replay.
	if err := os.Remove(jnlPath); err != nil {
		return fmt.Errorf("cache recovery: %w", err)
	}
	if err := os.Remove(filepath.Join(f.hints.cacheDir, key+journal.DataSuffix)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("cache recovery: %w", err)
	}
	return nil
}

// staleJournal: when this Open created the file, a journal of its path
// holding acknowledged writes is of an earlier file of that name, removed
// since the crash; replayed, its extents went into the new file (past
// this job's data too: the file was as long as the old one's). It is an
// error naming the journal, which is kept, as journal replay does when
// the file is missing.
func staleJournal(f *File, jf *os.File) error {
	if !f.created {
		return nil
	}
	b, err := io.ReadAll(io.NewSectionReader(jf, 0, 1<<62))
	if err != nil || len(b) == 0 {
		return nil
	}
	if _, pending, err := journal.Parse(b); err != nil || len(pending) == 0 {
		return nil // replay reports a corrupt journal
	}
	return fmt.Errorf("cache recovery: %s holds writes a crashed run acknowledged for an earlier %s, which was removed since: not replayed into the new file (remove the journal and its data file if they are not wanted, or restore the file and open it again)", jf.Name(), f.path)
}

// replayOrphans replays the journals of this file in the cache directory
// whose rank no rank of this job has (a crashed run with more ranks): no
// Open of this job would replay them, and a replay later (the next run
// with that many ranks, gompiexec -io-cache) would write their old bytes
// over this job's. Journals a live process holds are left alone.
func replayOrphans(f *File) error {
	key, err := cacheKey(f.path, 0)
	if err != nil {
		return err
	}
	prefix := strings.TrimSuffix(key, "0")
	ents, err := os.ReadDir(f.hints.cacheDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cache recovery: %w", err)
	}
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, prefix) || !strings.HasSuffix(name, journal.JournalSuffix) {
			continue
		}
		r, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(name, prefix), journal.JournalSuffix))
		if err != nil || r < f.comm.Size() {
			continue
		}
		j := filepath.Join(f.hints.cacheDir, name)
		if jf, err := os.Open(j); err == nil {
			err = staleJournal(f, jf)
			jf.Close()
			if err != nil {
				return err
			}
		}
		if _, _, err := journal.Replay(j); err != nil && !errors.Is(err, journal.ErrInUse) {
			return fmt.Errorf("cache recovery of rank %d's journal: %w", r, err)
		}
	}
	return nil
}

// put caches b for file offset off (see putv).
func (c *cache) put(off int64, b []byte) error {
	return c.putv([]piece{{off: off, len: int64(len(b))}}, b, false)
}

// putv caches the pieces ps of buf (piece p: buf[p.buf:p.buf+p.len] for
// file offset p.off) as one extent: the bytes are appended to the data
// file, straight from buf (one write per run of consecutive pieces), then
// one journal record names them all. When it returns, a crash of this
// process loses nothing (the next Open or journal.Replay writes them).
// With snapshots on, a large write from private memory is handed to a
// snapshot writer instead (putSnapshot), with the same promise; hold: the
// writer starts only at release (a collective call's end).
//
// A write the cache directory has no room for (ENOSPC, EDQUOT) first
// drains the cache, whose flushed extents' space the next writes then
// reuse, and tries again; one larger than the cache is written to the
// file itself (after the drain, so after every earlier extent). Such
// writes failed once the data file had filled the directory, whatever had
// been flushed, so no file larger than the cache could be written.
func (c *cache) putv(ps []piece, buf []byte, hold bool) error {
	if len(ps) == 0 {
		return nil
	}
	err := c.putvOnce(ps, buf, hold)
	if !noSpace(err) {
		return err
	}
	if derr := c.drain(); derr != nil {
		return errors.Join(err, derr)
	}
	if err = c.putvOnce(ps, buf, hold); !noSpace(err) {
		return err
	}
	for _, p := range ps {
		var unlock func()
		if c.lock.Load() { // as flushOne
			if unlock, err = lockRange(c.target, unix.F_WRLCK, p.off, p.off+p.len); err != nil {
				return err
			}
		}
		_, err := pwriteFull(c.target, buf[p.buf:p.buf+p.len], p.off)
		if unlock != nil {
			unlock()
		}
		if err != nil {
			return fmt.Errorf("write of %d bytes, larger than the cache %s, to the file: %w", total(ps), c.dataPath, err)
		}
	}
	c.mu.Lock()
	c.through++
	c.mu.Unlock()
	return nil
}

// noSpace: err says the cache directory is full.
func noSpace(err error) bool {
	return errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT)
}

func (c *cache) putvOnce(ps []piece, buf []byte, hold bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	e := journal.Extent{DataOff: c.dataEnd, NoCRC: c.noCRC}
	if len(ps) == 1 {
		e.FileOff = ps[0].off
	} else {
		e.Pieces = make([]journal.Piece, len(ps))
	}
	maxEnd := c.maxEnd
	var runs []cow.Region // runs of consecutive pieces in buf, at their data file offsets
	lo, hi := ps[0].buf, ps[0].buf
	for i := 0; i < len(ps); {
		j, end := i+1, ps[i].buf+ps[i].len
		for j < len(ps) && ps[j].buf == end {
			end += ps[j].len
			j++
		}
		runs = append(runs, cow.Region{Mem: buf[ps[i].buf:end], Off: e.DataOff + e.Len})
		lo, hi = min(lo, ps[i].buf), max(hi, end)
		e.Len += end - ps[i].buf
		for ; i < j; i++ {
			if e.Pieces != nil {
				e.Pieces[i] = journal.Piece{FileOff: ps[i].off, Len: ps[i].len}
			}
			maxEnd = max(maxEnd, ps[i].off+ps[i].len)
		}
	}
	snap := c.snapMin > 0 && e.Len >= c.snapMin && !cow.Disabled() && cow.Private(buf[lo:hi])
	if snap {
		// The writer must not fail for want of space after the write is
		// acknowledged (it did, with the cache directory full: ENOSPC lost
		// the write): reserve the extent's storage first, and fail the
		// write here if there is none. Without fallocate, copy.
		if err := c.reserve(e.DataOff + e.Len); errors.Is(err, unix.EOPNOTSUPP) {
			snap = false
		} else if err != nil {
			return fmt.Errorf("cache data %s: reserving %d bytes for a snapshot write: %w", c.dataPath, e.Len, err)
		}
	}
	if snap {
		if err := c.putSnapshot(e, runs, hold); err != nil {
			return err
		}
	} else if err := c.putCopy(e, runs); err != nil {
		return err
	}
	c.reserved = max(c.reserved, e.DataOff+e.Len)
	c.dataEnd += e.Len
	c.maxEnd = maxEnd
	c.cond.Broadcast()
	return nil
}

// reserve allocates the data file's storage up to end. The data file is
// written from its start again after each drain, so only its first
// extension costs anything (about 0.1 s per 256 MiB of new tmpfs pages,
// which the writer would otherwise have allocated). The file's size is
// kept: it grows as the writers write.
func (c *cache) reserve(end int64) error {
	if end <= c.reserved {
		return nil
	}
	if err := unix.Fallocate(int(c.data.Fd()), unix.FALLOC_FL_KEEP_SIZE, c.reserved, end-c.reserved); err != nil {
		return err
	}
	c.reserved = end
	return nil
}

// putCopy writes e's data (runs) into the data file, then its record.
func (c *cache) putCopy(e journal.Extent, runs []cow.Region) error {
	for _, r := range runs {
		if _, err := c.data.WriteAt(r.Mem, r.Off); err != nil {
			return fmt.Errorf("cache data %s: %w", c.dataPath, err)
		}
		if !c.noCRC {
			e.CRC = journal.UpdateChecksum(e.CRC, r.Mem)
		}
	}
	c.seq++
	e.Seq = c.seq
	if _, err := c.jnl.Write(journal.ExtentRecord(e)); err != nil {
		return c.jnlFailed(err)
	}
	c.queue = append(c.queue, e)
	return nil
}

// jnlFailed makes a failed journal append sticky: a record torn in the
// middle of the journal would hide every later one from replay, so
// nothing more may be acknowledged.
func (c *cache) jnlFailed(err error) error {
	c.err = fmt.Errorf("cache journal %s: %w", c.jnlPath, err)
	return c.err
}

// putSnapshot journals e as a snapshot extent, uncommitted, then forks a
// copy-on-write writer (cow.SnapshotWith) that writes the runs' bytes, as
// they are now, into the data file and then commits the record, and
// returns without waiting: the caller may reuse its buffer at once. The
// writer is detached: a kill -9 of this process (or of the job's process
// group) right after the return does not stop it, and it holds the
// journal's lock (an inherited descriptor), so no replay runs before it
// is done. Only this process appends to the journal; the writer writes
// one byte into its own record. Without a writer (fork failed) the bytes
// and the commit are written here. hold: the writer waits for release
// before it writes (its kill-safety is the same: this process's death
// releases it).
func (c *cache) putSnapshot(e journal.Extent, runs []cow.Region, hold bool) error {
	e.Snapshot = true
	if !c.noCRC {
		for _, r := range runs {
			e.CRC = journal.UpdateChecksum(e.CRC, r.Mem)
		}
	}
	at, err := c.jnl.Seek(0, io.SeekCurrent)
	if err != nil {
		return fmt.Errorf("cache journal %s: %w", c.jnlPath, err)
	}
	c.seq++
	e.Seq = c.seq
	if _, err := c.jnl.Write(journal.ExtentRecord(e)); err != nil {
		return c.jnlFailed(err)
	}
	mo, mb := journal.CommitMark(e)
	mark := cow.Region{Mem: []byte{mb}, Off: at + mo}
	s, err := cow.SnapshotWith(c.data, runs, cow.Options{Detach: true, CommitFile: c.jnl, Commit: mark, Hold: hold})
	if err != nil {
		for _, r := range runs {
			if _, err := c.data.WriteAt(r.Mem, r.Off); err != nil {
				return fmt.Errorf("cache data %s: %w", c.dataPath, err)
			}
		}
		if _, err := c.jnl.WriteAt(mark.Mem, mark.Off); err != nil {
			return fmt.Errorf("cache journal %s: %w", c.jnlPath, err)
		}
	} else {
		c.snaps[e.Seq] = s
		c.nsnaps++
		if hold {
			c.held = append(c.held, s)
		}
	}
	c.queue = append(c.queue, e)
	return nil
}

// release lets the held snapshot writers write (the collective call that
// forked them is over). Anything that waits for the flusher releases
// first.
func (c *cache) release() {
	c.mu.Lock()
	held := c.held
	c.held = nil
	c.mu.Unlock()
	for _, s := range held {
		s.Release()
	}
}

func (c *cache) flusher() {
	defer close(c.stopped)
	var buf []byte
	for {
		c.mu.Lock()
		for len(c.queue) == 0 && !c.stop {
			c.cond.Wait()
		}
		if len(c.queue) == 0 || c.err != nil {
			c.mu.Unlock()
			return
		}
		e := c.queue[0]
		if c.delay > 0 && c.drains == 0 && !c.stop {
			wake := time.AfterFunc(c.delay, func() {
				c.mu.Lock()
				c.cond.Broadcast()
				c.mu.Unlock()
			})
			for end := time.Now().Add(c.delay); c.drains == 0 && !c.stop && time.Now().Before(end); {
				c.cond.Wait()
			}
			wake.Stop()
		}
		snap := c.snaps[e.Seq]
		c.mu.Unlock()
		var err, snapErr error
		if snap != nil {
			// Its bytes are in the data file once its writer is done;
			// a held writer is not released here (Wait would), but when
			// its call returns.
			<-snap.Done()
			snapErr = snap.Wait()
			c.mu.Lock()
			delete(c.snaps, e.Seq)
			c.mu.Unlock()
		}
		if snapErr == nil {
			err = c.flushOne(e, &buf)
		}
		c.mu.Lock()
		if snapErr != nil {
			// Acknowledged and lost: as a page cache's write-back error,
			// it is reported by the next write, Sync or Close.
			c.err = fmt.Errorf("cached write of %d bytes (extent %d) lost: its snapshot writer failed: %w", e.Len, e.Seq, snapErr)
			c.queue = nil
		} else if err != nil {
			c.err = fmt.Errorf("cache flush of %d bytes at offset %d: %w", e.Len, e.FileOff, err)
			c.queue = nil
		} else {
			c.queue = c.queue[1:]
			_, err = c.jnl.Write(journal.FlushedRecord(e.Seq))
			if err != nil {
				c.err = fmt.Errorf("cache journal %s: %w", c.jnlPath, err)
			}
		}
		c.cond.Broadcast()
		c.mu.Unlock()
	}
}

func (c *cache) flushOne(e journal.Extent, buf *[]byte) error {
	if int64(len(*buf)) != c.flushChunk {
		*buf = make([]byte, c.flushChunk)
	}
	if c.lock.Load() {
		lo, hi := maxOff, int64(0)
		e.Each(func(off, _, l int64) error {
			lo, hi = min(lo, off), max(hi, off+l)
			return nil
		})
		if lo < hi {
			unlock, err := lockRange(c.target, unix.F_WRLCK, lo, hi)
			if err != nil {
				return err
			}
			defer unlock()
		}
	}
	return journal.Copy(c.target, c.data, &e, *buf)
}

// syncTarget syncs the shared file (a variable for tests: a real fsync
// failure needs a file system that fails write-back).
var syncTarget = (*os.File).Sync

// drain waits until every cached extent is on the shared file, syncs it,
// and empties the journal.
func (c *cache) drain() error {
	c.release()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.drains++
	defer func() { c.drains-- }()
	c.cond.Broadcast()
	for len(c.queue) > 0 && c.err == nil {
		c.cond.Wait()
	}
	if c.err != nil {
		return c.err
	}
	if c.seq == 0 || c.dataEnd == 0 {
		return nil
	}
	if err := syncTarget(c.target); err != nil {
		// The flushed records promised bytes that may never reach the
		// file (a write-back error is reported here, after the writes
		// succeeded): mark them unflushed, so that replay writes every
		// extent since the last drain again, and keep the pair (sticky,
		// as a failed flush). It was emptied by Close all the same, and
		// the acknowledged writes were lost.
		if uerr := journal.Unflush(c.jnl); uerr != nil {
			err = errors.Join(err, uerr)
		}
		c.err = fmt.Errorf("cache: fsync %s (the journal %s keeps the writes for replay): %w", c.target.Name(), c.jnlPath, err)
		return c.err
	}
	// Everything is durable on the shared file: start a new journal.
	if err := c.jnl.Truncate(0); err != nil {
		return err
	}
	if _, err := c.jnl.WriteAt(journal.Header(c.abs), 0); err != nil {
		return err
	}
	if _, err := c.jnl.Seek(0, 2); err != nil {
		return err
	}
	// The data file is kept, and overwritten from its start by the next
	// writes: its pages are allocated already (writing fresh tmpfs pages
	// costs about twice as much as overwriting). The new journal names
	// none of its old bytes.
	c.dataEnd = 0
	c.maxEnd = 0
	return nil
}

// pending reports whether an acknowledged extent not yet flushed (or
// being flushed) has bytes in one of rs (sorted, disjoint runs).
func (c *cache) pending(rs []piece) bool {
	if len(rs) == 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	hit := errors.New("hit")
	for i := range c.queue {
		err := c.queue[i].Each(func(off, _, l int64) error {
			k := sort.Search(len(rs), func(k int) bool { return rs[k].off+rs[k].len > off })
			if k < len(rs) && rs[k].off < off+l {
				return hit
			}
			return nil
		})
		if err == hit {
			return true
		}
	}
	return false
}

// size is the file size as readers of this rank will see it after a drain.
func (c *cache) size() (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st, err := c.target.Stat()
	if err != nil {
		return 0, false
	}
	return max(st.Size(), c.maxEnd), true
}

// close stops the flusher (after a drain) and removes the journal pair
// when nothing is left to flush.
func (c *cache) close() error {
	c.release()
	c.mu.Lock()
	c.stop = true
	c.cond.Broadcast()
	empty := len(c.queue) == 0 && c.err == nil
	c.mu.Unlock()
	<-c.stopped
	// Writers the flusher did not wait for (it stopped at an error).
	c.mu.Lock()
	snaps := make([]*cow.Snap, 0, len(c.snaps))
	for _, s := range c.snaps {
		snaps = append(snaps, s)
	}
	c.mu.Unlock()
	for _, s := range snaps {
		s.Wait()
	}
	if empty { // under the journal's lock: nobody replays it meanwhile
		os.Remove(c.jnlPath)
		os.Remove(c.dataPath)
	}
	c.data.Close()
	c.jnl.Close()
	return nil
}
