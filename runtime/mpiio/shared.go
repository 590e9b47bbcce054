package mpiio

import (
	"context"
	"fmt"
	"sync"

	mpi "github.com/gompi/gompi/runtime"
)

// The shared file pointer (MPI_File_read_shared, _write_shared, ...): one
// per File, in etypes of the view (every rank must have the same view for
// these calls). Rank 0 keeps it and serves fetch-and-add requests from a
// goroutine over a communicator of its own (duplicated at Open), so that
// ranks on different hosts claim distinct ranges atomically without any
// file lock (sshfs and NFS clients share none). A claim is one small
// message to rank 0 and one back; rank 0's own claims take a mutex.
//
// Epochs order the claims against SetView, which resets the pointer: a
// rank leaves SetView's allgather, and may send a claim, before rank 0 has
// reset it. Each rank counts its SetViews (epoch) and sends its epoch with
// each claim; rank 0 holds a claim from a later epoch than its own until
// its SetView resets the counter. No claim of an earlier epoch can arrive
// then: every rank's earlier claims were answered before it entered the
// SetView that rank 0 completed.
type sharedPtr struct {
	comm *mpi.Comm // duplicated at Open, without the file's context
	ctx  context.Context
	rank int

	mu    sync.Mutex
	epoch int64 // SetViews done (every rank)
	err   error // a broken protocol (a claim abandoned midway): fail later calls
	// Rank 0 only.
	val     int64 // the pointer, in etypes
	pending [][3]int64
	done    chan struct{}
}

// Message tags on the shared pointer's communicator.
const (
	tagClaim = 1 // to rank 0: epoch, delta, (unused); epoch -1 stops the service
	tagGrant = 2 // from rank 0: the pointer before the claim
)

// start is the pointer's first value (the file's end with ModeAppend).
func newSharedPtr(ctx context.Context, comm *mpi.Comm, start int64) *sharedPtr {
	s := &sharedPtr{comm: comm, ctx: ctx, rank: comm.Rank(), val: start}
	if s.rank == 0 {
		s.done = make(chan struct{})
		go s.serve()
	}
	return s
}

// serve answers claims until the stop message from rank 0 itself (Close)
// or until the communicator fails (Finalize).
func (s *sharedPtr) serve() {
	defer close(s.done)
	for {
		var req [3]int64
		st, err := mpi.Recv(s.comm, req[:], mpi.AnySource, tagClaim)
		if err != nil {
			s.mu.Lock()
			s.err = err
			s.mu.Unlock()
			return
		}
		if req[0] < 0 && st.Source == 0 {
			return
		}
		req[2] = int64(st.Source)
		s.mu.Lock()
		if req[0] != s.epoch {
			s.pending = append(s.pending, req)
			s.mu.Unlock()
			continue
		}
		old := s.val
		s.val += req[1]
		s.mu.Unlock()
		s.grant(int(req[2]), old)
	}
}

func (s *sharedPtr) grant(to int, old int64) {
	if err := mpi.Send(s.comm, []int64{old}, to, tagGrant); err != nil {
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
	}
}

// fetchAdd claims delta etypes and returns where they start.
func (s *sharedPtr) fetchAdd(delta int64) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock() // one claim of this rank at a time: grants match claims
	if s.err != nil {
		return 0, fmt.Errorf("shared file pointer unusable: %w", s.err)
	}
	if s.rank == 0 {
		old := s.val
		s.val += delta
		return old, nil
	}
	if err := mpi.Send(s.comm, []int64{s.epoch, delta, 0}, 0, tagClaim); err != nil {
		s.err = err
		return 0, err
	}
	var got [1]int64
	if _, err := mpi.RecvContext(s.ctx, s.comm, got[:], 0, tagGrant); err != nil {
		// The grant may still come, and would answer the next claim.
		s.err = err
		return 0, err
	}
	return got[0], nil
}

// reset (collective, from SetView after its agreement): the pointer is 0
// in the new epoch; rank 0 answers the claims that waited for it.
func (s *sharedPtr) reset() {
	s.mu.Lock()
	s.epoch++
	if s.rank != 0 {
		s.mu.Unlock()
		return
	}
	s.val = 0
	var grants [][2]int64
	rest := s.pending[:0]
	for _, req := range s.pending {
		if req[0] == s.epoch {
			grants = append(grants, [2]int64{req[2], s.val})
			s.val += req[1]
		} else {
			rest = append(rest, req)
		}
	}
	s.pending = rest
	s.mu.Unlock()
	for _, g := range grants {
		s.grant(int(g[0]), g[1])
	}
}

// set makes the pointer v (rank 0, inside a collective, when every rank
// has entered it: no claim is in flight) and returns the old value.
func (s *sharedPtr) set(fn func(old int64) (int64, error)) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return 0, fmt.Errorf("shared file pointer unusable: %w", s.err)
	}
	nv, err := fn(s.val)
	if err != nil {
		return 0, err
	}
	old := s.val
	s.val = nv
	return old, nil
}

// stop ends rank 0's service (Close, on every rank), and frees the
// communicator when free (every rank agreed to close): no claim can come
// after it, since every rank entered Close after its last claim returned.
func (s *sharedPtr) stop(free bool) error {
	if s.rank == 0 {
		// To itself: the service is the only receiver of tagClaim.
		if err := mpi.Send(s.comm, []int64{-1, 0, 0}, 0, tagClaim); err == nil {
			<-s.done
		}
	}
	if !free {
		return nil
	}
	return s.comm.Free()
}

// sharedView is the view for shared-pointer calls: every rank's must be
// the same (MPI's rule; SetView learned every rank's, so this costs no
// message).
func (f *File) sharedView(op string) (*view, error) {
	f.mu.RLock()
	v, same := f.view, f.sameView
	f.mu.RUnlock()
	if !same {
		return nil, f.err(op, -1, fmt.Errorf("%w: shared file pointer calls need the same view on every rank", ErrView))
	}
	return v, nil
}

func (f *File) claimShared(op string, write bool, buf []byte) (*view, int64, error) {
	if err := f.check(op, write); err != nil {
		return nil, 0, err
	}
	v, err := f.sharedView(op)
	if err != nil {
		return nil, 0, err
	}
	if err := f.checkOff(op, 0, v, len(buf)); err != nil {
		return nil, 0, err
	}
	off, err := f.shared.fetchAdd(int64(len(buf)) / v.etype)
	if err != nil {
		return nil, 0, f.err(op, -1, err)
	}
	if err := f.checkOff(op, off, v, len(buf)); err != nil {
		return nil, 0, err
	}
	return v, off, nil
}

// ReadShared reads len(buf) bytes at the shared file pointer and moves it
// past them (MPI_File_read_shared; independent). The range is claimed
// whole before the read, so the pointer moves by the request even when
// the file ends inside it (then the count is what was read and the error
// wraps io.EOF).
func (f *File) ReadShared(buf []byte) (int, error) {
	v, off, err := f.claimShared("read shared", false, buf)
	if err != nil {
		return 0, err
	}
	return f.readAt(v, f.Atomicity(), buf, off)
}

// WriteShared writes buf at the shared file pointer and moves it past
// them (MPI_File_write_shared; independent). Calls from any ranks, at the
// same time or not, write distinct, contiguous ranges of the view, in the
// order rank 0 received their claims.
func (f *File) WriteShared(buf []byte) (int, error) {
	v, off, err := f.claimShared("write shared", true, buf)
	if err != nil {
		return 0, err
	}
	return f.writeAt(v, f.Atomicity(), false, buf, off)
}

// IreadShared starts ReadShared (MPI_File_iread_shared): the range is
// claimed before it returns, the read runs on.
func (f *File) IreadShared(buf []byte) *mpi.Request {
	_, off, err := f.claimShared("read shared", false, buf)
	if err != nil {
		return failed(err)
	}
	return f.IreadAt(buf, off)
}

// IwriteShared starts WriteShared (MPI_File_iwrite_shared).
func (f *File) IwriteShared(buf []byte) *mpi.Request {
	_, off, err := f.claimShared("write shared", true, buf)
	if err != nil {
		return failed(err)
	}
	return f.IwriteAt(buf, off)
}

// ReadOrdered (collective, MPI_File_read_ordered) reads at the shared
// file pointer in rank order: rank r's data follows ranks 0..r-1's, and
// the pointer moves past all of them.
func (f *File) ReadOrdered(buf []byte) (int, error) {
	return f.ordered(false, buf)
}

// WriteOrdered (collective, MPI_File_write_ordered) writes at the shared
// file pointer in rank order, as one collective write.
func (f *File) WriteOrdered(buf []byte) (int, error) {
	return f.ordered(true, buf)
}

// ordered: an allgather of the sizes (an exclusive scan, and the total),
// then rank 0 moves the pointer past the total and tells the base in the
// errors' agreement (no rank can claim before it), then the collective
// path at base plus each rank's scan.
func (f *File) ordered(write bool, buf []byte) (int, error) {
	prev, done := f.turn() // a collective access (collorder.go)
	defer done()
	<-prev
	op := "read ordered"
	if write {
		op = "write ordered"
	}
	lerr := f.check(op, write)
	var v *view
	if lerr == nil {
		v, lerr = f.sharedView(op)
	}
	if lerr == nil {
		lerr = f.checkOff(op, 0, v, len(buf))
	}
	var mine int64
	if lerr == nil {
		mine = int64(len(buf)) / v.etype
	} else {
		mine = -1
	}
	all := make([]int64, f.comm.Size())
	if err := mpi.Allgather(f.comm, []int64{mine}, all); err != nil {
		return 0, f.err(op, -1, err)
	}
	var before, total int64
	for r, n := range all {
		if n < 0 {
			return 0, f.agree(op, lerr)
		}
		if r < f.rank {
			before += n
		}
		total += n
	}
	base := []int64{-1}
	var err error
	if f.rank == 0 {
		base[0], err = f.shared.set(func(old int64) (int64, error) {
			if old > maxOff/v.etype-total {
				return 0, fmt.Errorf("%w: shared file pointer %d + %d overflows", mpi.ErrArg, old, total)
			}
			return old + total, nil
		})
	}
	if err := agreeMax(f.comm, f.path, op, f.err(op, -1, err), base); err != nil {
		return 0, err
	}
	return f.collectiveNow(write, buf, base[0]+before)
}

// SeekShared (collective, MPI_File_seek_shared) moves the shared file
// pointer as Seek moves the individual one; every rank must pass the same
// offset and whence (checked). It returns the new position.
func (f *File) SeekShared(offset int64, whence int) (int64, error) {
	prev, done := f.turn() // after the collective accesses started before (collorder.go)
	defer done()
	<-prev
	const op = "seek shared"
	var lerr error
	if f.closed.Load() {
		lerr = ErrClosed
	}
	v, verr := f.sharedView(op)
	if lerr == nil {
		lerr = verr
	}
	if lerr == nil && whence == SeekSet && offset < 0 {
		// Known on every rank: each returns mpi.ErrArg itself.
		lerr = fmt.Errorf("%w: seek to negative position %d", mpi.ErrArg, offset)
	}
	args := []int64{offset, -offset, int64(whence), -int64(whence)}
	if err := agreeMax(f.comm, f.path, op, f.err(op, -1, lerr), args); err != nil {
		return 0, err
	}
	if args[0] != -args[1] || args[2] != -args[3] {
		return 0, f.err(op, -1, fmt.Errorf("%w: ranks passed different offsets or whence", mpi.ErrArg))
	}
	// Every rank is in the call, so no claim is in flight: rank 0 moves
	// the pointer, and tells the new position in the agreement, which no
	// rank leaves before rank 0 is done.
	pos := []int64{-1}
	var err error
	if f.rank == 0 {
		_, err = f.shared.set(func(old int64) (int64, error) {
			p, err := f.seekTarget(op, v, old, offset, whence)
			pos[0] = p
			return p, err
		})
	}
	if err := agreeMax(f.comm, f.path, op, f.err(op, -1, err), pos); err != nil {
		return 0, err
	}
	return pos[0], nil
}

// PositionShared is the shared file pointer in etypes of the view
// (MPI_File_get_position_shared; independent: a claim of nothing).
func (f *File) PositionShared() (int64, error) {
	const op = "position shared"
	if f.closed.Load() {
		return 0, f.err(op, -1, ErrClosed)
	}
	if _, err := f.sharedView(op); err != nil {
		return 0, err
	}
	p, err := f.shared.fetchAdd(0)
	if err != nil {
		return 0, f.err(op, -1, err)
	}
	return p, nil
}

// testBeforeReset, when set (by tests), runs in SetView before the shared
// pointer's reset.
var testBeforeReset func(rank int)
