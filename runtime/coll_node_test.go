package mpi

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// Node-aware collectives: ranks of one process are put on pretend hosts
// (Config.testHost), so they use shared memory within a host and TCP
// across, and the collectives must pick the two-level algorithms exactly
// where the layout calls for them, with results equal to the flat ones.

// nodeLayouts names, per rank, the pretend host (one letter per rank).
var nodeLayouts = []struct{ name, hosts string }{
	{"3+3+2", "AAABBBCC"},
	{"2+1", "AAB"},
	{"1+4", "ABBBB"},
	{"1+1+1+3", "ABCDDD"},
	{"one-per-host", "ABCDE"},
	{"round-robin", "ABCABCAB"},
	{"2+2+2", "AABBCC"},
	{"round-robin-even", "ABCABC"},
	{"interleaved", "AABBAAB"},
	{"single-host", "AAAAA"},
}

// wantNodes computes, independently of the runtime, whether a layout calls
// for two levels (several hosts, one with several ranks), whether each
// host's ranks are consecutive (so non-commutative ops may use them) and
// whether every host has as many ranks (so large allreduces use lanes).
func wantNodes(hosts string) (twoLevel, ordered, equal bool) {
	count := map[rune]int{}
	for _, h := range hosts {
		count[h]++
	}
	shared, equal := false, true
	for _, k := range count {
		shared = shared || k > 1
		equal = equal && k == count[rune(hosts[0])]
	}
	ordered = true
	seen := map[byte]bool{}
	for i := 0; i < len(hosts); i++ {
		if i > 0 && hosts[i] != hosts[i-1] && seen[hosts[i]] {
			ordered = false
		}
		seen[hosts[i]] = true
	}
	twoLevel = len(count) > 1 && shared
	return twoLevel, ordered, twoLevel && equal
}

// hostsWorld starts len(hosts) ranks, rank i on pretend host hosts[i].
func hostsWorld(t *testing.T, hosts string) []*Comm {
	comms, _ := shmWorld(t, len(hosts), func(c *Config) {
		c.testHost = "host-" + hosts[c.Bootstrap.Rank():c.Bootstrap.Rank()+1]
	})
	return comms
}

// checkShmLinks checks that pretend hosts are honoured by the transport:
// shared memory only between ranks of one host.
func checkShmLinks(t *testing.T, comms []*Comm, hosts string) {
	t.Helper()
	for r, c := range comms {
		if c.p.cfg.NoSharedMemory {
			return
		}
		mates := int64(strings.Count(hosts, hosts[r:r+1]) - 1)
		if links := c.p.shm.links.Load(); links > mates || (mates > 0) != (links > 0) {
			t.Errorf("rank %d: %d shm links with %d ranks on its host", r, links, mates)
		}
	}
}

func twoLevelRuns(c *Comm) int64 {
	if c.node == nil {
		return 0
	}
	return c.node.used.Load()
}

// checkPath runs Barrier, Bcast, a commutative Allreduce and a commutative
// and a non-commutative Reduce, and checks that each took the two-level path
// exactly when expected. (A large non-commutative Allreduce is a flat
// Reduce and a Bcast, which may be two-level: Reduce tells the paths
// apart.)
func checkPath(c *Comm, twoLevel, ordered bool) error {
	mat := NewOp[int64]("mat", matOp[int64], false)
	for _, tc := range []struct {
		name string
		op   Op
		want bool
		run  func(buf []int64, op Op) error
	}{
		{"Barrier", Sum, twoLevel, func([]int64, Op) error { return c.Barrier() }},
		{"Bcast", Sum, twoLevel, func(b []int64, _ Op) error { return Bcast(c, b, c.Size()/2) }},
		{"Allreduce Sum", Sum, twoLevel, func(b []int64, op Op) error { return Allreduce(c, b, b, op) }},
		{"Reduce Sum", Sum, twoLevel, func(b []int64, op Op) error { return Reduce(c, b, b, op, c.Size()-1) }},
		{"Reduce mat", mat, twoLevel && ordered, func(b []int64, op Op) error { return Reduce(c, b, b, op, 0) }},
		{"Allgather", Sum, twoLevel, func(b []int64, _ Op) error { return Allgather(c, b[:1], make([]int64, c.Size())) }},
		{"Scatter", Sum, twoLevel, func(b []int64, _ Op) error { return Scatter(c, make([]int64, 2*c.Size()), b[:2], 0) }},
		{"Gather", Sum, twoLevel, func(b []int64, _ Op) error { return Gather(c, b[:2], make([]int64, 2*c.Size()), c.Size()-1) }},
		{"Alltoall small", Sum, twoLevel, func(b []int64, _ Op) error {
			return Alltoall(c, make([]int64, 2*c.Size()), make([]int64, 2*c.Size()))
		}},
		{"Alltoall large", Sum, false, func(b []int64, _ Op) error { // 1 KiB blocks: flat
			return Alltoall(c, make([]int64, 128*c.Size()), make([]int64, 128*c.Size()))
		}},
	} {
		before := twoLevelRuns(c)
		if err := tc.run(fillv[int64](c.Rank(), 8), tc.op); err != nil {
			return err
		}
		if got := twoLevelRuns(c) > before; got != tc.want {
			return fmt.Errorf("%s: two-level %v, want %v", tc.name, got, tc.want)
		}
	}
	// Alltoallv agrees on its path with an Allreduce (itself two-level).
	for _, k := range []int{3, 128} {
		n := c.Size()
		counts := make([]int, n)
		for i := range counts {
			counts[i] = k
		}
		want := int64(0)
		if twoLevel {
			want = 1
			if k*8 < alltoallNodeLarge {
				want = 2
			}
		}
		before := twoLevelRuns(c)
		if err := Alltoallv(c, make([]int64, k*n), counts, nil, make([]int64, k*n), counts, nil); err != nil {
			return err
		}
		if got := twoLevelRuns(c) - before; got != want {
			return fmt.Errorf("Alltoallv of %d: %d two-level collectives, want %d", k, got, want)
		}
	}
	return nil
}

// checkLanes runs a large Sum Allreduce and checks its result and that it
// went over lanes exactly when every host has as many ranks.
func checkLanes(c *Comm, want bool) error {
	const cnt = 9001 // 72 KiB of float64, not a multiple of the host size
	before := int64(0)
	if c.node != nil {
		before = c.node.lanes.Load()
	}
	buf := fillv[float64](c.Rank(), cnt)
	if err := Allreduce(c, buf, buf, Sum); err != nil {
		return err
	}
	if err := diff("lanes allreduce", buf, expect[float64]("sum", 0, c.Size(), cnt)); err != nil {
		return err
	}
	if got := c.node != nil && c.node.lanes.Load() > before; got != want {
		return fmt.Errorf("large Allreduce over lanes %v, want %v", got, want)
	}
	return nil
}

// bcasts broadcasts every count from three roots and checks the result.
func bcasts(c *Comm, counts []int) error {
	n, r := c.Size(), c.Rank()
	for _, cnt := range counts {
		for _, root := range slices.Compact([]int{0, n - 1, n / 2}) {
			want := fillv[int32](root+100, cnt)
			buf := make([]int32, cnt)
			if r == root {
				copy(buf, want)
			}
			if err := Bcast(c, buf, root); err != nil {
				return fmt.Errorf("bcast %d root %d: %w", cnt, root, err)
			}
			if err := diff(fmt.Sprintf("bcast %d root %d", cnt, root), buf, want); err != nil {
				return err
			}
		}
	}
	return nil
}

// nodeCases is everything the node-aware tests run on one communicator.
func nodeCases(c *Comm, large bool) error {
	if err := c.Barrier(); err != nil {
		return err
	}
	counts, xcounts := []int{0, 1, 13, 100}, []int{6, 203}
	if large { // 9000 float64, 20000 int32: above 64 KiB
		counts, xcounts = []int{0, 5, 9000}, []int{6, 20000}
	}
	if err := bcasts(c, append(counts, xcounts...)); err != nil {
		return err
	}
	if err := reductions[float64](c, counts, nil); err != nil {
		return err
	}
	if err := reductions[int32](c, xcounts, xorOp[int32]); err != nil {
		return err
	}
	items := []int{1, 13, 37}
	if large { // 20011 2x2 matrices: lanes and ring blocks not whole
		items = []int{3, 20011}
	}
	if err := units(c, items); err != nil {
		return err
	}
	mcounts := []int{0, 1, 7}
	if large {
		mcounts = []int{3, 3000}
	}
	if err := movement(c, mcounts); err != nil {
		return err
	}
	return c.Barrier()
}

func runNodeLayouts(t *testing.T, large bool) {
	for _, l := range nodeLayouts {
		t.Run(l.name, func(t *testing.T) {
			two, ordered, equal := wantNodes(l.hosts)
			comms := hostsWorld(t, l.hosts)
			each(t, comms, func(c *Comm) error {
				if err := nodeCases(c, large); err != nil {
					return err
				}
				if err := checkLanes(c, equal); err != nil {
					return err
				}
				return checkPath(c, two, ordered)
			})
			checkShmLinks(t, comms, l.hosts)
		})
	}
}

func TestCollNodeAware(t *testing.T) { runNodeLayouts(t, true) }

// TestCollNodeAwareLowered runs the large-message algorithms at every
// level (host, leaders) on tiny and odd buffers.
func TestCollNodeAwareLowered(t *testing.T) {
	lowered(t)
	runNodeLayouts(t, false)
}

// TestCollNodeAwareSubComms checks Dup'd and Split communicators: each
// learns its own layout (a Split half may be two-level when its parent is,
// or not) and its context ids do not collide with the parent's.
func TestCollNodeAwareSubComms(t *testing.T) {
	const hosts = "AAABBBCC"
	comms := hostsWorld(t, hosts)
	each(t, comms, func(c *Comm) error {
		// The parent learns its layout first, then Dup and Split must
		// still get fresh context ids.
		if err := c.Barrier(); err != nil {
			return err
		}
		dup, err := c.Dup()
		if err != nil {
			return err
		}
		two, ordered, _ := wantNodes(hosts)
		if err := nodeCases(dup, true); err != nil {
			return fmt.Errorf("dup: %w", err)
		}
		if err := checkPath(dup, two, ordered); err != nil {
			return fmt.Errorf("dup: %w", err)
		}
		for _, split := range []struct {
			name       string
			color, key int
		}{
			{"halves", c.Rank() % 2, c.Rank()},         // hosts AABC / ABBC
			{"reversed", 0, -c.Rank()},                 // CCBBBAAA
			{"first-and-last", c.Rank() / 6, c.Rank()}, // AAABBB / CC
		} {
			sub, err := c.Split(split.color, split.key)
			if err != nil {
				return err
			}
			var sh strings.Builder
			for i := 0; i < sub.Size(); i++ {
				w, _ := sub.WorldRank(i)
				sh.WriteByte(hosts[w])
			}
			two, ordered, equal := wantNodes(sh.String())
			if err := nodeCases(sub, false); err != nil {
				return fmt.Errorf("%s (%s): %w", split.name, sh.String(), err)
			}
			if err := checkPath(sub, two, ordered); err != nil {
				return fmt.Errorf("%s (%s): %w", split.name, sh.String(), err)
			}
			if err := checkLanes(sub, equal); err != nil {
				return fmt.Errorf("%s (%s): %w", split.name, sh.String(), err)
			}
			// Parent and child collectives interleave without mixing.
			x := []int64{int64(c.Rank())}
			if err := Allreduce(c, x, x, Sum); err != nil {
				return err
			}
			if want := int64(len(hosts) * (len(hosts) - 1) / 2); x[0] != want {
				return fmt.Errorf("parent allreduce after %s: %d, want %d", split.name, x[0], want)
			}
		}
		return checkPath(c, two, ordered)
	})
}

// TestCollNodeAwareFlatWithoutHosts: ranks of one real host (no override)
// keep the flat algorithms.
func TestCollNodeAwareFlatWithoutHosts(t *testing.T) {
	comms, _ := shmWorld(t, 4, nil)
	each(t, comms, func(c *Comm) error { return checkPath(c, false, true) })
}

// TestCollNodeAwarePeerFailure: a rank that leaves mid-job makes every
// other rank's two-level collectives fail with a *PeerError (directly, or
// through a leader that failed and finalized), never hang.
func TestCollNodeAwarePeerFailure(t *testing.T) {
	for _, coll := range []string{"barrier", "allreduce", "bcast", "reduce"} {
		for _, hosts := range []string{"AABBB", "ABBAB", "AABBCC"} {
			t.Run(coll+"/"+hosts, func(t *testing.T) {
				comms := hostsWorld(t, hosts)
				errs := make([]error, len(comms))
				each(t, comms, func(c *Comm) error {
					// connect every pair and learn the layout first
					if err := Alltoall(c, make([]int, c.Size()), make([]int, c.Size())); err != nil {
						return err
					}
					if err := c.Barrier(); err != nil {
						return err
					}
					if c.Rank() == 3 {
						return c.Finalize()
					}
					buf := make([]float64, 20000)
					out := make([]float64, 20000)
					var err error
					for i := 0; i < 10 && err == nil; i++ {
						switch coll {
						case "barrier":
							err = c.Barrier()
						case "allreduce":
							err = Allreduce(c, buf, out, Sum)
						case "bcast":
							err = Bcast(c, buf, 0)
						case "reduce":
							err = Reduce(c, buf, out, Sum, 4)
						}
					}
					errs[c.Rank()] = err
					c.Finalize()
					return nil
				})
				for r, err := range errs {
					var pe *PeerError
					if r != 3 && !errors.As(err, &pe) {
						t.Errorf("rank %d: %v, want a PeerError", r, err)
					}
				}
			})
		}
	}
}

// TestSplitOutOfContextIDs: Split never hands out the context ids reserved
// for the node-aware collectives' sub-communicators.
func TestSplitOutOfContextIDs(t *testing.T) {
	comms, _ := world(t, 3, nil)
	each(t, comms, func(c *Comm) error {
		c.p.ctxMu.Lock()
		c.p.nextCtx = ctxDerived>>1 - 1
		c.p.ctxMu.Unlock()
		d, err := c.Dup() // the last id
		if err != nil {
			return err
		}
		if d.ctx >= ctxDerived {
			return fmt.Errorf("Dup got context %#x", d.ctx)
		}
		if _, err := c.Dup(); !errors.Is(err, ErrArg) {
			return fmt.Errorf("Dup past the last id: %v, want ErrArg", err)
		}
		return nil
	})
}

// BenchmarkCollAlltoallNode compares flat and two-level Alltoall on 8
// ranks on two pretend hosts (loopback TCP between them), by block size:
// go test -run ^$ -bench AlltoallNode -benchtime 200x ./runtime/
func BenchmarkCollAlltoallNode(b *testing.B) {
	const hosts = "AAAABBBB"
	for _, two := range []bool{false, true} {
		for _, bs := range benchA2ASizes {
			b.Run(fmt.Sprintf("two-level=%v/%dB", two, bs), func(b *testing.B) {
				saved := alltoallNodeLarge
				alltoallNodeLarge = 0
				if two {
					alltoallNodeLarge = 1 << 30
				}
				defer func() { alltoallNodeLarge = saved }()
				k := bs / 8
				t := &testing.T{}
				comms, _ := world(t, len(hosts), func(c *Config) {
					c.testHost = "host-" + hosts[c.Bootstrap.Rank():c.Bootstrap.Rank()+1]
				})
				benchComms(b, comms, func(c *Comm) error {
					return Alltoall(c, make([]float64, k*len(hosts)), make([]float64, k*len(hosts)))
				})
			})
		}
	}
}

var benchA2ASizes = []int{8, 256, 1024, 4096, 16384, 65536}
