//go:build linux

package shm

// Making and attaching the channel file: creation by the lower rank, opening
// by the higher, the header checks and the handshake through its state word.
// The layout is in chan_linux.go and docs/shm.md.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Connect sets up the channel between ranks self and peer of a job, blocking
// until both have mapped the file (or ctx ends). The lower rank creates and
// initialises the file, the higher one waits for it; once both have mapped it
// it is unlinked, so nothing is left behind even if both then crash.
func Connect(ctx context.Context, jobID string, self, peer int, opt *Options) (*Chan, error) {
	if err := checkJobID(jobID); err != nil {
		return nil, err
	}
	if self == peer || self < 0 || peer < 0 {
		return nil, fmt.Errorf("shm: invalid rank pair %d, %d", self, peer)
	}
	o, err := opt.withDefaults()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(o.Dir, Name(jobID, self, peer))
	if self < peer {
		return create(ctx, path, o)
	}
	return open(ctx, path, o)
}

func create(ctx context.Context, path string, o Options) (*Chan, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		if errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("shm: %s exists (stale file of a crashed job? see Sweep): %w", path, err)
		}
		return nil, &os.PathError{Op: "create", Path: path, Err: err}
	}
	size := hdrSize + 2*o.RingSize
	mem, err := func() ([]byte, error) {
		defer unix.Close(fd)
		if err := unix.Ftruncate(fd, int64(size)); err != nil {
			return nil, &os.PathError{Op: "truncate", Path: path, Err: err}
		}
		return unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	}()
	if err != nil {
		unix.Unlink(path)
		return nil, err
	}
	fail := func(err error) (*Chan, error) {
		unix.Unlink(path)
		unix.Munmap(mem)
		return nil, err
	}
	u64(mem, offMagic).Store(fileMagic)
	u32(mem, offVersion).Store(fileVersion)
	u64(mem, offRingSize).Store(uint64(o.RingSize))
	writeIdentity(mem, 0)
	state := u32(mem, offState)
	state.Store(stateReady) // last: the opener validates nothing before this
	futexWake(unsafe.Pointer(state))

	for state.Load() != stateAttached {
		err := waitCtx(ctx, state, stateReady, o.Poll)
		if err == nil && o.Alive != nil {
			if err = o.Alive(); err != nil {
				err = fmt.Errorf("%w: %w", ErrPeerDead, err)
			}
		}
		// Give up only if the peer has not attached meanwhile; the CAS
		// stops it from attaching to a file that is going away.
		if err != nil && state.CompareAndSwap(stateReady, stateAbandoned) {
			return fail(fmt.Errorf("shm: waiting for the peer to open %s: %w", path, err))
		}
	}
	// The opener unlinks too; whichever comes second gets ENOENT.
	unix.Unlink(path)
	return newChan(mem, 0, o)
}

func open(ctx context.Context, path string, o Options) (*Chan, error) {
	var fd int
	var err error
	backoff := 200 * time.Microsecond
	var waited time.Duration
	for {
		fd, err = unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err == nil {
			var st unix.Stat_t
			if err = unix.Fstat(fd, &st); err != nil {
				unix.Close(fd)
				return nil, &os.PathError{Op: "stat", Path: path, Err: err}
			}
			if st.Size >= hdrSize {
				break
			}
			unix.Close(fd) // the creator has not sized it yet
		} else if !errors.Is(err, unix.ENOENT) {
			return nil, &os.PathError{Op: "open", Path: path, Err: err}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("shm: waiting for %s: %w", path, ctx.Err())
		case <-time.After(backoff):
		}
		if waited += backoff; waited >= o.Poll && o.Alive != nil {
			waited = 0
			if err := o.Alive(); err != nil {
				return nil, fmt.Errorf("shm: waiting for %s: %w: %w", path, ErrPeerDead, err)
			}
		}
		backoff = min(2*backoff, 10*time.Millisecond)
	}
	defer unix.Close(fd)
	hdr, err := unix.Mmap(fd, 0, hdrSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, &os.PathError{Op: "mmap", Path: path, Err: err}
	}
	defer unix.Munmap(hdr)
	state := u32(hdr, offState)
	for state.Load() == stateInit {
		if err := waitCtx(ctx, state, stateInit, o.Poll); err != nil {
			return nil, fmt.Errorf("shm: waiting for %s to be initialised: %w", path, err)
		}
	}
	rs, err := checkHeader(hdr)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, path)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	size := hdrSize + 2*int(rs)
	if st.Size != int64(size) {
		return nil, fmt.Errorf("%w: %s is %d bytes, header says %d", ErrCorrupt, path, st.Size, size)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, &os.PathError{Op: "mmap", Path: path, Err: err}
	}
	o.RingSize = int(rs)
	c, err := attach(mem, o)
	if err != nil {
		unix.Munmap(mem)
		return nil, fmt.Errorf("%w (%s)", err, path)
	}
	unix.Unlink(path) // both sides have it mapped now
	return c, nil
}

// checkHeader validates a header page; the opener trusts nothing in it.
func checkHeader(mem []byte) (ringSize uint64, err error) {
	if len(mem) < hdrSize {
		return 0, fmt.Errorf("%w: short header", ErrCorrupt)
	}
	if s := u32(mem, offState).Load(); s != stateReady {
		return 0, stateErr(s)
	}
	if m := u64(mem, offMagic).Load(); m != fileMagic {
		return 0, fmt.Errorf("%w: bad magic %#x", ErrCorrupt, m)
	}
	if v := u32(mem, offVersion).Load(); v != fileVersion {
		return 0, fmt.Errorf("%w: version %d, want %d", ErrCorrupt, v, fileVersion)
	}
	rs := u64(mem, offRingSize).Load()
	if rs < MinRingSize || rs > MaxRingSize || rs&(rs-1) != 0 || rs > uint64(maxInt-hdrSize)/2 {
		return 0, fmt.Errorf("%w: ring size %d", ErrCorrupt, rs)
	}
	return rs, nil
}

func stateErr(s uint32) error {
	switch s {
	case stateAttached:
		return fmt.Errorf("%w: already attached by another process", ErrCorrupt)
	case stateAbandoned:
		return fmt.Errorf("%w: the creator gave up waiting for us", ErrClosed)
	}
	return fmt.Errorf("%w: bad state %d", ErrCorrupt, s)
}

// attach is the opener's side of the handshake on a mapping of the whole file.
func attach(mem []byte, o Options) (*Chan, error) {
	rs, err := checkHeader(mem)
	if err != nil {
		return nil, err
	}
	if uint64(len(mem)) != hdrSize+2*rs {
		return nil, fmt.Errorf("%w: mapping is %d bytes, header says %d", ErrCorrupt, len(mem), hdrSize+2*rs)
	}
	o.RingSize = int(rs)
	writeIdentity(mem, 1)
	state := u32(mem, offState)
	if !state.CompareAndSwap(stateReady, stateAttached) {
		return nil, stateErr(state.Load())
	}
	futexWake(unsafe.Pointer(state))
	return newChan(mem, 1, o)
}

func newChan(mem []byte, side int, o Options) (*Chan, error) {
	c := &Chan{mem: mem, side: side, opt: o}
	c.closedSelf = u32(mem, offClosed+4*side)
	c.closedPeer = u32(mem, offClosed+4*(1-side))
	c.wordSelf = u64(mem, offWord+wordStride*side)
	c.wordPeer = u64(mem, offWord+wordStride*(1-side))
	peer := 1 - side
	c.peerPid = int(u32(mem, offPid+4*peer).Load())
	c.peerStart = u64(mem, offStart+8*peer).Load()
	myNS := u64(mem, offPidNS+8*side).Load()
	c.checkPid = c.peerPid > 0 && myNS != 0 && myNS == u64(mem, offPidNS+8*peer).Load()
	rs := o.RingSize
	c.tx = mkRing(mem, side, rs)
	c.rx = mkRing(mem, 1-side, rs)
	// Resume from the shared counters: zero for a fresh file, whatever the
	// image holds otherwise (the fuzzer starts from arbitrary counters).
	c.tx.pos = c.tx.head.Load()
	c.tx.published = c.tx.pos
	c.tx.cache = c.tx.pos - c.tx.size() // "ring full": the first send rereads (and checks) the tail
	c.rx.pos = c.rx.tail.Load()
	c.rx.published = c.rx.pos
	c.rx.cache = c.rx.pos
	return c, nil
}

func mkRing(mem []byte, i, rs int) ring {
	cb := offRings + i*ringStride
	d := hdrSize + i*rs
	return ring{
		head:     u64(mem, cb+rcHead),
		tail:     u64(mem, cb+rcTail),
		consWait: u32(mem, cb+rcConsWait),
		prodWait: u32(mem, cb+rcProdWait),
		consSeq:  u32(mem, cb+rcConsSeq),
		prodSeq:  u32(mem, cb+rcProdSeq),
		data:     mem[d : d+rs : d+rs],
		mask:     uint64(rs - 1),
	}
}

// writeIdentity records this process in the header, for the peer's pid check.
func writeIdentity(mem []byte, side int) {
	pid := os.Getpid()
	u32(mem, offPid+4*side).Store(uint32(pid))
	start, _ := procStart(pid)
	u64(mem, offStart+8*side).Store(start)
	u64(mem, offPidNS+8*side).Store(pidNS())
}

// waitCtx sleeps on a futex word until it differs from old, the timeout
// passes, or ctx ends.
func waitCtx(ctx context.Context, w *atomic.Uint32, old uint32, d time.Duration) error {
	if ctx.Done() != nil {
		woken := make(chan struct{}) // as in await: never wake after unmap
		stop := context.AfterFunc(ctx, func() { futexWake(unsafe.Pointer(w)); close(woken) })
		defer func() {
			if !stop() {
				<-woken
			}
		}()
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	futexWait(unsafe.Pointer(w), old, d)
	return ctx.Err()
}
