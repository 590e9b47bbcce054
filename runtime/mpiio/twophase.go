package mpiio

import (
	"errors"
	"io"
	"os"
	"sort"
	"sync"

	mpi "github.com/gompi/gompi/runtime"
	"golang.org/x/sys/unix"
)

// Two-phase collective I/O (see docs/io.md). Every rank learns every
// rank's request (stream position and length; views were exchanged by
// SetView), so every rank computes the same plan without more messages:
// the file range the call touches is cut into one domain per aggregator,
// aligned to the stripe size, and each domain into rounds of at most
// cb_buffer_size bytes. In round r, aggregator a handles window (a, r).
// A rank's pieces of a window travel as one message per piece, straight
// from and into the user's buffer, when there are few of them, else packed
// into one message; both sides count the pieces and so agree on which.

const (
	tagWrite = 1
	tagRead  = 2
	// directMax: at most this many pieces of one window from one rank go
	// as separate messages (no packing copy).
	directMax = 8
)

// WriteAtAll writes buf to the caller's view at etype offset off
// (collective: every rank calls it, each with its own buffer and offset;
// a rank may pass an empty buffer). It returns after every rank's data is
// on the file system (fsync'd by the aggregators, unless the hint
// gompi_sync_write is disable) or, with a cache, journaled in it.
func (f *File) WriteAtAll(buf []byte, off int64) (int, error) {
	return f.collective(true, buf, off)
}

// ReadAtAll reads len(buf) bytes of the caller's view at etype offset off
// (collective). At end of file it returns the bytes read and an *Error
// wrapping io.EOF.
func (f *File) ReadAtAll(buf []byte, off int64) (int, error) {
	return f.collective(false, buf, off)
}

// IwriteAtAll and IreadAtAll start the collective operations on a
// goroutine (MPI_File_iwrite_at_all). Every rank must start them in the
// same order; several may be outstanding, and blocking collective
// accesses may be called meanwhile: they run one after another in the
// order started (collorder.go).
func (f *File) IwriteAtAll(buf []byte, off int64) *mpi.Request {
	return f.icollective(true, buf, off)
}

// IreadAtAll: see IwriteAtAll.
func (f *File) IreadAtAll(buf []byte, off int64) *mpi.Request {
	return f.icollective(false, buf, off)
}

func (f *File) icollective(write bool, buf []byte, off int64) *mpi.Request {
	prev, done := f.turn()
	return mpi.Go(func() (mpi.Status, error) {
		defer done()
		<-prev
		n, err := f.collectiveNow(write, buf, off)
		return mpi.Status{Source: f.rank, Count: n, Bytes: n}, err
	})
}

type plan struct {
	pos, n   []int64 // every rank's stream request
	views    []*view
	lo, hi   int64 // file range touched
	base     int64 // aligned start of domain 0
	dsize    int64 // domain size (multiple of the alignment)
	cb       int64 // round size (multiple of the alignment)
	rounds   int
	aggIndex int // this rank's aggregator index, -1 if none
}

// domain is aggregator a's file domain, clipped to the touched range.
func (p *plan) domain(a int) (lo, hi int64) {
	lo = p.base + int64(a)*p.dsize
	return max(lo, p.lo), min(lo+p.dsize, p.hi)
}

func (p *plan) window(a, r int) (lo, hi int64) {
	lo = p.base + int64(a)*p.dsize + int64(r)*p.cb
	hi = min(lo+p.cb, p.base+int64(a+1)*p.dsize)
	return max(lo, p.lo), min(hi, p.hi)
}

// collectiveNow is a collective read or write (in its turn: collorder.go).
func (f *File) collectiveNow(write bool, buf []byte, off int64) (int, error) {
	op := "read all"
	if write {
		op = "write all"
	}
	f.mu.RLock()
	v, views, atomic := f.view, f.views, f.atomic
	f.mu.RUnlock()
	// In atomic mode a collective write's cached pieces are flushed
	// before it returns, so a later write (by any rank) lands after them.
	drainAfter := write && atomic && f.cache != nil
	lerr := f.check(op, write)
	if lerr == nil {
		lerr = f.checkOff(op, off, v, len(buf))
	}
	if write && f.cache != nil {
		defer f.releaseWriters()
	}
	size := f.comm.Size()
	req := []int64{0, 0, 0}
	if lerr == nil {
		req[0], req[1] = off*v.etype, int64(len(buf))
	} else {
		req[2] = 1
	}
	all := make([]int64, 3*size)
	if err := mpi.Allgather(f.comm, req, all); err != nil {
		return 0, f.err(op, -1, err)
	}
	p := &plan{pos: make([]int64, size), n: make([]int64, size), views: views, lo: maxOff, aggIndex: -1}
	bad := false
	for r := 0; r < size; r++ {
		p.pos[r], p.n[r] = all[3*r], all[3*r+1]
		bad = bad || all[3*r+2] != 0
	}
	if bad {
		return 0, f.agree(op, lerr)
	}
	if !write && f.anyCached {
		// Every rank's cached writes (each rank caches its own pieces, or
		// an aggregator its domain's) reach the file before anyone reads
		// it: an aggregator reads for other ranks. With caches on some
		// ranks only, a rank's collective read missed its own cached
		// writes in other aggregators' domains.
		var err error
		if f.cache != nil {
			err = f.cache.drain()
		}
		if err := f.agree(op, f.err(op, -1, err)); err != nil {
			return 0, err
		}
	}
	// The file ranges, and whether they are disjoint and aligned (then,
	// in automatic mode, each rank does its own I/O).
	type rng struct{ lo, hi int64 }
	var rs []rng
	for r := 0; r < size; r++ {
		if lo, hi := views[r].span(p.pos[r], p.n[r]); hi > lo {
			rs = append(rs, rng{lo, hi})
			p.lo, p.hi = min(p.lo, lo), max(p.hi, hi)
		}
	}
	if len(rs) == 0 {
		return 0, f.agree(op, nil)
	}
	if write && atomic && overlaps(p) {
		return f.orderedWrite(op, v, buf, off)
	}
	mode := f.hints.cbRead
	if write {
		mode = f.hints.cbWrite
	}
	if mode == auto {
		sort.Slice(rs, func(i, j int) bool { return rs[i].lo < rs[j].lo })
		indep := true
		align := f.hints.stripe
		for i, x := range rs {
			if i > 0 && x.lo < rs[i-1].hi || (x.lo%align != 0 && i > 0) || (x.hi%align != 0 && i < len(rs)-1) {
				indep = false
				break
			}
		}
		// A contiguous access per rank gains nothing from aggregation.
		if indep {
			mode = disable
		}
	}
	if mode == disable {
		return f.independentAll(op, write, drainAfter, v, buf, off)
	}
	f.makePlan(p)
	var n int
	var err error
	if write {
		err = f.twoPhaseWrite(p, buf)
		n = len(buf)
		if err == nil && drainAfter {
			err = f.cache.drain()
		}
	} else {
		var eof int64
		eof, err = f.twoPhaseRead(p, buf)
		// Agree on where the file ended (the least short read).
		ends := make([]int64, size)
		if gerr := mpi.Allgather(f.comm, []int64{eof}, ends); gerr != nil && err == nil {
			err = gerr
		}
		end := maxOff
		for _, e := range ends {
			end = min(end, e)
		}
		n = len(buf)
		if end < maxOff {
			got := int64(0)
			v.pieces(p.pos[f.rank], p.n[f.rank], 0, end, func(_, _, l int64) bool { got += l; return true })
			if int(got) < n && err == nil {
				n = int(got)
				err = f.err(op, v.fileOff(p.pos[f.rank]+got), io.EOF)
			}
		}
	}
	// End of file is this rank's own result (as in independentAll), not a
	// failure of the call: the ranks that read their whole range succeed.
	ferr := err
	if errors.Is(err, io.EOF) {
		ferr = nil
	}
	if aerr := f.agree(op, f.err(op, -1, ferr)); aerr != nil {
		return n, aerr
	}
	return n, err
}

// independentAll is a collective call done as independent I/O by each
// rank (collective buffering disabled, or not needed).
func (f *File) independentAll(op string, write, drainAfter bool, v *view, buf []byte, off int64) (int, error) {
	var n int
	var err error
	if write {
		n, err = f.writeAt(v, false, true, buf, off)
		if err == nil && drainAfter {
			err = f.err(op, -1, f.cache.drain())
		}
		if err == nil && f.hints.syncWrite && f.cache == nil && len(buf) > 0 {
			err = f.err(op, -1, f.fd.Sync())
		}
	} else {
		n, err = f.readAt(v, false, buf, off)
	}
	if err != nil && !write && errors.Is(err, io.EOF) {
		// End of file is this rank's own result, not a failure of the call.
		if aerr := f.agree(op, nil); aerr != nil {
			return n, aerr
		}
		return n, err
	}
	return n, f.agree(op, err)
}

func (f *File) makePlan(p *plan) {
	naggs := int64(len(f.aggs))
	align := f.hints.stripe
	p.base = p.lo - p.lo%align
	span := p.hi - p.base
	p.dsize = (span + naggs - 1) / naggs
	p.dsize = (p.dsize + align - 1) / align * align
	// Rounds are cb_buffer_size rounded down to the alignment, or the
	// buffer size itself under a larger alignment: the buffers are what
	// the user sized, whatever striping_unit says.
	p.cb = f.hints.cbBuffer / align * align
	if p.cb == 0 {
		p.cb = f.hints.cbBuffer
	}
	// When one domain is wider than the data (a huge alignment), only the
	// first holds any: rounds past the data would be empty exchanges.
	p.rounds = int((min(p.dsize, span) + p.cb - 1) / p.cb)
	for i, a := range f.aggs {
		if a == f.rank {
			p.aggIndex = i
		}
	}
}

// buffers returns the aggregator's two round buffers, kept between calls.
func (f *File) buffers(n int64) [2][]byte {
	f.bufMu.Lock()
	defer f.bufMu.Unlock()
	for i := range f.cbufs {
		if int64(cap(f.cbufs[i])) < n {
			f.cbufs[i] = make([]byte, n)
		}
	}
	return [2][]byte{f.cbufs[0][:n], f.cbufs[1][:n]}
}

// runs merges pieces (any order) into sorted, disjoint covered runs.
func runs(ps []piece) []piece {
	rs := make([]piece, len(ps))
	copy(rs, ps)
	sort.Slice(rs, func(i, j int) bool { return rs[i].off < rs[j].off })
	out := rs[:0]
	for _, x := range rs {
		if n := len(out); n > 0 && x.off <= out[n-1].off+out[n-1].len {
			out[n-1].len = max(out[n-1].len, x.off+x.len-out[n-1].off)
			continue
		}
		out = append(out, piece{off: x.off, len: x.len})
	}
	return out
}

// sieved: many small runs are moved as one span (read-modify-write).
func sieved(rs []piece) bool {
	if len(rs) <= 16 {
		return false
	}
	var sum int64
	for _, r := range rs {
		sum += r.len
	}
	return sum/int64(len(rs)) < 256<<10
}

// aggRound is an aggregator's view of one round: every rank's pieces of
// its window and the covered runs.
type aggRound struct {
	lo, hi int64
	from   [][]piece // by rank
	runs   []piece
}

// viaAgg says whether rank s's pieces of aggregator ai's domain travel to
// the aggregator in a collective write. With a cache on every rank, a
// rank caches its pieces of the domains of its own host's aggregators
// itself (no exchange, no copy: see cachedLocal), and only pieces of other
// hosts' domains travel.
func (f *File) viaAgg(s, ai int) bool {
	return !f.allCached || f.hostOf[s] != f.hostOf[f.aggs[ai]]
}

// aggRound: write says which ranks' pieces the aggregator gets (viaAgg).
func (f *File) aggRound(p *plan, r int, write bool) *aggRound {
	lo, hi := p.window(p.aggIndex, r)
	ar := &aggRound{lo: lo, hi: hi, from: make([][]piece, len(p.pos))}
	if lo >= hi {
		return ar
	}
	var all []piece
	for s := range p.pos {
		if write && !f.viaAgg(s, p.aggIndex) {
			continue
		}
		ar.from[s] = collect(p.views[s], p.pos[s], p.n[s], lo, hi, nil)
		all = append(all, ar.from[s]...)
	}
	ar.runs = runs(all)
	return ar
}

func pack(dst []byte, src []byte, ps []piece, toBuf bool) {
	// toBuf false: gather pieces of src (at p.buf) into dst consecutively.
	// toBuf true: scatter src consecutively into dst at p.buf.
	k := int64(0)
	for _, p := range ps {
		if toBuf {
			copy(dst[p.buf:p.buf+p.len], src[k:])
		} else {
			copy(dst[k:], src[p.buf:p.buf+p.len])
		}
		k += p.len
	}
}

// grow returns (*b)[:n], reallocating *b if it is too small.
func grow(b *[]byte, n int64) []byte {
	if int64(cap(*b)) < n {
		*b = make([]byte, n)
	}
	return (*b)[:n]
}

func total(ps []piece) int64 {
	var s int64
	for _, p := range ps {
		s += p.len
	}
	return s
}

// cachedLocal caches this rank's pieces of its host's domains (every
// rank has a cache): one extent, written straight from buf. Domains are
// block-aligned and given to hosts whole, so the flushers of different
// hosts never write one block; ranks of one host share its page cache.
func (f *File) cachedLocal(p *plan, buf []byte) error {
	var ps []piece
	for ai, a := range f.aggs {
		if f.hostOf[a] == f.hostOf[f.rank] {
			lo, hi := p.domain(ai)
			ps = collect(p.views[f.rank], p.pos[f.rank], p.n[f.rank], lo, hi, ps)
		}
	}
	if len(ps) == 0 {
		return nil
	}
	// Its snapshot writer starts when the call returns (collective's
	// release): until then it would take a core from the ranks of this
	// host still forking theirs or agreeing.
	return f.err("write all", ps[0].off, f.cache.putv(ps, buf, true))
}

func (f *File) twoPhaseWrite(p *plan, buf []byte) error {
	ctx := f.ctx
	me := f.rank
	var firstErr error
	keep := func(err error) {
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	if f.cache != nil && !(f.allCached && f.oneHost) {
		// This rank's pieces that go to another rank's aggregator reach
		// the file by that rank, not through this rank's cache: the
		// cache's earlier extents of the same bytes must be on the file
		// first, or their flush would land over the newer bytes.
		var ps []piece
		for ai, a := range f.aggs {
			if a != me && f.viaAgg(me, ai) {
				lo, hi := p.domain(ai)
				ps = collect(p.views[me], p.pos[me], p.n[me], lo, hi, ps)
			}
		}
		if f.cache.pending(runs(ps)) {
			keep(f.err("write all", -1, f.cache.drain()))
		}
	}
	var local chan error
	if f.allCached {
		if f.oneHost { // nothing travels
			return f.cachedLocal(p, buf)
		}
		local = make(chan error, 1)
		go func() { local <- f.cachedLocal(p, buf) }()
	}
	var bufs [2][]byte
	if p.aggIndex >= 0 {
		bufs = f.buffers(min(p.cb, p.dsize))
	}
	var ioWG [2]sync.WaitGroup
	var ioMu sync.Mutex
	var ioErr error
	var prevSends []*mpi.Request
	// Packing and staging buffers, reused round after round (fresh 16 MiB
	// allocations each round cost page faults and zeroing).
	packBufs := make([][2][]byte, len(f.aggs))
	stageBufs := make([][2][]byte, len(p.pos))
	wrote := false
	for r := 0; r < p.rounds; r++ {
		// Send my pieces of every other aggregator's window.
		var sends []*mpi.Request
		for ai, a := range f.aggs {
			if a == me || !f.viaAgg(me, ai) {
				continue
			}
			lo, hi := p.window(ai, r)
			ps := collect(p.views[me], p.pos[me], p.n[me], lo, hi, nil)
			if len(ps) == 0 {
				continue
			}
			if len(ps) <= directMax {
				for _, x := range ps {
					sends = append(sends, mpi.Isend(f.comm, buf[x.buf:x.buf+x.len], a, tagWrite))
				}
			} else {
				// Round r-1's send from the other buffer may be in flight;
				// round r-2's, from this one, has completed.
				pk := grow(&packBufs[ai][r%2], total(ps))
				pack(pk, buf, ps, false)
				sends = append(sends, mpi.Isend(f.comm, pk, a, tagWrite))
			}
		}
		if p.aggIndex >= 0 {
			ar := f.aggRound(p, r, true)
			b := bufs[r%2]
			ioWG[r%2].Wait() // round r-2's write is done with this buffer
			if len(ar.runs) > 0 {
				w := b[:ar.hi-ar.lo]
				// Not with a cache: the holes may be other ranks' bytes,
				// still in their caches.
				sv := sieved(ar.runs) && !f.noRead && f.cache == nil
				if sv {
					// Fill the holes with the file's bytes first.
					slo, shi := ar.runs[0].off, ar.runs[len(ar.runs)-1].off+ar.runs[len(ar.runs)-1].len
					seg := w[slo-ar.lo : shi-ar.lo]
					got, err := preadFull(f.fd, seg, slo)
					if err != nil && !errors.Is(err, io.EOF) {
						keep(f.err("write all", slo+int64(got), err))
					}
					clear(seg[got:])
				}
				// Without sieving or cache, the round is written with
				// pwritev straight from where its pieces are (the user's
				// buffer, the round buffer, the staging buffers): no copy
				// into the round buffer.
				gather := !sv && f.cache == nil
				var segs []segment
				var recvs []*mpi.Request
				type unpack struct {
					stage []byte
					ps    []piece
				}
				var unpacks []unpack
				for s, ps := range ar.from {
					if len(ps) == 0 {
						continue
					}
					if s == me {
						for _, x := range ps {
							if gather {
								segs = append(segs, segment{x.off, buf[x.buf : x.buf+x.len]})
							} else {
								copy(w[x.off-ar.lo:], buf[x.buf:x.buf+x.len])
							}
						}
						continue
					}
					if len(ps) <= directMax {
						for _, x := range ps {
							d := w[x.off-ar.lo : x.off-ar.lo+x.len]
							recvs = append(recvs, mpi.Irecv(f.comm, d, s, tagWrite))
							if gather {
								segs = append(segs, segment{x.off, d})
							}
						}
					} else {
						// Read by round r's pwritev until round r+2.
						st := grow(&stageBufs[s][r%2], total(ps))
						recvs = append(recvs, mpi.Irecv(f.comm, st, s, tagWrite))
						if gather {
							k := int64(0)
							for _, x := range ps {
								segs = append(segs, segment{x.off, st[k : k+x.len]})
								k += x.len
							}
						} else {
							unpacks = append(unpacks, unpack{st, ps})
						}
					}
				}
				_, err := mpi.WaitAll(ctx, recvs...)
				keep(err)
				for _, u := range unpacks {
					k := int64(0)
					for _, x := range u.ps {
						copy(w[x.off-ar.lo:], u.stage[k:k+x.len])
						k += x.len
					}
				}
				rs := ar.runs
				if sv {
					rs = []piece{{off: rs[0].off, len: rs[len(rs)-1].off + rs[len(rs)-1].len - rs[0].off}}
				}
				// With a cache, only this rank's own pieces are cached (after
				// its earlier cached writes); other ranks' are written to the
				// file: cached here, they were invisible to their writer's
				// later reads, which drain only the writer's own cache.
				var own []piece
				if f.cache != nil {
					var others []piece
					for s, ps := range ar.from {
						if s == me {
							own = append(own, ps...)
						} else {
							others = append(others, ps...)
						}
					}
					own, rs = runs(own), runs(others)
				}
				wrote = true
				ioWG[r%2].Add(1)
				go func(w []byte, lo int64, rs, own []piece) {
					defer ioWG[r%2].Done()
					fail := func(off int64, err error) {
						ioMu.Lock()
						if ioErr == nil {
							ioErr = f.err("write all", off, err)
						}
						ioMu.Unlock()
					}
					if gather {
						if off, err := f.writeSegments(segs); err != nil {
							fail(off, err)
						}
						return
					}
					for _, x := range own {
						if err := f.cache.put(x.off, w[x.off-lo:x.off-lo+x.len]); err != nil {
							fail(x.off, err)
							return
						}
					}
					for _, x := range rs {
						_, err := pwriteFull(f.fd, w[x.off-lo:x.off-lo+x.len], x.off)
						if err == nil && f.hints.syncWrite {
							_ = unix.SyncFileRange(int(f.fd.Fd()), x.off, x.len, unix.SYNC_FILE_RANGE_WRITE)
						}
						if err != nil {
							fail(x.off, err)
							return
						}
					}
				}(w, ar.lo, rs, own)
			}
		}
		if prevSends != nil {
			_, err := mpi.WaitAll(ctx, prevSends...)
			keep(err)
		}
		prevSends = sends
	}
	_, err := mpi.WaitAll(ctx, prevSends...)
	keep(err)
	ioWG[0].Wait()
	ioWG[1].Wait()
	keep(ioErr)
	if local != nil {
		keep(<-local)
	}
	if wrote && f.cache == nil && f.hints.syncWrite && firstErr == nil {
		keep(f.err("write all", -1, f.fd.Sync()))
	}
	return firstErr
}

// segment is bytes b for file offset off.
type segment struct {
	off int64
	b   []byte
}

// iovMax is Linux's IOV_MAX: the most buffers one pwritev takes.
const iovMax = 1024

// writeSegments writes segs (any order; overlapping ones, which only an
// erroneous program makes, in offset order) with one pwritev per run
// of file-contiguous segments (at most iovMax buffers each), and with
// gompi_sync_write starts each run's write-back at once
// (sync_file_range), so the disk works during the next rounds' exchange
// instead of all of it in the final fsync. On failure it returns the
// offset where it failed.
func (f *File) writeSegments(segs []segment) (int64, error) {
	sort.Slice(segs, func(i, j int) bool { return segs[i].off < segs[j].off })
	iov := make([][]byte, 0, min(len(segs), iovMax))
	for i := 0; i < len(segs); {
		lo := segs[i].off
		end := lo
		iov = iov[:0]
		for i < len(segs) && segs[i].off == end && len(iov) < iovMax {
			iov = append(iov, segs[i].b)
			end += int64(len(segs[i].b))
			i++
		}
		if err := pwritevFull(f.fd, iov, lo); err != nil {
			return lo, err
		}
		if f.hints.syncWrite {
			_ = unix.SyncFileRange(int(f.fd.Fd()), lo, end-lo, unix.SYNC_FILE_RANGE_WRITE)
		}
	}
	return 0, nil
}

// pwritevFull writes all of iov at off, continuing after short writes. It
// consumes iov.
func pwritevFull(fd *os.File, iov [][]byte, off int64) error {
	for {
		for len(iov) > 0 && len(iov[0]) == 0 {
			iov = iov[1:]
		}
		if len(iov) == 0 {
			return nil
		}
		n, err := unix.Pwritev(int(fd.Fd()), iov, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrShortWrite
		}
		off += int64(n)
		for n > 0 && len(iov) > 0 {
			if k := min(n, len(iov[0])); k < len(iov[0]) {
				iov[0] = iov[0][k:]
				n = 0
			} else {
				n -= k
				iov = iov[1:]
			}
		}
	}
}

// twoPhaseRead returns the file offset where an aggregator's read came
// short (end of file), or maxOff.
func (f *File) twoPhaseRead(p *plan, buf []byte) (int64, error) {
	ctx := f.ctx
	me := f.rank
	var firstErr error
	keep := func(err error) {
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	eof := maxOff
	if f.cache != nil {
		keep(f.cache.drain())
	}
	var bufs [2][]byte
	var rounds []*aggRound
	type readRes struct {
		eof int64
		err error
	}
	var done [2]chan readRes
	startRead := func(r int) {
		ar := rounds[r]
		ch := make(chan readRes, 1)
		done[r%2] = ch
		w := bufs[r%2]
		go func() {
			res := readRes{eof: maxOff}
			rs := ar.runs
			if sieved(rs) {
				rs = []piece{{off: rs[0].off, len: rs[len(rs)-1].off + rs[len(rs)-1].len - rs[0].off}}
			}
			for _, x := range rs {
				seg := w[x.off-ar.lo : x.off-ar.lo+x.len]
				got, err := preadFull(f.fd, seg, x.off)
				if err != nil {
					clear(seg[got:])
					if errors.Is(err, io.EOF) {
						res.eof = min(res.eof, x.off+int64(got))
						continue
					}
					res.err = f.err("read all", x.off+int64(got), err)
					break
				}
			}
			ch <- res
		}()
	}
	if p.aggIndex >= 0 {
		bufs = f.buffers(min(p.cb, p.dsize))
		rounds = make([]*aggRound, p.rounds)
		for r := range rounds {
			rounds[r] = f.aggRound(p, r, false)
		}
		startRead(0)
	}
	var prevSends []*mpi.Request
	for r := 0; r < p.rounds; r++ {
		// Post my receives of this round from every other aggregator.
		var recvs []*mpi.Request
		type unpack struct {
			stage []byte
			ps    []piece
		}
		var unpacks []unpack
		for ai, a := range f.aggs {
			if a == me {
				continue
			}
			lo, hi := p.window(ai, r)
			ps := collect(p.views[me], p.pos[me], p.n[me], lo, hi, nil)
			if len(ps) == 0 {
				continue
			}
			if len(ps) <= directMax {
				for _, x := range ps {
					recvs = append(recvs, mpi.Irecv(f.comm, buf[x.buf:x.buf+x.len], a, tagRead))
				}
			} else {
				st := make([]byte, total(ps))
				recvs = append(recvs, mpi.Irecv(f.comm, st, a, tagRead))
				unpacks = append(unpacks, unpack{st, ps})
			}
		}
		if p.aggIndex >= 0 {
			ar := rounds[r]
			res := <-done[r%2]
			keep(res.err)
			eof = min(eof, res.eof)
			// The next round's read goes into the other buffer, which the
			// previous round's sends must have left.
			_, err := mpi.WaitAll(ctx, prevSends...)
			keep(err)
			prevSends = nil
			if r+1 < p.rounds {
				startRead(r + 1)
			}
			w := bufs[r%2]
			for s, ps := range ar.from {
				if len(ps) == 0 {
					continue
				}
				if s == me {
					for _, x := range ps {
						copy(buf[x.buf:x.buf+x.len], w[x.off-ar.lo:])
					}
					continue
				}
				if len(ps) <= directMax {
					for _, x := range ps {
						prevSends = append(prevSends, mpi.Isend(f.comm, w[x.off-ar.lo:x.off-ar.lo+x.len], s, tagRead))
					}
				} else {
					pk := make([]byte, total(ps))
					k := int64(0)
					for _, x := range ps {
						copy(pk[k:k+x.len], w[x.off-ar.lo:])
						k += x.len
					}
					prevSends = append(prevSends, mpi.Isend(f.comm, pk, s, tagRead))
				}
			}
		}
		_, err := mpi.WaitAll(ctx, recvs...)
		keep(err)
		for _, u := range unpacks {
			pack(buf, u.stage, u.ps, true)
		}
	}
	_, err := mpi.WaitAll(ctx, prevSends...)
	keep(err)
	return eof, firstErr
}

// testBeforeRelease, when set, runs at the end of a collective write on a
// cached file, before the call releases its snapshot writers (tests).
var testBeforeRelease func(f *File)

// releaseWriters starts the snapshot writers this collective write forked.
func (f *File) releaseWriters() {
	if testBeforeRelease != nil {
		testBeforeRelease(f)
	}
	f.cache.release()
}
