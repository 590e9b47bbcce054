// Package mpiio is MPI-IO for gompi's Go ranks: one shared file read and
// written by every rank of a communicator, through file views, with
// independent, collective and asynchronous operations. It is built only on
// package mpi's public API.
//
// Model. Open is collective over a communicator; each rank holds its own
// descriptor of the file. A view (SetView: displacement, etype, filetype)
// says which bytes of the file a rank sees: copies of the filetype tile
// the file from the displacement on, and a rank's data stream is the
// concatenation of the filetype's blocks, tile after tile. Offsets of
// ReadAt/WriteAt and friends count etypes in that stream. The default view
// is the whole file as bytes. Read, Write, Seek and friends work at the
// rank's individual file pointer, ReadShared, WriteShared, ReadOrdered and
// friends at the file's shared pointer, which rank 0 keeps and hands out
// over messages (docs/io.md, "File pointers").
//
// Independent operations (ReadAt, WriteAt, IreadAt, IwriteAt) touch only
// the caller's bytes; many small strided pieces are read and written
// through data sieving (one large read, or a locked read-modify-write).
// Collective operations (ReadAtAll, WriteAtAll) are called by every rank of
// the communicator; they run two-phase I/O: aggregators (hint cb_nodes,
// default one per host) own disjoint file domains aligned to the file
// system block or stripe size (hint striping_unit), receive every rank's
// pieces of their domain over the runtime and issue large contiguous
// pread/pwrite calls, cb_buffer_size bytes per round, overlapping the next
// round's exchange with this round's I/O. Reads run the plan backwards.
//
// Consistency (docs/io.md): when a collective write returns, the bytes are
// on the file system (aggregators fsync) and every rank has returned from
// it; a rank that then opens the file, or calls Sync, reads them, also on
// a caching client (Open and Sync drop the rank's cached pages, except on
// local file systems, whose page cache is coherent). Because
// domains are block-aligned, two hosts never write one file-system block
// in one collective call. SetAtomicity(true) makes overlapping
// independent writes atomic with byte-range locks.
//
// With the hint gompi_cache_dir, writes go to a node-local cache directory
// first, with a journal, and a background flusher writes them to the shared
// file; Sync and Close wait for it, and after a crash the next Open (or
// journal.Replay) writes what was acknowledged but not flushed. With a
// cache on every rank, each rank caches its own pieces of its host's
// domains (no exchange): a rank reads its own cached writes at once,
// other ranks' after Sync. With gompi_cache_snapshot=enable, a large
// cached write returns after a fork: a copy-on-write snapshot process
// (runtime/cow) writes it into the cache and journals it, and finishes
// even if the rank is killed (docs/io.md, "Snapshot writes").
//
// Errors are values: *Error names the operation, the file, the rank and
// the file offset; hint errors are *HintError. Nothing here exits the
// process.
package mpiio

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	mpi "github.com/gompi/gompi/runtime"
)

// Mode is a set of Open flags (MPI_MODE_*).
type Mode int

const (
	ModeRdonly Mode = 1 << iota // read only
	ModeWronly                  // write only
	ModeRdwr                    // read and write
	ModeCreate                  // create the file if it does not exist
	ModeExcl                    // with ModeCreate: fail if it exists
	// ModeDeleteOnClose removes the file when the last rank closes it.
	ModeDeleteOnClose
	// ModeUniqueOpen promises that no other program opens the file at
	// the same time (MPI_MODE_UNIQUE_OPEN). Accepted; nothing here
	// depends on other openers, so it changes nothing.
	ModeUniqueOpen
	// ModeAppend starts both file pointers at the end of the file
	// (MPI_MODE_APPEND), in bytes of the default view; SetView resets
	// them to 0, as always. Writes at explicit offsets go where they say.
	ModeAppend

	modeAll = ModeAppend<<1 - 1
)

func (m Mode) String() string {
	var parts []string
	for _, f := range []struct {
		m Mode
		s string
	}{{ModeRdonly, "rdonly"}, {ModeWronly, "wronly"}, {ModeRdwr, "rdwr"}, {ModeCreate, "create"}, {ModeExcl, "excl"}, {ModeDeleteOnClose, "delete_on_close"}, {ModeUniqueOpen, "unique_open"}, {ModeAppend, "append"}} {
		if m&f.m != 0 {
			parts = append(parts, f.s)
		}
	}
	if rest := m &^ modeAll; rest != 0 {
		parts = append(parts, fmt.Sprintf("%#x", int(rest)))
	}
	return strings.Join(parts, "|")
}

// Errors, usable with errors.Is.
var (
	// ErrMode: bad or inconsistent Open flags, or an operation the open
	// mode does not allow.
	ErrMode = errors.New("mpiio: bad access mode")
	// ErrClosed: the file was closed.
	ErrClosed = errors.New("mpiio: file closed")
	// ErrView: a filetype or etype that cannot be a view.
	ErrView = errors.New("mpiio: invalid view")
	// ErrRemote: the operation failed on another rank (the *Error's Rank).
	ErrRemote = errors.New("failed on another rank")
)

// Error reports a failed operation: which, on what file, on which rank
// (-1: none, as for Delete), at which file offset (-1 when none applies),
// and why.
type Error struct {
	Op   string
	Path string
	Rank int
	Off  int64
	Err  error
}

func (e *Error) Error() string {
	if e.Rank < 0 { // not a rank's operation (Delete)
		return fmt.Sprintf("mpiio: %s %s: %v", e.Op, e.Path, e.Err)
	}
	if e.Off >= 0 {
		return fmt.Sprintf("mpiio: %s %s: rank %d, offset %d: %v", e.Op, e.Path, e.Rank, e.Off, e.Err)
	}
	return fmt.Sprintf("mpiio: %s %s: rank %d: %v", e.Op, e.Path, e.Rank, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// File is a file opened collectively by the ranks of a communicator.
// Independent operations are safe from several goroutines; collective
// ones must be called by every rank in the same order, one at a time.
type File struct {
	ctx   context.Context
	comm  *mpi.Comm // a duplicate of the caller's, for the file's traffic
	rank  int
	path  string
	mode  Mode
	fd    *os.File
	hints config
	aggs  []int // aggregator ranks, in file-domain order
	// hostOf numbers every rank's host; oneHost: all ranks on one.
	hostOf  []int
	oneHost bool

	mu     sync.RWMutex // view and atomicity against independent operations
	view   *view
	views  []*view // every rank's view (collective operations)
	atomic bool
	// sameView: every rank has the same view (shared file pointer calls
	// need it).
	sameView bool

	ptrMu  sync.Mutex // the individual file pointer (pointer.go)
	ptr    int64      // in etypes of the view
	shared *sharedPtr // the shared file pointer (shared.go)

	cache *cache // node-local write-back cache, nil without one
	// allCached: every rank has a cache, so collective writes cache each
	// rank's pieces on its own host (see cachedLocal).
	allCached bool
	// anyCached: some rank has a cache, whose writes collective reads
	// must drain first (the data may be read by another aggregator).
	anyCached bool
	// anySieve: some rank may sieve independent writes (read-modify-write
	// of a span under a lock), so every rank's writes of pieces lock them.
	anySieve bool
	// closed: Close has run. ioMu is held shared by every data access
	// and Size for their duration, and exclusively by Close while it
	// tears down: Close waits for outstanding requests (a pending
	// IwriteAt used the descriptor after it was closed).
	closed atomic.Bool
	ioMu   sync.RWMutex
	noRead bool // write-only descriptor: no read-modify-write
	// created: this Open created the file, so a cache journal of its
	// path is of a removed file (staleJournal).
	created bool

	bufMu sync.Mutex
	cbufs [2][]byte // an aggregator's round buffers

	// collTail is closed when the last collective access started is done
	// (collorder.go); nil before the first.
	collMu   sync.Mutex
	collTail chan struct{}
}

func (f *File) err(op string, off int64, err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	return &Error{Op: op, Path: f.path, Rank: f.rank, Off: off, Err: err}
}

// agree is the collective end of an operation: every rank learns whether
// any rank failed. A rank that failed gets its own error; the others an
// *Error naming the first failed rank and wrapping ErrRemote and the
// failed rank's error class (remote.go).
func (f *File) agree(op string, err error) error {
	return agree(f.comm, f.path, op, err)
}

func agree(comm *mpi.Comm, path, op string, err error) error {
	return agreeMax(comm, path, op, err, nil)
}

// agreeMax is agree that also reduces vals (by Max, in place) in the same
// Allreduce: one collective step where there were two. vals are reduced
// even when a rank failed.
func agreeMax(comm *mpi.Comm, path, op string, err error, vals []int64) error {
	// One small Allreduce finds the first failed rank (the largest of
	// -rank), if any; only then does its message travel. (Gathering every
	// rank's message each time cost a value-encoded Allgather per step: a
	// few ms of Open and SetView with more ranks than cores.)
	if testAgree != nil {
		testAgree(op, comm.Rank())
	}
	buf := make([]int64, 1+len(vals))
	buf[0] = -int64(comm.Size())
	if err != nil {
		buf[0] = -int64(comm.Rank())
	}
	copy(buf[1:], vals)
	if gerr := mpi.Allreduce(comm, buf, buf, mpi.Max); gerr != nil {
		if err != nil {
			return err
		}
		return &Error{Op: op, Path: path, Rank: comm.Rank(), Off: -1, Err: gerr}
	}
	copy(vals, buf[1:])
	r := int(-buf[0])
	if r == comm.Size() {
		return nil
	}
	msg := ""
	if err != nil {
		msg = remoteMsg(path, err)
	}
	if gerr := mpi.BcastValue(comm, &msg, r); gerr != nil && err == nil {
		return &Error{Op: op, Path: path, Rank: comm.Rank(), Off: -1, Err: gerr}
	}
	if err != nil {
		return err
	}
	return &Error{Op: op, Path: path, Rank: r, Off: -1, Err: newRemoteError(msg)}
}

// Open opens path on every rank of comm (collective). Every rank must pass
// the same mode and the same collective-buffering hints (checked: a
// *HintError); sieving and cache hints may differ per rank.
// Exactly one of ModeRdonly, ModeWronly, ModeRdwr is required; ModeCreate
// and ModeExcl need write access... as in MPI, ModeRdonly with ModeCreate
// or ModeExcl is an error. ctx bounds the operations' waits for other
// ranks.
func Open(ctx context.Context, comm *mpi.Comm, path string, mode Mode, hints Hints) (*File, error) {
	rank := comm.Rank()
	fail := func(err error) (*File, error) {
		return nil, &Error{Op: "open", Path: path, Rank: rank, Off: -1, Err: err}
	}
	if ctx == nil {
		ctx = context.Background()
	}
	if ctx.Done() != nil {
		// ctx bounds every collective step (Open's own, and the file's
		// through f.comm below), not only two-phase's messages: a rank
		// that never calls a collective the others are in must not leave
		// them waiting past the caller's deadline.
		comm = comm.WithContext(ctx)
	}
	cfg, herr := parseHints(hints)
	var lerr error
	if herr != nil {
		lerr = herr
	} else {
		lerr = checkMode(mode)
	}
	// A rank's own failure is an *Error too (naming the file and rank).
	wrap := func(err error) error {
		var e *Error
		if err == nil || errors.As(err, &e) {
			return err
		}
		return &Error{Op: "open", Path: path, Rank: rank, Off: -1, Err: err}
	}
	// The same mode everywhere: max(mode) == -max(-mode), found in the
	// agreement on the hints. Only when not are the modes gathered, to
	// name a rank that differs.
	// The hints collective plans depend on likewise, in the same step.
	mm := []int64{int64(mode), -int64(mode)}
	for _, x := range cfg.planValues() {
		mm = append(mm, x, -x)
	}
	if err := agreeMax(comm, path, "open", wrap(lerr), mm); err != nil {
		return nil, err
	}
	for i, k := range planKeys {
		// Every rank sees the same reduced values: all fail alike.
		if hi, lo := mm[2+2*i], -mm[3+2*i]; hi != lo {
			return fail(&HintError{k, hints[k], fmt.Errorf("%w: ranks passed different values (%s and %s; every rank must pass the same)", mpi.ErrArg, planValue(i, lo), planValue(i, hi))})
		}
	}
	if mm[0] != -mm[1] {
		modes, err := mpi.AllgatherValue(comm, int(mode))
		if err != nil {
			return fail(err)
		}
		for r, m := range modes {
			if m != int(mode) && lerr == nil {
				lerr = fmt.Errorf("%w: rank %d opened with %v, rank %d with %v", ErrMode, r, Mode(m), rank, mode)
			}
		}
		if err := agree(comm, path, "open", wrap(lerr)); err != nil {
			return nil, err
		}
	}
	dup, err := comm.Dup()
	if err != nil {
		return fail(err)
	}
	// The shared file pointer's own communicator: rank 0's service waits
	// on it for the file's lifetime, unbounded by ctx (its clients' waits
	// are bounded).
	spComm, err := comm.Dup()
	if err != nil {
		return fail(err)
	}
	if ctx.Done() != nil {
		dup = dup.WithContext(ctx) // a Dup does not keep the view's context
	}
	f := &File{ctx: ctx, comm: dup, rank: rank, path: path, mode: mode, hints: cfg, sameView: true}
	// Write-only files are opened read-write when permissions allow, so
	// that sieving and two-phase writes can read-modify-write; else those
	// are off (f.noRead).
	flags := os.O_RDWR
	if mode&ModeRdonly != 0 {
		flags = os.O_RDONLY
	}
	// Rank 0 creates; the others open what it made (as ROMIO), so
	// exclusive creation fails or succeeds once.
	if rank == 0 {
		cflags := flags
		if mode&ModeCreate != 0 {
			cflags |= os.O_CREATE
		}
		if mode&ModeExcl != 0 {
			cflags |= os.O_EXCL
		}
		if mode&ModeCreate != 0 && mode&ModeExcl == 0 {
			// Exclusive first, to learn whether the file is new.
			f.fd, lerr = os.OpenFile(path, cflags|os.O_EXCL, 0o666)
			f.created = lerr == nil
			if errors.Is(lerr, os.ErrExist) {
				f.fd, lerr = os.OpenFile(path, cflags, 0o666)
			}
		} else {
			f.fd, lerr = os.OpenFile(path, cflags, 0o666)
			// O_EXCL creates nothing without O_CREAT (it then opens an
			// existing file, as ROMIO's open does).
			f.created = lerr == nil && mode&ModeExcl != 0 && mode&ModeCreate != 0
		}
		if errors.Is(lerr, os.ErrPermission) && mode&ModeWronly != 0 {
			f.fd, lerr = os.OpenFile(path, cflags&^os.O_RDWR|os.O_WRONLY, 0o666)
			f.noRead = true
		}
	}
	cr := []int64{0}
	if f.created {
		cr[0] = 1
	}
	if err := agreeMax(f.comm, path, "open", wrap(lerr), cr); err != nil {
		if f.fd != nil {
			f.fd.Close()
		}
		return nil, err
	}
	f.created = cr[0] == 1
	if rank != 0 {
		f.fd, lerr = os.OpenFile(path, flags, 0)
		if errors.Is(lerr, os.ErrPermission) && mode&ModeWronly != 0 {
			f.fd, lerr = os.OpenFile(path, os.O_WRONLY, 0)
			f.noRead = true
		}
	}
	if f.noRead {
		f.hints.dsWrite = disable
	}
	if lerr == nil {
		dropCache(f.fd)
		lerr = f.setup()
	}
	// Cache hints may differ per rank; collective writes cache on the
	// ranks themselves only when every rank has a cache: max(-cached) is
	// -1, agreed with the errors.
	// nc[1]: with ModeAppend, where the pointers start: the file's size
	// as rank 0 sees it (after any journal replay), so every rank starts
	// at the same place.
	// nc[2]: the alignment of collective plans, which every rank computes
	// alike only from the same value: the file system's block size as
	// statfs tells each host may differ (an NFS client reports its wsize,
	// the exporting host its disk's block), so take the largest, a
	// multiple of the others for the usual powers of two.
	// nc[3]: 1 when some rank has a cache; nc[4]: 1 when some rank may
	// sieve independent writes.
	nc := []int64{0, 0, f.hints.stripe, 0, 0}
	if f.cache != nil {
		nc[0], nc[3] = -1, 1
	}
	if f.hints.dsWrite != disable {
		nc[4] = 1
	}
	if lerr == nil && rank == 0 && mode&ModeAppend != 0 {
		nc[1], lerr = f.Size()
	}
	if err := agreeMax(f.comm, path, "open", wrap(lerr), nc); err != nil {
		if f.fd != nil {
			f.fd.Close()
		}
		if f.cache != nil {
			f.cache.close()
		}
		return nil, err
	}
	f.allCached, f.anyCached, f.anySieve = nc[0] == -1, nc[3] == 1, nc[4] == 1
	if f.cache != nil {
		f.cache.lock.Store(f.anySieve)
	}
	f.hints.stripe = nc[2]
	f.oneHost = !slices.ContainsFunc(f.hostOf, func(h int) bool { return h != 0 })
	f.ptr = nc[1]
	f.shared = newSharedPtr(ctx, spComm, nc[1])
	return f, nil
}

func checkMode(m Mode) error {
	n := 0
	for _, a := range []Mode{ModeRdonly, ModeWronly, ModeRdwr} {
		if m&a != 0 {
			n++
		}
	}
	switch {
	case n != 1:
		return fmt.Errorf("%w: %v: need exactly one of rdonly, wronly, rdwr", ErrMode, m)
	case m&ModeRdonly != 0 && m&(ModeCreate|ModeExcl) != 0:
		return fmt.Errorf("%w: %v: create or excl with rdonly", ErrMode, m)
	case m&^modeAll != 0:
		return fmt.Errorf("%w: %v: unknown flags", ErrMode, m)
	}
	return nil
}

// setup (every rank, after opening) picks the aggregators, the default
// view and the cache.
func (f *File) setup() error {
	if f.hints.stripe == 0 {
		f.hints.stripe = blockSize(f.fd)
		if testBlockSize != nil {
			f.hints.stripe = testBlockSize(f.rank)
		}
	}
	if nodeLocalLocks(f.fd) {
		// A sieving read-modify-write is only safe under a lock every
		// host honours: without one, two hosts' windows undo each other's
		// bytes. Write the pieces themselves instead (FUSE writes through
		// byte-exact, so disjoint pieces never collide).
		f.hints.dsWrite = disable
	}
	aggs, hostOf, err := chooseAggregators(f.comm, f.hints.cbNodes)
	if err != nil {
		return err
	}
	f.aggs, f.hostOf = aggs, hostOf
	f.view = byteView(0)
	f.views = make([]*view, f.comm.Size())
	for i := range f.views {
		f.views[i] = f.view
	}
	if f.hints.cacheDir != "" {
		if err := replayOrphans(f); err != nil {
			return err
		}
	}
	if f.hints.cacheDir != "" && f.mode&ModeRdonly == 0 {
		c, err := openCache(f)
		if err != nil {
			return err
		}
		f.cache = c
	} else if f.hints.cacheDir != "" {
		// A read-only file keeps no cache, but must not read around
		// writes a crashed run acknowledged: replay its journal first.
		return replayOnly(f)
	}
	return nil
}

// blockSize is the file system's preferred I/O size, at least a page.
func blockSize(fd *os.File) int64 {
	var st unix.Statfs_t
	bs := int64(os.Getpagesize())
	if unix.Fstatfs(int(fd.Fd()), &st) == nil && st.Bsize > bs && st.Bsize <= 64<<20 {
		bs = st.Bsize
	}
	return bs
}

// fuseMagic is FUSE_SUPER_MAGIC, statfs's type of every FUSE mount.
const fuseMagic = 0x65735546

// nodeLocalLocks reports whether byte-range locks on fd may bind only the
// processes of this host: on FUSE (sshfs among others) the kernel keeps
// the locks itself unless the daemon implements them, and none of the
// common ones do across clients.
func nodeLocalLocks(fd *os.File) bool {
	var st unix.Statfs_t
	return unix.Fstatfs(int(fd.Fd()), &st) == nil && int64(st.Type) == fuseMagic
}

// dropCache asks the kernel to forget this file's cached pages, so the
// next reads go to the file system (a caching client's pages may be
// stale). On a local file system the page cache is the file system's own
// view, coherent for every process of the host: dropping it would only
// make the next reads go to the disk.
func dropCache(fd *os.File) {
	var st unix.Statfs_t
	if unix.Fstatfs(int(fd.Fd()), &st) == nil && coherentFS(int64(st.Type)) {
		return
	}
	_ = unix.Fadvise(int(fd.Fd()), 0, 0, unix.FADV_DONTNEED)
}

// coherentFS: statfs types of local file systems, whose page cache is the
// only cache of their files (anything else, FUSE, NFS, CIFS, Ceph, Lustre,
// GPFS, 9p or unknown, may have clients with stale pages).
func coherentFS(typ int64) bool {
	switch typ {
	case unix.EXT4_SUPER_MAGIC, // also ext2 and ext3
		unix.XFS_SUPER_MAGIC,
		unix.BTRFS_SUPER_MAGIC,
		unix.TMPFS_MAGIC,
		unix.F2FS_SUPER_MAGIC,
		unix.OVERLAYFS_SUPER_MAGIC, // over a local upper layer (containers)
		0x2fc12fc1:                 // ZFS
		return true
	}
	return false
}

// Comm is the communicator the file was opened on (a duplicate).
func (f *File) Comm() *mpi.Comm { return f.comm }

// Path is the file's name as given to Open.
func (f *File) Path() string { return f.path }

// Mode is the mode the file was opened with.
func (f *File) Mode() Mode { return f.mode }

// Hints returns the hints in effect, by ROMIO's names.
func (f *File) Hints() Hints { return f.hints.effective(len(f.aggs)) }

// Aggregators returns the ranks that do collective buffering's I/O, in
// file-domain order.
func (f *File) Aggregators() []int { return append([]int(nil), f.aggs...) }

// using holds off Close for an access; ErrClosed once it has run.
func (f *File) using(op string) (release func(), err error) {
	f.ioMu.RLock()
	if f.closed.Load() {
		f.ioMu.RUnlock()
		return nil, f.err(op, -1, ErrClosed)
	}
	return f.ioMu.RUnlock, nil
}

func (f *File) check(op string, write bool) error {
	if f.closed.Load() {
		return f.err(op, -1, ErrClosed)
	}
	if write && f.mode&ModeRdonly != 0 {
		return f.err(op, -1, fmt.Errorf("%w: file opened read-only", ErrMode))
	}
	if !write && f.mode&ModeWronly != 0 {
		return f.err(op, -1, fmt.Errorf("%w: file opened write-only", ErrMode))
	}
	return nil
}

// Sync (collective) makes every rank's writes durable and visible: after
// it returns, every rank reads what any rank wrote before it (MPI's
// sync-barrier-sync, done in one call). With a cache it waits for the
// flusher first.
func (f *File) Sync() error {
	prev, done := f.turn() // after the collective accesses started before (collorder.go)
	defer done()
	<-prev
	if f.closed.Load() {
		return f.err("sync", -1, ErrClosed)
	}
	var err error
	if f.cache != nil {
		err = f.cache.drain()
	}
	if err == nil && f.mode&ModeRdonly == 0 {
		err = f.fd.Sync()
	}
	if err := f.agree("sync", f.err("sync", -1, err)); err != nil {
		return err
	}
	dropCache(f.fd)
	return nil
}

// Size is the file's current size in bytes.
func (f *File) Size() (int64, error) {
	release, err := f.using("size")
	if err != nil {
		return 0, err
	}
	defer release()
	if f.cache != nil {
		if sz, ok := f.cache.size(); ok {
			return sz, nil
		}
	}
	st, err := f.fd.Stat()
	if err != nil {
		return 0, f.err("size", -1, err)
	}
	return st.Size(), nil
}

// SetSize (collective) truncates or extends the file to size bytes.
func (f *File) SetSize(size int64) error {
	prev, done := f.turn() // after the collective accesses started before (collorder.go)
	defer done()
	<-prev
	if err := f.check("set size", true); err != nil {
		return err
	}
	var err error
	if size < 0 {
		err = fmt.Errorf("%w: negative size %d", mpi.ErrArg, size)
	} else if f.cache != nil {
		err = f.cache.drain()
	}
	// Every rank's cached writes are on the file before rank 0 cuts it: a
	// flush after the truncation would extend the file again with bytes
	// written before SetSize. (Cache hints may differ per rank, so every
	// rank agrees; SetSize is rare.) The same step checks that every rank
	// passed the same size, as MPI requires (else rank 0's won silently).
	sz := []int64{size, -size}
	if err := agreeMax(f.comm, f.path, "set size", f.err("set size", size, err), sz); err != nil {
		return err
	}
	if sz[0] != -sz[1] {
		// Every rank sees the same reduced values: all return this.
		return f.err("set size", size, fmt.Errorf("%w: ranks passed different sizes (%d to %d)", mpi.ErrArg, -sz[1], sz[0]))
	}
	if err == nil && f.rank == 0 {
		err = f.fd.Truncate(size)
		if err == nil {
			err = f.fd.Sync()
		}
	}
	if err := f.agree("set size", f.err("set size", size, err)); err != nil {
		return err
	}
	dropCache(f.fd)
	return nil
}

// Preallocate (collective) reserves storage for the first size bytes,
// extending the file if it is shorter.
func (f *File) Preallocate(size int64) error {
	prev, done := f.turn() // after the collective accesses started before (collorder.go)
	defer done()
	<-prev
	if err := f.check("preallocate", true); err != nil {
		return err
	}
	var err error
	if size < 0 {
		err = fmt.Errorf("%w: negative size %d", mpi.ErrArg, size)
	} else if f.rank == 0 && size > 0 {
		err = unix.Fallocate(int(f.fd.Fd()), 0, 0, size)
		if errors.Is(err, unix.EOPNOTSUPP) {
			// File systems without fallocate (FUSE): extend instead.
			var st os.FileInfo
			if st, err = f.fd.Stat(); err == nil && st.Size() < size {
				err = f.fd.Truncate(size)
			}
		}
	}
	return f.agree("preallocate", f.err("preallocate", size, err))
}

// Close (collective) flushes the cache, closes every rank's descriptor
// and, with ModeDeleteOnClose, removes the file.
func (f *File) Close() error {
	prev, done := f.turn() // after the collective accesses started before (collorder.go)
	defer done()
	<-prev
	if f.closed.Load() {
		return f.err("close", -1, ErrClosed)
	}
	f.ioMu.Lock() // after the rank's outstanding accesses
	if f.closed.Load() {
		f.ioMu.Unlock()
		return f.err("close", -1, ErrClosed)
	}
	var err error
	if f.cache != nil {
		err = f.cache.drain()
		if cerr := f.cache.close(); err == nil {
			err = cerr
		}
	}
	if err == nil && f.mode&ModeRdonly == 0 && f.hints.syncWrite {
		err = f.fd.Sync()
	}
	if cerr := f.fd.Close(); err == nil {
		err = cerr
	}
	f.closed.Store(true)
	f.ioMu.Unlock()
	err = f.agree("close", f.err("close", -1, err))
	// Every rank is past its last shared-pointer claim: stop rank 0's
	// service (and free its communicator if every rank got here).
	if serr := f.shared.stop(err == nil); err == nil && serr != nil {
		err = f.err("close", -1, serr)
	}
	if f.mode&ModeDeleteOnClose != 0 {
		var derr error
		if f.rank == 0 {
			derr = os.Remove(f.path)
		}
		if aerr := agree(f.comm, f.path, "delete on close", derr); err == nil {
			err = aerr
		}
	}
	return err
}

// testBlockSize, when set (by tests), is rank r's file system block size
// (statfs's), so that one process can play hosts that see different ones.
var testBlockSize func(rank int) int64

// testAgree, when set (by tests), runs as a rank enters an agreement.
var testAgree func(op string, rank int)

// Delete removes a file (not collective, as MPI_File_delete).
func Delete(path string) error {
	if err := os.Remove(path); err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) { // the path once
			err = pe.Err
		}
		return &Error{Op: "delete", Path: path, Rank: -1, Off: -1, Err: err}
	}
	return nil
}

// SetAtomicity (collective) turns atomic mode on or off. In atomic mode an
// independent write locks the byte range it spans for its duration (an
// open-file-description lock, so ranks in one process exclude each other
// too), and a read takes a shared lock: overlapping independent accesses
// are serialized. Collective writes are atomic anyway (disjoint domains).
func (f *File) SetAtomicity(on bool) error {
	prev, done := f.turn() // after the collective accesses started before (collorder.go)
	defer done()
	<-prev
	if f.closed.Load() {
		return f.err("set atomicity", -1, ErrClosed)
	}
	all, err := mpi.AllgatherValue(f.comm, on)
	var lerr error
	if err != nil {
		lerr = err
	}
	for r, v := range all {
		if v != on && lerr == nil {
			lerr = fmt.Errorf("%w: rank %d passed %v, rank %d %v", mpi.ErrArg, r, v, f.rank, on)
		}
	}
	if lerr == nil && on && f.cache != nil {
		// Atomic writes go to the file (see writeAt): every rank's
		// cached ones first, so none lands over a later atomic write.
		lerr = f.cache.drain()
	}
	if err := f.agree("set atomicity", f.err("set atomicity", -1, lerr)); err != nil {
		return err
	}
	f.mu.Lock()
	f.atomic = on
	f.mu.Unlock()
	return nil
}

// Atomicity reports whether atomic mode is on.
func (f *File) Atomicity() bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.atomic
}
