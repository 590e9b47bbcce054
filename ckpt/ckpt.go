// Package ckpt checkpoints and restarts gompi jobs, after LLNL SCR's
// contract: the application owns its state and registers what to save;
// the library saves it in coordinated epochs (a collective Checkpoint at a
// safe point, or when NeedCheckpoint says so on every rank at the same
// step) and, after a crash, restores the newest epoch every rank reads back
// intact. The format is ckpt/layout's (docs/ckpt.md).
//
// A typical loop:
//
//	c, err := ckpt.New(ctx, world, ckpt.FromEnv())
//	c.Register("step", &step)
//	ckpt.RegisterSlice(c, "grid", &grid)
//	if _, err := c.Restore(); err != nil && !errors.Is(err, ckpt.ErrNoCheckpoint) { ... }
//	for ; step < steps; step++ {
//		compute()
//		if need, _ := c.NeedCheckpoint(); need { c.Checkpoint() }
//	}
//	c.Close()
//
// State allocated with MakeSlice (runtime/cow's memory) is saved, when
// there is a cache level, by a copy-on-write snapshot: Checkpoint returns
// after a fork, and a child process writes the bytes as they were while
// the application goes on (docs/ckpt.md, "Snapshots").
package ckpt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gompi/gompi/ckpt/layout"
	"github.com/gompi/gompi/internal/rankevent"
	mpi "github.com/gompi/gompi/runtime"
	"github.com/gompi/gompi/runtime/cow"
)

// Environment variables gompiexec sets from its -ckpoint-* options.
const (
	EnvPrefix   = "GOMPI_CKPT_PREFIX"   // -ckpoint-prefix
	EnvInterval = "GOMPI_CKPT_INTERVAL" // -ckpoint-interval, seconds
	EnvKeep     = "GOMPI_CKPT_KEEP"     // -ckpoint-keep
	EnvEpoch    = "GOMPI_CKPT_EPOCH"    // -ckpoint-num
	EnvCache    = "GOMPI_CKPT_CACHE"    // -ckpoint-cache
	EnvPartner  = "GOMPI_CKPT_PARTNER"  // -ckpoint-partner: "1" (or "true") copies to a partner node
)

// DefaultKeep is Config.Keep's default.
const DefaultKeep = 2

// Errors callers test with errors.Is.
var (
	// ErrNoCheckpoint: Restore found no epoch that every rank could read
	// back; the application starts from the beginning.
	ErrNoCheckpoint = errors.New("ckpt: no checkpoint to restart from")
	// ErrEpochUnavailable: the epoch Config.Epoch (-ckpoint-num) asks
	// for cannot be restored. It does not match ErrNoCheckpoint: the job
	// must stop, not start from the beginning.
	ErrEpochUnavailable = errors.New("ckpt: the requested epoch cannot be restored")
	// ErrPartialRestore: no epoch was restored, after some ranks loaded
	// one that others failed to load (an application reader's error):
	// their registered state is no longer the initial one, so the
	// application must not start from the beginning either.
	ErrPartialRestore = errors.New("ckpt: no epoch restored, and some ranks' state was loaded from one")
	// ErrRankCount: the epoch was written by another number of ranks and
	// no redistribution callback is registered.
	ErrRankCount = errors.New("ckpt: checkpoint written by a different number of ranks")
	// ErrNoPrefix: Config.Prefix is empty.
	ErrNoPrefix = errors.New("ckpt: no checkpoint prefix (set -ckpoint-prefix or Config.Prefix)")
)

// Config says where and how often to checkpoint. FromEnv fills it from
// gompiexec's options.
type Config struct {
	// Prefix is the directory epochs are committed in, normally on a file
	// system every host shares. Required.
	Prefix string
	// Cache, when set, is a node-local directory checkpoints are written
	// to first; each rank then flushes its file to Prefix in the
	// background (docs/ckpt.md, "Levels"). It serves one prefix
	// (layout.ErrForeignCache) and one running job at a time
	// (layout.ErrCacheInUse).
	Cache string
	// Partner, with Cache, also copies each rank's cache file to a rank on
	// another node (the next node in the job's order), so that losing one
	// node's cache before the flush completed loses no epoch
	// (docs/ckpt.md, "Partner copies"). It costs one file transfer per
	// rank inside Checkpoint. With every rank on one node it does nothing.
	Partner bool
	// Interval makes NeedCheckpoint true once this long has passed since
	// the last checkpoint, successful or not (or the start). 0: only on
	// request.
	Interval time.Duration
	// Keep is how many committed epochs to keep. Default DefaultKeep.
	Keep int
	// Epoch, when positive, restricts Restore to that epoch (gompiexec
	// -ckpoint-num).
	Epoch int
	// NoSnapshot turns off copy-on-write snapshots: slices allocated with
	// cow.Make (or MakeSlice) are copied inside Checkpoint like any other
	// (docs/ckpt.md, "Snapshots"). The environment's GOMPI_COW=off does
	// the same.
	NoSnapshot bool
	// Requests delivers checkpoint requests. Default: the proxy's event
	// channel (SIGUSR1 to gompiexec), when the process has one.
	Requests <-chan struct{}

	partnerBad bool // EnvPartner did not parse
}

// FromEnv is the configuration gompiexec passes to ranks. Malformed
// variables are reported by New.
func FromEnv() Config {
	c := Config{Prefix: os.Getenv(EnvPrefix), Cache: os.Getenv(EnvCache)}
	if v := os.Getenv(EnvPartner); v != "" {
		b, err := strconv.ParseBool(v)
		c.Partner = b
		if err != nil {
			c.partnerBad = true
		}
	}
	if v := os.Getenv(EnvInterval); v != "" {
		if f, err := strconv.ParseFloat(v, 64); err == nil && f >= 0 {
			c.Interval = time.Duration(f * float64(time.Second))
		} else {
			c.Interval = -1
		}
	}
	if v := os.Getenv(EnvKeep); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n >= 1 {
			c.Keep = n
		} else {
			c.Keep = -1
		}
	}
	if v := os.Getenv(EnvEpoch); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n >= 1 {
			c.Epoch = n
		} else {
			c.Epoch = -1
		}
	}
	return c
}

func (c *Config) validate() error {
	switch {
	case c.Prefix == "":
		return ErrNoPrefix
	case c.Interval < 0:
		return fmt.Errorf("ckpt: %s=%q: want seconds >= 0", EnvInterval, os.Getenv(EnvInterval))
	case c.Keep < 0:
		return fmt.Errorf("ckpt: %s=%q: want an integer >= 1", EnvKeep, os.Getenv(EnvKeep))
	case c.Epoch < 0:
		return fmt.Errorf("ckpt: %s=%q: want an epoch number >= 1", EnvEpoch, os.Getenv(EnvEpoch))
	case c.partnerBad:
		return fmt.Errorf("ckpt: %s=%q: want 1 or 0", EnvPartner, os.Getenv(EnvPartner))
	case c.Partner && c.Cache == "":
		return errors.New("ckpt: a partner copy needs a node-local cache (-ckpoint-cache or Config.Cache)")
	}
	if c.Keep == 0 {
		c.Keep = DefaultKeep
	}
	return nil
}

// Ckpt checkpoints one job's registered state. Its methods other than
// Register* are collective over the communicator given to New.
type Ckpt struct {
	comm   *mpi.Comm
	cfg    Config
	secs   []section
	names  map[string]bool
	regErr error // the first bad registration, returned by Checkpoint and Restore
	redist func(*OldEpoch) error
	leader bool // writes this node's cache manifest
	// unlock releases the node's cache lock (the leader holds it).
	unlock func()
	// owner: rank 0's ownership of the prefix (owner.go).
	owner  *layout.PrefixLock
	onNode []int // the ranks on this rank's node (same host, same cache)
	// Partner copies: the rank this rank sends its file to (-1: none) and
	// the ranks that send theirs here.
	partnerTo   int
	partnerFrom []int
	next        int // the next epoch's number
	restored    int
	// unreadable: committed epochs newer than the restored one that
	// Restore found some rank could not read; pruning does not count them
	// (set before any checkpoint, read by rank 0 and its committer).
	unreadable map[int]bool
	saidDamage bool // Restore said which manifests are damaged
	last       time.Time
	step       int64

	// Requests are numbered: reqSeq is the highest this rank received,
	// handled the highest the ranks agreed on, so a request that reaches
	// ranks at different steps yields one checkpoint, not one per rank.
	reqSeq  atomic.Int64
	handled atomic.Int64
	stop    chan struct{}

	// Cache level.
	flushQ       chan flushJob
	flushWG      sync.WaitGroup // the flusher goroutine
	queued       sync.WaitGroup // flush jobs not yet done (Flush waits for them)
	flushed      atomic.Int64   // newest epoch this rank flushed
	flushMu      sync.Mutex
	flushedFiles map[int]layout.File // this rank's flushed files (with checksums) not yet committed in the prefix
	flushErr     atomic.Value        // error
	// Flushes that ended (unflushed.go): this rank's failed ones not yet
	// reported, the newest epoch whose flush ended, and, from every
	// rank's reports, the epochs some rank failed to flush and the
	// newest epoch whose flush ended on every rank.
	flushFails   map[int]bool
	flushEnds    atomic.Int64
	unflushable  map[int]bool
	allEnded     int
	commitQ      chan *layout.Manifest // rank 0: epochs every rank flushed, to commit in the prefix
	commitWG     sync.WaitGroup        // the committer goroutine
	commits      sync.WaitGroup        // commits queued and not done
	pending      map[int]*layout.Manifest
	primed       bool // a spare was asked for (or a checkpoint written) in this run
	prefixCommit int  // newest epoch committed in Prefix (as rank 0 last said)
	// Rank 0's commits in the prefix: the newest epoch handed to the
	// committer, the newest whose commit is done (durable: only that one
	// counts as committed), and whether a commit failed since the last
	// retry.
	queuedCommit int
	durable      atomic.Int64
	commitFailed atomic.Bool
	commitErr    atomic.Pointer[error] // the last failed commit's, until a later one succeeds
	closed       bool

	// Snapshots (snapshot.go): the one in progress, the cache manifests
	// whose commit waits for their snapshots (this node's first rank),
	// and how many checkpoints took the snapshot path.
	snap      *cow.Snap
	deferred  map[int]*layout.Manifest
	snapshots int
	// snapNoSpace: a snapshot writer of this rank ran out of space.
	snapNoSpace atomic.Bool
}

type flushJob struct {
	epoch int
	from  string // the directory holding the file (the cache; the prefix: nothing to copy)
	file  layout.File
	// prealloc, when positive, asks instead for a spare file of this
	// size before the first checkpoint.
	prealloc int64
	// snap, when set, is writing the file's snapshotted sections; w
	// closes the file once it is done.
	snap *cow.Snap
	w    *layout.Writer
}

// New prepares checkpointing for comm's ranks (collective). It creates
// the prefix and cache directories.
func New(ctx context.Context, comm *mpi.Comm, cfg Config) (*Ckpt, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	for _, d := range []string{cfg.Prefix, cfg.Cache} {
		if d != "" {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return nil, fmt.Errorf("ckpt: rank %d: %w", comm.Rank(), err)
			}
		}
	}
	var claimErr error
	if cfg.Cache != "" {
		claimErr = layout.ClaimCache(cfg.Cache, cfg.Prefix)
	}
	dup, err := comm.Dup()
	if err != nil {
		return nil, err
	}
	// Every rank learns if some node's cache is another prefix's (else the
	// others would wait for it in the next collective).
	bad := []int64{0}
	if claimErr != nil {
		bad[0] = 1
	}
	if err := mpi.Allreduce(dup, bad, bad, mpi.Max); err != nil {
		return nil, err
	}
	if claimErr != nil {
		return nil, fmt.Errorf("ckpt: rank %d: %w", comm.Rank(), claimErr)
	}
	if bad[0] != 0 {
		return nil, fmt.Errorf("ckpt: rank %d: %w on another rank's node (see its error)", comm.Rank(), layout.ErrForeignCache)
	}
	c := &Ckpt{comm: dup, cfg: cfg, names: map[string]bool{}, last: time.Now(),
		stop: make(chan struct{}), pending: map[int]*layout.Manifest{}, partnerTo: -1,
		flushedFiles: map[int]layout.File{}, deferred: map[int]*layout.Manifest{},
		flushFails: map[int]bool{}, unflushable: map[int]bool{}}
	// Epoch numbers continue after the highest directory any rank sees.
	hi := -1
	dirs := []string{cfg.Prefix, cfg.Cache}
	if cfg.Cache != "" {
		dirs = append(dirs, layout.PartnerDir(cfg.Cache))
	}
	for _, d := range dirs {
		if d != "" {
			n, err := layout.MaxEpoch(d)
			if err != nil {
				return nil, fmt.Errorf("ckpt: rank %d: %w", comm.Rank(), err)
			}
			hi = max(hi, n)
		}
	}
	if c.cfg.Cache != "" {
		// The first rank of each node (same host, same cache) writes its
		// cache manifest. Hosts are told apart as shared memory does
		// (SplitShared), not by host name, which containers and network
		// namespaces share.
		id, err := nodeID(dup, cfg.Cache)
		if err != nil {
			return nil, err
		}
		ids, err := mpi.AllgatherValue(dup, id)
		if err != nil {
			return nil, err
		}
		for r, v := range ids {
			if v == id {
				c.onNode = append(c.onNode, r)
			}
		}
		c.leader = c.onNode[0] == dup.Rank()
		pid, err := c.prefixID()
		if err != nil {
			return nil, err
		}
		if err := c.lockCache(pid); err != nil {
			return nil, err
		}
		if cfg.Partner {
			plan := partnerPlan(ids)
			c.partnerTo = plan[dup.Rank()]
			for r, p := range plan {
				if p == dup.Rank() {
					c.partnerFrom = append(c.partnerFrom, r)
				}
			}
		}
	}
	if err := c.claimPrefix(ctx); err != nil {
		if c.unlock != nil {
			c.unlock()
		}
		return nil, err
	}
	if c.cfg.Cache != "" {
		c.flushQ = make(chan flushJob, 64)
		c.flushWG.Add(1)
		go c.flusher()
		if dup.Rank() == 0 {
			c.commitQ = make(chan *layout.Manifest, 16)
			c.commitWG.Add(1)
			go c.committer()
		}
	}
	v := []int64{int64(hi)}
	if err := mpi.Allreduce(dup, v, v, mpi.Max); err != nil {
		return nil, err
	}
	c.next = max(int(v[0])+1, 1)
	if m, err := layout.Newest(cfg.Prefix); err == nil {
		c.prefixCommit = m.Epoch
		c.queuedCommit = m.Epoch
		c.durable.Store(int64(m.Epoch))
	}
	if cfg.Requests != nil {
		go func() {
			for {
				select {
				case _, ok := <-cfg.Requests:
					if !ok {
						return
					}
					c.Request()
				case <-c.stop:
					return
				}
			}
		}()
	} else if evs := rankevent.Subscribe(); evs != nil {
		go func() {
			for {
				select {
				case ev := <-evs:
					if ev.T == rankevent.Checkpoint {
						c.raise(ev.Seq)
					}
				case <-c.stop:
					return
				}
			}
		}()
	}
	return c, nil
}

// nodeID names this rank's node: its host's lowest rank in comm, and the
// cache directory (collective).
func nodeID(comm *mpi.Comm, cache string) (string, error) {
	host, err := comm.SplitShared(0)
	if err != nil {
		return "", err
	}
	low := comm.Rank()
	if err := mpi.BcastValue(host, &low, 0); err != nil {
		return "", err
	}
	return strconv.Itoa(low) + "\x00" + cache, nil
}

// lockCache (collective): the first rank of each node locks the node's
// cache for the job's lifetime, and every rank fails if some node's cache
// is another running job's (layout.LockCache says why sharing is unsafe).
// Holding it, the first rank removes the cache's copies of epochs the
// user removed from the prefix (prefixID changed; stale.go).
func (c *Ckpt) lockCache(prefixID string) error {
	var err error
	if c.leader {
		c.unlock, err = layout.LockCache(c.cfg.Cache)
		if err == nil && prefixID != "" {
			err = c.adoptPrefixID(prefixID)
		}
	}
	bad := []int64{0}
	if err != nil {
		bad[0] = 1
	}
	if rerr := mpi.Allreduce(c.comm, bad, bad, mpi.Max); rerr != nil && err == nil {
		err = rerr
	}
	if err == nil && bad[0] != 0 {
		err = fmt.Errorf("%w on another rank's node (see its error)", layout.ErrCacheInUse)
	}
	if err != nil {
		if c.unlock != nil {
			c.unlock()
			c.unlock = nil
		}
		return fmt.Errorf("ckpt: rank %d: %w", c.comm.Rank(), err)
	}
	return nil
}

// raise records request seq.
func (c *Ckpt) raise(seq int64) {
	for {
		cur := c.reqSeq.Load()
		if seq <= cur || c.reqSeq.CompareAndSwap(cur, seq) {
			return
		}
	}
}

// Request asks for a checkpoint at the next NeedCheckpoint, as SIGUSR1 to
// gompiexec does.
func (c *Ckpt) Request() { c.raise(max(c.reqSeq.Load(), c.handled.Load()) + 1) }

// register adds s. A name registered twice is a programming error that
// Checkpoint, HaveRestart and Restore report, so the Register calls stay
// chainable without an error each.
func (c *Ckpt) register(s section) {
	if c.names[s.name] {
		if c.regErr == nil {
			c.regErr = fmt.Errorf("ckpt: section %q registered twice", s.name)
		}
		return
	}
	c.names[s.name] = true
	c.secs = append(c.secs, s)
}

// Register saves *ptr (ptr must be a pointer) with encoding/gob.
func (c *Ckpt) Register(name string, ptr any) { c.register(gobSection(name, ptr)) }

// RegisterSlice saves *s's elements as raw bytes (the fastest way for
// large numeric state). Restore resizes *s when the saved length differs.
// A slice allocated with cow.Make (see MakeSlice) is saved by a
// copy-on-write snapshot when there is a cache level: Checkpoint does not
// wait for its bytes to be written (docs/ckpt.md, "Snapshots").
func RegisterSlice[T mpi.Number](c *Ckpt, name string, s *[]T) { c.register(rawSection(name, s)) }

// RegisterStream saves state through w and restores it through r.
func (c *Ckpt) RegisterStream(name string, w io.WriterTo, r io.ReaderFrom) {
	c.register(streamSection(name, w, r))
}

// SetStep records the application's step counter in the next manifest
// (shown by gompiexec ckpt list).
func (c *Ckpt) SetStep(step int64) { c.step = step }

// Epoch is the newest epoch this job committed or restored (0: none).
func (c *Ckpt) Epoch() int { return c.next - 1 }

// NeedCheckpoint reports, identically on every rank, whether to checkpoint
// now: the interval elapsed on some rank or a checkpoint was requested.
// It also commits cache epochs whose flush every rank completed.
func (c *Ckpt) NeedCheckpoint() (bool, error) {
	if c.closed {
		return false, errors.New("ckpt: NeedCheckpoint after Close")
	}
	local := c.cfg.Interval > 0 && time.Since(c.last) >= c.cfg.Interval
	need, err := c.sync(opNeed, local, false)
	if err != nil {
		return false, err
	}
	if !need && !c.primed && c.cfg.Cache != "" && !c.closed {
		// The first checkpoint would write into new pages: allocate them
		// now, while the application computes (docs/ckpt.md, "Spare
		// files"). Only the raw slices' size is known beforehand.
		c.primed = true
		var n int64
		for _, s := range c.secs {
			if s.size != nil {
				n += s.size()
			}
		}
		if n > 0 {
			c.queue(flushJob{prealloc: n})
		}
	}
	return need, nil
}

// result is what each rank reports after writing its file.
type result struct {
	Epoch int // commitFlushed's: the epoch File is of
	File  layout.File
	Err   string
	// Deferred: the file is still being written by a snapshot; the
	// epoch is committed once the flush says every rank's is complete.
	Deferred bool
	// NoSpace: Err is the cache directory's ENOSPC or EDQUOT.
	NoSpace bool
	// The sender's flushes (unflushed.go): failed ones not yet
	// reported, and the newest epoch whose flush ended.
	FlushFailed []int
	FlushEnded  int
}

// Checkpoint saves every registered section as a new epoch (collective).
// It returns once the epoch is committed: in the prefix, or with a cache,
// in every node's cache (the flush to the prefix goes on in the
// background).
func (c *Ckpt) Checkpoint() error {
	err := c.checkpoint()
	if err != nil {
		// The interval starts again at a failure too: counted from the
		// last success, NeedCheckpoint said yes at every step after one
		// failure, and a job that logs it and goes on wrote into a full
		// file system at every step (TestIntervalAfterFailedCheckpoint).
		c.last = time.Now()
	}
	return err
}

func (c *Ckpt) checkpoint() error {
	if c.regErr != nil {
		return c.regErr
	}
	if c.closed {
		return errors.New("ckpt: Checkpoint after Close")
	}
	if _, err := c.sync(opCheckpoint, false, true); err != nil {
		return err
	}
	e := c.next
	c.next++
	c.primed = true // from now on each flush leaves a spare
	dir := c.cfg.Prefix
	if c.cfg.Cache != "" {
		dir = c.cfg.Cache
	}
	rank, size := c.comm.Rank(), c.comm.Size()
	res, w, err := c.writeFile(dir, e)
	if err == nil && c.owner != nil {
		// Another job took the prefix over (it judged this one dead):
		// both writing it would mix their epochs.
		err = c.owner.Lost()
	}
	if c.partnerTo >= 0 {
		if perr := c.partnerCopy(e, res.File, err); perr != nil && err == nil {
			err = perr
		}
	}
	if err != nil {
		res.Err = fmt.Sprintf("rank %d: %v", rank, err)
		res.NoSpace = noSpace(err)
	}
	c.flushReport(&res)
	all, err := mpi.AllgatherValue(c.comm, res)
	if err != nil {
		c.abandon(w)
		return err
	}
	c.mergeFlushReports(all, res)
	if c.cacheFull(all) {
		c.abandon(w)
		if res.Err == "" && !res.Deferred {
			os.Remove(layout.RankPath(c.cfg.Cache, e, rank))
		}
		return c.checkpointDirect(e, all)
	}
	m := &layout.Manifest{Epoch: e, Ranks: size, Step: c.step, Time: time.Now().UTC()}
	deferred := false
	for _, r := range all {
		if r.Err != "" {
			c.abandon(w)
			return fmt.Errorf("ckpt: epoch %d not committed: %s", e, r.Err)
		}
		m.Files = append(m.Files, r.File)
		deferred = deferred || r.Deferred
	}
	var commitErr string
	committer := rank == 0
	if c.cfg.Cache != "" {
		committer = c.leader
	}
	if committer && deferred {
		c.deferred[e] = m
		committer = false
	}
	if committer {
		if err := layout.Commit(dir, m); err != nil {
			commitErr = fmt.Sprintf("rank %d: %v", rank, err)
		} else if c.partnerTo >= 0 {
			// The partner copies' own manifest: this node may hold the
			// only surviving copies of another node's files.
			if err := layout.Commit(layout.PartnerDir(c.cfg.Cache), m); err != nil {
				commitErr = fmt.Sprintf("rank %d: %v", rank, err)
			}
		}
	}
	errs, err := mpi.AllgatherValue(c.comm, commitErr)
	if err != nil {
		c.abandon(w)
		return err
	}
	for _, s := range errs {
		if s != "" {
			c.abandon(w)
			return fmt.Errorf("ckpt: epoch %d not committed: %s", e, s)
		}
	}
	c.last = time.Now()
	if c.cfg.Cache == "" {
		if rank == 0 {
			c.prefixCommit = e
			// Said, not returned: the epoch is committed, and an error
			// on rank 0 alone ended the job (or left the others
			// without it) for an old epoch left behind.
			if err := layout.PruneUnreadable(c.cfg.Prefix, c.cfg.Keep, c.unreadable); err != nil {
				fmt.Fprintf(logOut, "ckpt: rank 0: prune %s: %v\n", c.cfg.Prefix, err)
			}
		}
		return nil
	}
	if rank == 0 {
		c.pending[e] = m
	}
	j := flushJob{epoch: e, from: c.cfg.Cache, file: res.File}
	if res.Deferred {
		j.snap, j.w = c.snap, w
	}
	c.queue(j)
	if c.leader {
		c.pruneCache(c.cfg.Cache, true)
		if c.partnerTo >= 0 {
			c.pruneCache(layout.PartnerDir(c.cfg.Cache), false)
		}
	}
	return nil
}

// queue hands j to the background flusher.
func (c *Ckpt) queue(j flushJob) {
	c.queued.Add(1)
	c.flushQ <- j
}

// flusher copies this rank's cache files to the prefix, in epoch order.
func (c *Ckpt) flusher() {
	defer c.flushWG.Done()
	for j := range c.flushQ {
		failed := c.flush(j)
		if j.prealloc == 0 {
			c.flushEnd(j.epoch, failed)
		}
		c.queued.Done()
	}
}

// testFlushGate, when set (by tests), runs before each epoch's flush.
var testFlushGate func()

// flush runs j; failed: its epoch's file did not reach the prefix.
func (c *Ckpt) flush(j flushJob) (failed bool) {
	if testFlushGate != nil && j.prealloc == 0 {
		testFlushGate()
	}
	if j.prealloc > 0 {
		if err := layout.Preallocate(layout.SparePath(c.cfg.Cache, c.comm.Rank()), j.prealloc); err != nil {
			fmt.Fprintf(os.Stderr, "ckpt: rank %d: %v\n", c.comm.Rank(), err)
		}
		return false
	}
	if j.snap != nil {
		// The snapshot's end is this file's end of writing: then it is
		// synced and renamed into place like any other.
		err := j.snap.Wait()
		if err == nil {
			j.file, err = j.w.Close()
		} else {
			j.w.Abort()
		}
		if err != nil {
			if noSpace(err) {
				// From now on space is reserved before each snapshot
				// (not only when the cache looks short of it), so that a
				// full cache sends the next epochs to the prefix.
				c.snapNoSpace.Store(true)
			}
			c.flushFailed(fmt.Errorf("ckpt: rank %d: epoch %d: %w", c.comm.Rank(), j.epoch, err),
				"its snapshot was not written: the epoch is not committed anywhere")
			return true
		}
	}
	var f layout.File
	var err error
	if j.from == c.cfg.Prefix {
		// Restored from a flushed file whose epoch the prefix had not
		// committed yet: already there, only its checksum may be missing.
		f = j.file
		if f.CRC32C == "" {
			f, err = layout.Checksum(j.from, j.epoch, f)
		}
	} else {
		f, err = layout.CopyFile(j.from, c.cfg.Prefix, j.epoch, j.file)
	}
	if err != nil {
		c.flushFailed(fmt.Errorf("ckpt: rank %d: flush epoch %d: %w", j.file.Rank, j.epoch, err),
			"that epoch is only in the node caches: a restart on other nodes cannot use it")
		return true
	}
	c.flushMu.Lock()
	c.flushedFiles[j.epoch] = f
	c.flushMu.Unlock()
	c.flushed.Store(int64(j.epoch))
	if j.from == c.cfg.Prefix {
		return false
	}
	// Until an epoch is retired there is no spare to overwrite: allocate
	// one now, while the application computes, so that the next
	// Checkpoint does not wait for page allocation. A failure only costs
	// that speed.
	if err := layout.Preallocate(layout.SparePath(c.cfg.Cache, c.comm.Rank()), j.file.Size); err != nil {
		fmt.Fprintf(os.Stderr, "ckpt: rank %d: %v\n", c.comm.Rank(), err)
	}
	return false
}

// logOut receives the messages of background failures (tests replace it).
var logOut io.Writer = os.Stderr

// flushFailed records a background flush's failure and says so at once:
// FlushError returned it only from Flush or Close, so a job whose prefix
// was full ran for hours with no epoch reaching it, every one only in the
// node caches, and learned it at the end.
func (c *Ckpt) flushFailed(err error, consequence string) {
	c.flushErr.Store(err)
	fmt.Fprintf(logOut, "%v (%s)\n", err, consequence)
}

// Flush waits until this rank's background flushes are done, then commits
// in the prefix the newest epoch every rank flushed (collective), and
// returns once that commit is done. It returns the flush's (or the
// commit's) error, if any. Without a cache there is nothing to
// wait for. Applications need not call it (NeedCheckpoint, Checkpoint and
// Close commit what has been flushed); it is for a point where the newest
// epoch must be in the prefix, such as before a planned stop.
func (c *Ckpt) Flush() error {
	if c.closed {
		return errors.New("ckpt: Flush after Close")
	}
	c.queued.Wait()
	if _, err := c.sync(opFlush, false, true); err != nil {
		return err
	}
	c.commits.Wait()
	// Every rank returns once rank 0's commit is done.
	if err := c.comm.Barrier(); err != nil {
		return err
	}
	return c.FlushError()
}

// FlushError is the last error of the background flush, if any, or of
// the commit in the prefix of a flushed epoch when no later commit
// succeeded.
func (c *Ckpt) FlushError() error {
	if err, _ := c.flushErr.Load().(error); err != nil {
		return err
	}
	if p := c.commitErr.Load(); p != nil {
		return *p
	}
	return nil
}

// Close waits for the background flush and commits the newest flushed
// epoch in the prefix (collective).
func (c *Ckpt) Close() error {
	if c.closed {
		return nil
	}
	c.closed = true
	close(c.stop)
	if c.unlock != nil {
		defer c.unlock()
	}
	if c.owner != nil {
		defer c.owner.Release()
	}
	if c.flushQ != nil {
		close(c.flushQ)
		c.flushWG.Wait()
		_, err := c.sync(opClose, false, true)
		if c.commitQ != nil {
			close(c.commitQ)
			c.commitWG.Wait()
		}
		if err != nil {
			return err
		}
		// The spare serves only a next checkpoint: give its memory back
		// (after the reduction: this node's first rank may still have
		// been retiring an epoch into it).
		os.Remove(layout.SparePath(c.cfg.Cache, c.comm.Rank()))
		// Collective first, on every rank: a rank whose flush failed
		// returned before it, and the others' Close failed waiting.
		perr := c.pruneAtClose()
		if err := c.FlushError(); err != nil {
			return err
		}
		return perr
	}
	// Nothing to commit, but Close is collective all the same: a rank
	// closing while the others checkpoint is said on every rank.
	_, err := c.sync(opClose, false, false)
	return err
}
