package mpiio

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sort"
	"strconv"

	mpi "github.com/gompi/gompi/runtime"
)

// view is a file view reduced to what the I/O paths need: copy i of the
// filetype's blocks starts at disp + i*extent, and holds data bytes
// [i*size, (i+1)*size) of the rank's stream.
type view struct {
	disp   int64
	etype  int64 // etype size in bytes
	size   int64 // filetype data bytes per tile
	extent int64 // filetype extent
	lb     int64 // where a tile's data starts (its first block's offset)
	blocks []mpi.Block
	prefix []int64 // prefix[i]: data bytes before blocks[i]
}

func byteView(disp int64) *view {
	return &view{disp: disp, etype: 1, size: 1, extent: 1, blocks: []mpi.Block{{Off: 0, Len: 1}}, prefix: []int64{0}}
}

// contiguous reports whether the stream maps to consecutive file bytes.
func (v *view) contiguous() bool {
	if v.size == 0 {
		return false
	}
	return len(v.blocks) == 1 && v.blocks[0].Off == 0 && v.blocks[0].Len == v.extent
}

func newView(disp int64, etype, filetype mpi.Datatype) (*view, error) {
	if !etype.Valid() || !filetype.Valid() {
		return nil, fmt.Errorf("%w: invalid (zero) datatype", ErrView)
	}
	if disp < 0 {
		return nil, fmt.Errorf("%w: negative displacement %d", ErrView, disp)
	}
	es, fs := etype.Size(), filetype.Size()
	if es <= 0 || fs < 0 {
		return nil, fmt.Errorf("%w: etype %v must hold data", ErrView, etype)
	}
	if fs == 0 {
		// A rank with no part of the data (an empty subarray of a
		// decomposition with more ranks than rows), as ROMIO and PnetCDF
		// allow: it joins collectives with empty buffers.
		return &view{disp: disp, etype: es}, nil
	}
	if fs%es != 0 {
		return nil, fmt.Errorf("%w: filetype %v size %d is not a multiple of etype %v size %d", ErrView, filetype, fs, etype, es)
	}
	v := &view{disp: disp, etype: es, size: fs, extent: filetype.Extent(), lb: filetype.LB(), blocks: filetype.Blocks()}
	if v.contiguous() || filetype.Contiguous() && filetype.LB() == 0 {
		return &view{disp: disp, etype: es, size: 1, extent: 1, blocks: []mpi.Block{{Off: 0, Len: 1}}, prefix: []int64{0}}, nil
	}
	end := int64(0)
	v.prefix = make([]int64, len(v.blocks))
	var sum int64
	for i, b := range v.blocks {
		// MPI: displacements non-negative and monotonically nondecreasing;
		// here also within one extent, so tiles never overlap.
		if b.Off < end {
			return nil, fmt.Errorf("%w: filetype %v: block at %d before the end %d of the previous one (file views need nondecreasing, non-overlapping offsets >= 0)", ErrView, filetype, b.Off, end)
		}
		end = b.Off + b.Len
		v.prefix[i] = sum
		sum += b.Len
	}
	// Copy i of the type map is at disp + i*extent whatever the lower
	// bound (as in ROMIO): the tiles are disjoint when a tile's data fits
	// in one extent. lb is then where a tile's data starts, which is what
	// the tile arithmetic (pieces, streamBytes, fits) needs.
	if end-v.blocks[0].Off > v.extent {
		return nil, fmt.Errorf("%w: filetype %v: data [%d, %d) wider than its extent %d (tiles would overlap)", ErrView, filetype, v.blocks[0].Off, end, v.extent)
	}
	v.lb = v.blocks[0].Off
	return v, nil
}

// SetView (collective) sets the caller's view: the file seen from disp on
// as copies of filetype, offsets counted in etypes. Views may differ per
// rank; each rank's filetype must have nondecreasing, non-overlapping
// blocks within its extent (MPI's rule for filetypes).
func (f *File) SetView(disp int64, etype, filetype mpi.Datatype) error {
	prev, done := f.turn() // after the collective accesses started before (collorder.go)
	defer done()
	<-prev
	if f.closed.Load() {
		return f.err("set view", -1, ErrClosed)
	}
	v, verr := newView(disp, etype, filetype)
	// Every rank needs every view for collective operations. A rank's
	// error travels in its place (a 1 byte, then the message), so that
	// this one allgather is also the agreement on errors.
	enc := []byte{0}
	if verr != nil {
		verr = f.err("set view", disp, verr)
		enc = append([]byte{1}, remoteMsg(f.path, verr)...)
	} else {
		enc = append(enc, v.marshal()...)
	}
	all, err := mpi.AllgatherValue(f.comm, enc)
	if err != nil {
		return f.err("set view", -1, err)
	}
	for r, b := range all {
		if len(b) > 0 && b[0] == 1 {
			if verr != nil {
				return verr
			}
			return &Error{Op: "set view", Path: f.path, Rank: r, Off: -1, Err: newRemoteError(string(b[1:]))}
		}
	}
	views := make([]*view, len(all))
	for r, b := range all {
		if len(b) == 0 {
			return f.err("set view", -1, fmt.Errorf("view of rank %d: %w: empty", r, ErrView))
		}
		if views[r], err = unmarshalView(b[1:]); err != nil {
			return f.err("set view", -1, fmt.Errorf("view of rank %d: %w", r, err))
		}
	}
	// MPI: SetView resets the shared file pointer (and the individual
	// ones, below). Every rank is past the allgather here, so every rank
	// moves to the new epoch even if its drain below fails.
	if testBeforeReset != nil {
		testBeforeReset(f.rank)
	}
	f.shared.reset()
	if f.cache != nil {
		// Cached extents are in file offsets; the view does not matter to
		// them, but flush so a new view sees no stale state.
		if err := f.cache.drain(); err != nil {
			return f.err("set view", -1, err)
		}
	}
	same := true
	for _, b := range all {
		same = same && bytes.Equal(b, all[0])
	}
	f.ptrMu.Lock()
	f.mu.Lock()
	f.view, f.views, f.sameView = v, views, same
	f.ptr = 0
	f.mu.Unlock()
	f.ptrMu.Unlock()
	return nil
}

func (v *view) marshal() []byte {
	b := make([]byte, 0, 40+16*len(v.blocks))
	for _, x := range []int64{v.disp, v.etype, v.size, v.extent, v.lb} {
		b = binary.LittleEndian.AppendUint64(b, uint64(x))
	}
	for _, bl := range v.blocks {
		b = binary.LittleEndian.AppendUint64(b, uint64(bl.Off))
		b = binary.LittleEndian.AppendUint64(b, uint64(bl.Len))
	}
	return b
}

func unmarshalView(b []byte) (*view, error) {
	if len(b) < 40 || (len(b)-40)%16 != 0 {
		return nil, fmt.Errorf("%w: bad encoded view (%d bytes)", ErrView, len(b))
	}
	g := func(i int) int64 { return int64(binary.LittleEndian.Uint64(b[8*i:])) }
	v := &view{disp: g(0), etype: g(1), size: g(2), extent: g(3), lb: g(4)}
	n := (len(b) - 40) / 16
	v.blocks = make([]mpi.Block, n)
	v.prefix = make([]int64, n)
	var sum int64
	for i := range v.blocks {
		v.blocks[i] = mpi.Block{Off: g(5 + 2*i), Len: g(6 + 2*i)}
		v.prefix[i] = sum
		sum += v.blocks[i].Len
	}
	return v, nil
}

// fileOff maps stream byte pos to its file offset.
func (v *view) fileOff(pos int64) int64 {
	tile, q := pos/v.size, pos%v.size
	i := sort.Search(len(v.prefix), func(i int) bool { return v.prefix[i] > q }) - 1
	return v.disp + tile*v.extent + v.blocks[i].Off + q - v.prefix[i]
}

// span is the file range [lo, hi) that stream bytes [pos, pos+n) touch.
func (v *view) span(pos, n int64) (lo, hi int64) {
	if n <= 0 {
		return 0, 0
	}
	return v.fileOff(pos), v.fileOff(pos+n-1) + 1
}

// pieces calls emit for each contiguous file piece of stream bytes
// [pos, pos+n) that lies in file range [lo, hi), in file order, with the
// piece's offset in the caller's buffer (stream byte minus pos). emit
// returning false stops. lo, hi of 0, maxInt64 mean everything.
func (v *view) pieces(pos, n, lo, hi int64, emit func(off, buf, length int64) bool) {
	if n <= 0 || lo >= hi {
		return
	}
	end := pos + n
	if v.contiguous() {
		a, b := max(v.disp+pos, lo), min(v.disp+end, hi)
		if a < b {
			emit(a, a-v.disp-pos, b-a)
		}
		return
	}
	// The first tile that can matter: the later of pos's tile and lo's.
	tile := pos / v.size
	if t := (lo - v.disp - v.lb) / v.extent; lo > v.disp+v.lb && t > tile {
		tile = t
	}
	for ; ; tile++ {
		base := v.disp + tile*v.extent
		if base >= hi || tile*v.size >= end {
			return
		}
		i := 0
		if base < lo { // skip the tile's blocks that end before lo
			i = sort.Search(len(v.blocks), func(i int) bool { return base+v.blocks[i].Off+v.blocks[i].Len > lo })
		}
		for ; i < len(v.blocks); i++ {
			b := v.blocks[i]
			s := tile*v.size + v.prefix[i] // stream position of the block
			if s >= end {
				return
			}
			fo := base + b.Off
			if fo >= hi {
				return
			}
			// Clip to the stream range and the file range.
			a, e := s, s+b.Len
			if a < pos {
				a = pos
			}
			if e > end {
				e = end
			}
			fa, fe := fo+(a-s), fo+(e-s)
			if fa < lo {
				a += lo - fa
				fa = lo
			}
			if fe > hi {
				fe = hi
			}
			if fa < fe && !emit(fa, a-pos, fe-fa) {
				return
			}
		}
	}
}

const maxOff = int64(^uint64(0) >> 1)

// chooseAggregators picks n aggregators (0: one per host), spreading them
// over hosts: the k-th aggregator of a host is its k-th rank, and hosts
// take turns. Every rank computes the same list. hostOf numbers every
// rank's host (0, 1, ... in order of first appearance).
func chooseAggregators(comm *mpi.Comm, n int) (aggs, hostOf []int, err error) {
	hosts, err := hostNames(comm)
	if err != nil {
		return nil, nil, err
	}
	var order []string
	byHost := map[string][]int{}
	hostOf = make([]int, len(hosts))
	index := map[string]int{}
	for r, h := range hosts {
		if _, ok := byHost[h]; !ok {
			index[h] = len(order)
			order = append(order, h)
		}
		byHost[h] = append(byHost[h], r)
		hostOf[r] = index[h]
	}
	if n <= 0 {
		n = len(order)
	}
	n = min(n, len(hosts))
	for k := 0; len(aggs) < n; k++ {
		for _, h := range order {
			if rs := byHost[h]; k < len(rs) && len(aggs) < n {
				aggs = append(aggs, rs[k])
			}
		}
	}
	// Domain order follows rank order, so a host's domains are near its
	// ranks' data for the common block decompositions.
	sort.Ints(aggs)
	return aggs, hostOf, nil
}

// hostNames names every rank's host, as the runtime tells hosts apart
// (Comm.SharedHosts, as SplitShared: boot id, host name and mount namespace, so the
// namespace hosts of a test cluster, which share a host name, are told
// apart): by the lowest rank of comm on the host.
func hostNames(comm *mpi.Comm) ([]string, error) {
	if testHost != nil {
		return mpi.AllgatherValue(comm, testHost(comm.Rank()))
	}
	low, err := comm.SharedHosts()
	if err != nil {
		return nil, err
	}
	names := make([]string, len(low))
	for r, l := range low {
		names[r] = "host of rank " + strconv.Itoa(l)
	}
	return names, nil
}

// testHost, when set (by tests), names a rank's host, so that one process
// can play several hosts.
var testHost func(rank int) string
