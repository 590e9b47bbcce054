package mpi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// interSizes are the world sizes the intercommunicator tests run on.
var interSizes = []int{2, 3, 4, 5, 8}

// forInterWorlds runs f on every transport for each size of interSizes.
func forInterWorlds(t *testing.T, sizes []int, f func(t *testing.T, comms []*Comm)) {
	for _, tr := range transportMods {
		for _, n := range sizes {
			t.Run(tr.name+"/"+strconv.Itoa(n), func(t *testing.T) {
				comms, _ := world(t, n, tr.mod)
				f(t, comms)
			})
		}
	}
}

// halves splits c's n ranks into two groups of unequal sizes (for n >= 3):
// A is ranks 0..a-1 in order, B the rest in reverse order (so local ranks
// differ from world ranks). It returns the local communicator, whether
// this rank is in A, and the world ranks of A and B in local rank order.
func halves(c *Comm) (local *Comm, inA bool, ga, gb []int, err error) {
	n, r := c.Size(), c.Rank()
	a := max(1, (n-1)/2)
	for i := 0; i < a; i++ {
		ga = append(ga, i)
	}
	for i := n - 1; i >= a; i-- {
		gb = append(gb, i)
	}
	inA = r < a
	color, key := 1, n-r
	if inA {
		color, key = 0, r
	}
	local, err = c.Split(color, key)
	return local, inA, ga, gb, err
}

// makeInter builds the intercommunicator between the halves of c, with
// each group's local rank 0 as leader and c as the peer communicator.
func makeInter(c *Comm) (ic *Comm, inA bool, ga, gb []int, err error) {
	local, inA, ga, gb, err := halves(c)
	if err != nil {
		return nil, false, nil, nil, err
	}
	remoteLeader := gb[0]
	if !inA {
		remoteLeader = ga[0]
	}
	// peer's ranks are world ranks here (c is the world or a copy of it
	// in world order).
	ic, err = local.InterCommCreate(0, c, remoteLeader, 77)
	if err != nil {
		return nil, false, nil, nil, err
	}
	return ic, inA, ga, gb, local.Free()
}

// checkShape checks an intercommunicator's sizes and groups.
func checkShape(ic *Comm, inA bool, ga, gb []int, me int) error {
	mine, other := ga, gb
	if !inA {
		mine, other = gb, ga
	}
	switch {
	case !ic.IsInter():
		return errors.New("IsInter false")
	case ic.Size() != len(mine) || ic.RemoteSize() != len(other):
		return fmt.Errorf("Size %d RemoteSize %d, want %d %d", ic.Size(), ic.RemoteSize(), len(mine), len(other))
	case !slices.Equal(ic.Group().WorldRanks(), mine) || !slices.Equal(ic.RemoteGroup().WorldRanks(), other):
		return fmt.Errorf("Group %v RemoteGroup %v, want %v %v", ic.Group().WorldRanks(), ic.RemoteGroup().WorldRanks(), mine, other)
	case mine[ic.Rank()] != me:
		return fmt.Errorf("Rank %d is world %d, want %d", ic.Rank(), mine[ic.Rank()], me)
	}
	if w, err := ic.WorldRank(0); err != nil || w != other[0] {
		return fmt.Errorf("WorldRank(0) = %d, %v; want the remote group's %d", w, err, other[0])
	}
	return nil
}

// interP2P: every rank sends to every remote rank and receives from each
// by name; then every rank sends to remote rank 0, which receives them
// with AnySource (after probing the first); a long message checks
// rendezvous.
func interP2P(c, ic *Comm, me int, other []int) error {
	rn := ic.RemoteSize()
	reqs := make([]*Request, 0, 2*rn)
	// The same envelopes on the world communicator first: they must not
	// match the intercommunicator's receives (distinct contexts).
	for q := 0; q < rn; q++ {
		reqs = append(reqs, Isend(c, []int{-1, -1}, other[q], 5))
	}
	for q := 0; q < rn; q++ {
		reqs = append(reqs, Isend(ic, []int{me, q}, q, 5))
	}
	for q := 0; q < rn; q++ {
		buf := make([]int, 2)
		st, err := Recv(ic, buf, q, 5)
		if err != nil {
			return fmt.Errorf("recv from remote %d: %w", q, err)
		}
		if buf[0] != other[q] || buf[1] != ic.Rank() || st.Source != q {
			return fmt.Errorf("from remote %d: got %v (source %d), want [%d %d]", q, buf, st.Source, other[q], ic.Rank())
		}
	}
	for _, w := range other {
		buf := make([]int, 2)
		if _, err := Recv(c, buf, w, 5); err != nil || buf[0] != -1 {
			return fmt.Errorf("world message from %d: %v, %v", w, buf, err)
		}
	}
	if _, err := WaitAll(context.Background(), reqs...); err != nil {
		return err
	}
	d, err := c.Dup()
	if err != nil {
		return err
	}
	if d.ctx == ic.ctx || d.ctx == ic.inter.local.ctx {
		return fmt.Errorf("a Dup after the intercommunicator took its context %d", d.ctx)
	}
	if err := d.Free(); err != nil {
		return err
	}
	if err := Send(ic, []int{me}, 0, 6); err != nil {
		return err
	}
	if ic.Rank() == 0 {
		st, err := Probe[int](ic, AnySource, 6)
		if err != nil || st.Count != 1 {
			return fmt.Errorf("probe: %+v %v", st, err)
		}
		seen := make([]bool, rn)
		for i := 0; i < rn; i++ {
			buf := make([]int, 1)
			st, err := Recv(ic, buf, AnySource, 6)
			if err != nil {
				return err
			}
			if st.Source < 0 || st.Source >= rn || seen[st.Source] || buf[0] != other[st.Source] {
				return fmt.Errorf("AnySource: %v from %d (seen %v)", buf, st.Source, seen)
			}
			seen[st.Source] = true
		}
	}
	// Long messages (rendezvous): local rank 0 of each group to the
	// other's rank 0.
	if ic.Rank() == 0 {
		long := make([]byte, 1<<20)
		for i := range long {
			long[i] = byte(me + i)
		}
		got := make([]byte, len(long))
		if _, err := Sendrecv(ic, long, 0, 8, got, 0, 8); err != nil {
			return err
		}
		for i := range got {
			if got[i] != byte(other[0]+i) {
				return fmt.Errorf("long message byte %d: %d", i, got[i])
			}
		}
	}
	return nil
}

// interColls runs every intercommunicator collective with checked
// results: each group's result comes from the other group.
func interColls(ic *Comm, inA bool, me int, other []int) error {
	if err := ic.Barrier(); err != nil {
		return fmt.Errorf("barrier: %w", err)
	}
	for _, size := range []int{3, 40000} { // eager and rendezvous
		// Bcast from A's last rank, then from B's rank 0.
		for _, fromA := range []bool{true, false} {
			rootLocal := 0
			if fromA {
				rootLocal = ic.Size() - 1
				if !inA {
					rootLocal = ic.RemoteSize() - 1
				}
			}
			buf := make([]int64, size)
			var want int64 = -1
			switch {
			case inA == fromA && ic.Rank() == rootLocal:
				for i := range buf {
					buf[i] = int64(me*1000 + i)
				}
				if err := Bcast(ic, buf, Root); err != nil {
					return fmt.Errorf("bcast root: %w", err)
				}
				continue
			case inA == fromA:
				if err := Bcast(ic, buf, ProcNull); err != nil {
					return fmt.Errorf("bcast root group: %w", err)
				}
				continue
			default:
				if err := Bcast(ic, buf, rootLocal); err != nil {
					return fmt.Errorf("bcast: %w", err)
				}
				want = int64(other[rootLocal] * 1000)
			}
			if buf[0] != want || buf[size-1] != want+int64(size-1) {
				return fmt.Errorf("bcast of %d: got %d..%d, want from %d", size, buf[0], buf[size-1], want)
			}
		}
		// Allreduce: the sum of the remote group's world ranks + 1.
		in := make([]float64, size)
		for i := range in {
			in[i] = float64(me + 1 + i)
		}
		out := make([]float64, size)
		if err := Allreduce(ic, in, out, Sum); err != nil {
			return fmt.Errorf("allreduce: %w", err)
		}
		var sum float64
		for _, w := range other {
			sum += float64(w + 1)
		}
		if out[0] != sum || out[size-1] != sum+float64(len(other)*(size-1)) {
			return fmt.Errorf("allreduce of %d: got %v..%v, want %v", size, out[0], out[size-1], sum)
		}
		// In place too.
		if err := Allreduce(ic, in, in, Sum); err != nil || in[0] != sum {
			return fmt.Errorf("allreduce in place: %v, %v", in[0], err)
		}
		// Allgather: the remote group's blocks in its rank order.
		k := size/8 + 1
		mine := make([]int32, k)
		for i := range mine {
			mine[i] = int32(me)
		}
		all := make([]int32, k*len(other))
		if err := Allgather(ic, mine, all); err != nil {
			return fmt.Errorf("allgather: %w", err)
		}
		for q, w := range other {
			if all[q*k] != int32(w) || all[(q+1)*k-1] != int32(w) {
				return fmt.Errorf("allgather block %d: %d, want %d", q, all[q*k], w)
			}
		}
	}
	if err := interRootedColls(ic, inA, me, other); err != nil {
		return err
	}
	// Non-blocking forms, two in flight, and a view with a context.
	in, out := []int{me}, []int{0}
	r1 := ic.Ibarrier()
	r2 := Iallreduce(ic, in, out, Max)
	if _, err := WaitAll(context.Background(), r1, r2); err != nil {
		return fmt.Errorf("non-blocking: %w", err)
	}
	if out[0] != slices.Max(other) {
		return fmt.Errorf("Iallreduce Max: %d, want %d", out[0], slices.Max(other))
	}
	// Ibcast from B's rank 0 beside an Iallgather.
	root := 0
	if !inA {
		root = ProcNull
		if ic.Rank() == 0 {
			root = Root
		}
	}
	bb := []int{me}
	ag := make([]int, len(other))
	r3 := Ibcast(ic, bb, root)
	r4 := Iallgather(ic, []int{me}, ag)
	if _, err := WaitAll(context.Background(), r3, r4); err != nil {
		return fmt.Errorf("non-blocking: %w", err)
	}
	if inA && bb[0] != other[0] || !slices.Equal(ag, other) {
		return fmt.Errorf("Ibcast %v (want %d), Iallgather %v (want %v)", bb, other[0], ag, other)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return ic.WithContext(ctx).Barrier()
}

// TestInterComm: an intercommunicator between two unequal halves of the
// world: shape, point-to-point both ways (named, AnySource, probe, long
// messages), every provided collective, Merge's ordering, a nested
// creation over the merged communicator, Free, and ErrIntercomm from the
// collectives not provided.
func TestInterComm(t *testing.T) {
	forInterWorlds(t, interSizes, func(t *testing.T, comms []*Comm) {
		each(t, comms, func(c *Comm) error {
			me := c.Rank()
			ic, inA, ga, gb, err := makeInter(c)
			if err != nil {
				return fmt.Errorf("create: %w", err)
			}
			if err := checkShape(ic, inA, ga, gb, me); err != nil {
				return err
			}
			other := gb
			if !inA {
				other = ga
			}
			if err := interP2P(c, ic, me, other); err != nil {
				return fmt.Errorf("p2p: %w", err)
			}
			if err := interColls(ic, inA, me, other); err != nil {
				return err
			}
			if err := interUnsupported(ic); err != nil {
				return err
			}
			// Merge: A high, so B first; then both low, so the group
			// with the lower leader (A: world 0) first.
			m1, err := ic.Merge(inA)
			if err != nil {
				return fmt.Errorf("merge: %w", err)
			}
			m2, err := ic.Merge(false)
			if err != nil {
				return fmt.Errorf("merge: %w", err)
			}
			for i, m := range []struct {
				c    *Comm
				want []int
			}{{m1, slices.Concat(gb, ga)}, {m2, slices.Concat(ga, gb)}} {
				if m.c.IsInter() || !slices.Equal(m.c.Group().WorldRanks(), m.want) || m.want[m.c.Rank()] != me {
					return fmt.Errorf("merge %d: group %v rank %d, want %v", i, m.c.Group().WorldRanks(), m.c.Rank(), m.want)
				}
				sum := []int{me}
				if err := Allreduce(m.c, sum, sum, Sum); err != nil || sum[0] != len(comms)*(len(comms)-1)/2 {
					return fmt.Errorf("merge %d: allreduce %v, %v", i, sum, err)
				}
			}
			// Nested: an intercommunicator over the merged communicator
			// (in B-then-A order, so its ranks are not world ranks).
			sub, err := m1.Split(m1.Rank()%2, m1.Rank())
			if err != nil {
				return err
			}
			var ic2 *Comm
			if m1.Size() > 1 {
				remoteLeader := 1 - m1.Rank()%2 // the other parity's rank 0 in m1
				ic2, err = sub.InterCommCreate(0, m1, remoteLeader, 78)
				if err != nil {
					return fmt.Errorf("nested create: %w", err)
				}
				if err := ic2.Barrier(); err != nil {
					return err
				}
				if q := ic2.Rank(); q < ic2.RemoteSize() {
					got := make([]int, 1)
					if _, err := Sendrecv(ic2, []int{me}, q, 1, got, q, 1); err != nil {
						return err
					}
					want, _ := m1.WorldRank(2*q + remoteLeader)
					if got[0] != want {
						return fmt.Errorf("nested: rank %d got %d from remote rank %d, want %d", q, got[0], q, want)
					}
				}
				if err := ic2.Free(); err != nil {
					return fmt.Errorf("nested free: %w", err)
				}
			}
			for _, d := range []*Comm{sub, m1, m2} {
				if err := d.Free(); err != nil {
					return err
				}
			}
			// A message never received is discarded by Free.
			if err := Send(ic, []byte("stale"), 0, 9); err != nil {
				return err
			}
			if err := ic.Free(); err != nil {
				return fmt.Errorf("free: %w", err)
			}
			if err := interAfterFree(ic); err != nil {
				return err
			}
			// The released ids are reused, and no stale message leaks
			// into the communicator that reuses them.
			again, _, _, _, err := makeInter(c)
			if err != nil {
				return err
			}
			var stale error
			if ok, _, err := Iprobe[byte](again, AnySource, AnyTag); ok || err != nil {
				stale = fmt.Errorf("a message of the freed intercommunicator reached its successor (%v)", err)
			}
			if err := again.Barrier(); err != nil {
				return err
			}
			return errors.Join(stale, again.Free())
		})
	})
}

// interRootedColls: Reduce to A's rank 0, Gather at B's last rank,
// Scatter from A's rank 0 (Root on the root, ProcNull on the rest of its
// group, the root's remote rank on the other group).
func interRootedColls(ic *Comm, inA bool, me int, other []int) error {
	rootArg := func(rootInA bool, rootLocal int) int {
		switch {
		case inA != rootInA:
			return rootLocal
		case ic.Rank() == rootLocal:
			return Root
		}
		return ProcNull
	}
	isRoot := func(rootInA bool, rootLocal int) bool { return inA == rootInA && ic.Rank() == rootLocal }
	// Reduce.
	const k = 5
	in, out := make([]int, k), make([]int, k)
	for i := range in {
		in[i] = me + i
	}
	if err := Reduce(ic, in, out, Sum, rootArg(true, 0)); err != nil {
		return fmt.Errorf("reduce: %w", err)
	}
	if isRoot(true, 0) {
		var sum int
		for _, w := range other {
			sum += w
		}
		if out[0] != sum || out[k-1] != sum+len(other)*(k-1) {
			return fmt.Errorf("reduce: %v, want the remote sum %d", out, sum)
		}
	}
	// Gather at B's last rank.
	bLast := ic.Size() - 1
	if inA {
		bLast = ic.RemoteSize() - 1
	}
	all := make([]int, len(other)*2)
	if err := Gather(ic, []int{me, -me}, all, rootArg(false, bLast)); err != nil {
		return fmt.Errorf("gather: %w", err)
	}
	if isRoot(false, bLast) {
		for q, w := range other {
			if all[2*q] != w || all[2*q+1] != -w {
				return fmt.Errorf("gather: %v, want blocks of %v", all, other)
			}
		}
	}
	// Scatter from A's rank 0: block q is q's world rank in B.
	var blocks []int
	if isRoot(true, 0) {
		for _, w := range other {
			blocks = append(blocks, w, w*10)
		}
	}
	got := make([]int, 2)
	if err := Scatter(ic, blocks, got, rootArg(true, 0)); err != nil {
		return fmt.Errorf("scatter: %w", err)
	}
	if !inA && (got[0] != me || got[1] != me*10) {
		return fmt.Errorf("scatter: %v, want [%d %d]", got, me, me*10)
	}
	return nil
}

// interUnsupported: collectives not provided on intercommunicators are
// ErrIntercomm at once (and so are intracommunicator-only calls).
func interUnsupported(ic *Comm) error {
	buf := make([]int, ic.Size()*ic.RemoteSize()+1)
	_, cerr := ic.CartCreate([]int{ic.Size()}, []bool{false})
	_, ierr := ic.InterCommCreate(0, ic, 0, 1)
	for i, err := range []error{Scan(ic, buf[:1], buf[:1], Sum), Exscan(ic, buf[:1], buf[:1], Sum), cerr, ierr} {
		if !errors.Is(err, ErrIntercomm) {
			return fmt.Errorf("unsupported operation %d: %v, want ErrIntercomm", i, err)
		}
	}
	return nil
}

// interAfterFree: every operation on a freed intercommunicator is
// ErrFreed.
func interAfterFree(ic *Comm) error {
	buf := make([]int, 1)
	_, rerr := Recv(ic, buf, 0, 0)
	errs := []error{Send(ic, buf, 0, 0), rerr, ic.Barrier(), Allreduce(ic, buf, buf, Sum), Bcast(ic, buf, 0), ic.Free()}
	_, merr := ic.Merge(false)
	errs = append(errs, merr)
	for i, err := range errs {
		if !errors.Is(err, ErrFreed) {
			return fmt.Errorf("operation %d after Free: %v, want ErrFreed", i, err)
		}
	}
	return nil
}

// TestInterCommErrors: bad leaders and overlapping groups are errors
// naming the rank, on every member of the group, and nobody hangs;
// disagreeing Merge arguments fail on both groups.
func TestInterCommErrors(t *testing.T) {
	forInterWorlds(t, []int{2, 5}, func(t *testing.T, comms []*Comm) {
		n := len(comms)
		each(t, comms, func(c *Comm) error {
			local, inA, ga, gb, err := halves(c)
			if err != nil {
				return err
			}
			remoteLeader := gb[0]
			if !inA {
				remoteLeader = ga[0]
			}
			for _, tc := range []struct {
				name                      string
				localLeader, remoteLeader int
				peer                      *Comm
				want                      error
				text                      string
			}{
				{"local leader out of range", local.Size() + 3, remoteLeader, c, ErrRank, "local leader " + strconv.Itoa(local.Size()+3)},
				{"negative local leader", -1, remoteLeader, c, ErrRank, "local leader -1"},
				{"remote leader out of range", 0, n + 2, c, ErrRank, "remote leader " + strconv.Itoa(n+2)},
				// Each leader names itself: the groups overlap.
				{"remote leader in the local group", 0, local.group[0], c, ErrArg, fmt.Sprintf("remote leader %d is world rank %d, local rank 0", local.group[0], local.group[0])},
				{"nil peer", 0, remoteLeader, nil, ErrArg, "peer communicator is nil"},
			} {
				ic, err := local.InterCommCreate(tc.localLeader, tc.peer, tc.remoteLeader, 3)
				if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
					return fmt.Errorf("%s: %v, want %v naming %q", tc.name, err, tc.want, tc.text)
				}
				if ic != nil {
					return fmt.Errorf("%s: a communicator with the error", tc.name)
				}
			}
			if _, err := local.Merge(false); !errors.Is(err, ErrIntercomm) {
				return fmt.Errorf("Merge of an intracommunicator: %v", err)
			}
			// The local communicator is still fine, and a good creation
			// works after the failed ones.
			ic, err := local.InterCommCreate(0, c, remoteLeader, 3)
			if err != nil {
				return err
			}
			// Members of A disagree on high (when A has two): both
			// groups fail.
			high := inA && ic.Rank() == 1
			m, err := ic.Merge(high)
			if len(ga) > 1 {
				if !errors.Is(err, ErrArg) || !strings.Contains(err.Error(), "local rank") {
					return fmt.Errorf("Merge with disagreeing high: %v, want ErrArg naming the rank", err)
				}
			} else if err != nil {
				return err
			} else if err := m.Free(); err != nil {
				return err
			}
			if err := ic.Free(); err != nil {
				return err
			}
			return local.Free()
		})
	})
}

// TestInterCommPeerDeath: a remote member that dies (before or after a
// connection to it was made) ends receives naming it, AnySource
// receives, probes and long sends on the intercommunicator with its
// *PeerError in bounded time.
func TestInterCommPeerDeath(t *testing.T) {
	forInterWorlds(t, []int{2, 3, 5}, func(t *testing.T, comms []*Comm) {
		n := len(comms)
		ics := make([]*Comm, n)
		each(t, comms, func(c *Comm) error {
			ic, _, _, _, err := makeInter(c)
			ics[c.Rank()] = ic
			return err
		})
		// B's local rank 0 is world n-1, its remote rank 0 for A.
		dead := n - 1
		killProc(comms[dead].p)
		check := func(what string, err error) {
			t.Helper()
			var pe *PeerError
			if !errors.As(err, &pe) || pe.Rank != dead {
				t.Errorf("%s: %v, want a PeerError for world rank %d", what, err, dead)
			}
		}
		// A's rank 0 connected to the dead rank (the leaders' exchange);
		// A's other ranks never did.
		for r := 0; r < max(1, (n-1)/2); r++ {
			ic := ics[r]
			check(fmt.Sprintf("rank %d Recv", r), within(t, "Recv", 20*time.Second, func() error {
				_, err := Recv(ic, make([]byte, 8), 0, 1)
				return err
			}))
			check(fmt.Sprintf("rank %d AnySource Recv", r), within(t, "AnySource Recv", 20*time.Second, func() error {
				_, err := Recv(ic, make([]byte, 8), AnySource, AnyTag)
				return err
			}))
			check(fmt.Sprintf("rank %d Probe", r), within(t, "Probe", 20*time.Second, func() error {
				_, err := Probe[byte](ic, 0, AnyTag)
				return err
			}))
			check(fmt.Sprintf("rank %d Send", r), within(t, "Send", 20*time.Second, func() error {
				return Send(ic, make([]byte, 1<<20), 0, 1)
			}))
		}
	})
}

// FuzzDecodeSwap: the leaders' exchange message decodes to entries that
// re-encode to the same bytes, or to an error; never a panic.
func FuzzDecodeSwap(f *testing.F) {
	e := make([]byte, interEntry)
	e[0] = 7
	f.Add(encodeSwap([][]byte{e, e}, nil))
	f.Add(encodeSwap(nil, fmt.Errorf("%w: remote leader 9", ErrRank)))
	f.Add(encodeSwap(nil, &PeerError{Rank: 3, Err: errors.New("gone")}))
	f.Add([]byte{0, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		entries, err := decodeSwap(b, "fuzz")
		if err != nil {
			if entries != nil {
				t.Fatal("entries with an error")
			}
			return
		}
		if len(entries) == 0 || string(encodeSwap(entries, nil)) != string(b) {
			t.Fatalf("%d entries do not re-encode to the input", len(entries))
		}
	})
}

// TestSwapRelay: an error relayed to the other members keeps its kind
// (errors.Is / errors.As) and its text.
func TestSwapRelay(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want error
	}{
		{fmt.Errorf("%w: remote leader 9 (peer communicator of 4)", ErrRank), ErrRank},
		{fmt.Errorf("%w: the groups overlap", ErrArg), ErrArg},
		{fmt.Errorf("%w: Split", ErrIntercomm), ErrIntercomm},
		{fmt.Errorf("mpi: wait: %w", context.DeadlineExceeded), context.DeadlineExceeded},
		{fmt.Errorf("mpi: wait: %w", context.Canceled), context.Canceled},
		{&PeerError{Rank: 3, Err: errors.New("connection reset")}, nil},
		{errors.New("other"), nil},
	} {
		_, err := decodeSwap(encodeSwap(nil, tc.err), "the remote group")
		if err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(tc.err.Error(), "mpi: peer rank 3: ")) {
			t.Errorf("%v relayed as %v", tc.err, err)
		}
		if tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%v relayed as %v, not %v", tc.err, err, tc.want)
		}
		var pe *PeerError
		if errors.As(tc.err, &pe) && (!errors.As(err, &pe) || pe.Rank != 3) {
			t.Errorf("%v relayed as %v, not a PeerError for rank 3", tc.err, err)
		}
	}
}

// TestInterCommCreateContext: when the other group never comes, a
// creation on a WithContext view ends with the context's error on every
// member of the waiting group.
func TestInterCommCreateContext(t *testing.T) {
	forInterWorlds(t, []int{3, 5}, func(t *testing.T, comms []*Comm) {
		n := len(comms)
		each(t, comms, func(c *Comm) error {
			local, inA, _, _, err := halves(c)
			if err != nil || !inA { // B stays away
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			ic, err := local.WithContext(ctx).InterCommCreate(0, c, n-1, 5)
			if !errors.Is(err, context.DeadlineExceeded) || ic != nil {
				return fmt.Errorf("creation without the other group: %v, want the context's error", err)
			}
			return nil
		})
	})
}
