package ckpt

import (
	"os"
	"slices"
	"testing"

	"github.com/gompi/gompi/ckpt/layout"
)

func TestPartnerPlan(t *testing.T) {
	for _, tc := range []struct {
		nodes []string
		want  []int
	}{
		{[]string{"a", "a", "b", "b"}, []int{2, 3, 0, 1}},
		{[]string{"a", "b", "a", "b"}, []int{1, 0, 3, 2}},
		{[]string{"a", "a", "a", "b"}, []int{3, 3, 3, 0}},
		{[]string{"a", "b", "c"}, []int{1, 2, 0}},
		{[]string{"a", "a", "b", "c", "c", "c"}, []int{2, 2, 3, 0, 1, 0}},
		{[]string{"a", "a"}, []int{-1, -1}},
		{[]string{"a"}, []int{-1}},
	} {
		got := partnerPlan(tc.nodes)
		if !slices.Equal(got, tc.want) {
			t.Errorf("partnerPlan(%q) = %v, want %v", tc.nodes, got, tc.want)
		}
		for r, p := range got {
			if p >= 0 && tc.nodes[p] == tc.nodes[r] {
				t.Errorf("partnerPlan(%q): rank %d's partner %d is on its own node", tc.nodes, r, p)
			}
		}
	}
}

// twoNodes simulates ranks 0,1 on node A and 2,3 on node B: one node-local
// cache each, one shared prefix.
type twoNodes struct {
	prefix, a, b string
	partner      bool
}

func newTwoNodes(t *testing.T, partner bool) *twoNodes {
	return &twoNodes{prefix: t.TempDir(), a: t.TempDir(), b: t.TempDir(), partner: partner}
}

func (n *twoNodes) cfg(rank int) Config {
	cache := n.a
	if rank >= 2 {
		cache = n.b
	}
	return Config{Prefix: n.prefix, Cache: cache, Partner: n.partner, Keep: 3}
}

// crashBeforeFlush writes epoch 1 (step 10, flushed to the prefix) and
// then epoch 2 (step 20), and makes it as if the job died before epoch
// 2's flush completed: the prefix never committed epoch 2. loseB: node
// B's cache is gone too.
func (n *twoNodes) crashBeforeFlush(t *testing.T, loseB bool) {
	t.Helper()
	checkpointStepsFor(t, 4, n.cfg, 10)
	checkpointStepsFor(t, 4, n.cfg, 20)
	if err := layout.Remove(n.prefix, 2); err != nil {
		t.Fatal(err)
	}
	if !loseB {
		return
	}
	if err := os.RemoveAll(n.b); err != nil {
		t.Fatal(err)
	}
}

// flipByte changes one byte of path.
func flipByte(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	b[3] ^= 1
	return os.WriteFile(path, b, 0o644)
}

func TestPartnerCopies(t *testing.T) {
	n := newTwoNodes(t, true)
	checkpointStepsFor(t, 4, n.cfg, 10)
	// Node A holds B's ranks' files and B holds A's, each under a
	// committed partner manifest, intact.
	for dir, want := range map[string][]int{n.a: {2, 3}, n.b: {0, 1}} {
		pd := layout.PartnerDir(dir)
		rs, err := layout.Ranks(pd, 1)
		if err != nil || !slices.Equal(rs, want) {
			t.Fatalf("%s holds ranks %v (%v), want %v", pd, rs, err, want)
		}
		m, err := layout.ReadManifest(pd, 1)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range want {
			if err := layout.VerifyFile(pd, 1, m.Files[r]); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestPartnerRebuildsLostNode(t *testing.T) {
	for _, tc := range []struct {
		name    string
		partner bool
		moved   bool // restart with every rank on node A
		keepB   bool // node B's cache survives
		damage  func(n *twoNodes) error
		want    int
	}{
		// Without partner copies the epoch is gone with node B: epoch 1.
		{name: "no partner", want: 1},
		{name: "partner", partner: true, want: 2},
		{name: "partner, ranks moved to the node left", partner: true, moved: true, want: 2},
		{name: "partner copy corrupt", partner: true, want: 1, damage: func(n *twoNodes) error {
			return flipByte(layout.RankPath(layout.PartnerDir(n.a), 2, 3))
		}},
		// One byte of a cache file, no node lost: the partner copy on
		// the other node replaces it.
		{name: "cache file corrupt, partner", partner: true, keepB: true, want: 2, damage: func(n *twoNodes) error {
			return flipByte(layout.RankPath(n.a, 2, 1))
		}},
		{name: "cache file corrupt, no partner", keepB: true, want: 1, damage: func(n *twoNodes) error {
			return flipByte(layout.RankPath(n.a, 2, 1))
		}},
		{name: "partner copy deleted", partner: true, want: 1, damage: func(n *twoNodes) error {
			return os.Remove(layout.RankPath(layout.PartnerDir(n.a), 2, 2))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newTwoNodes(t, tc.partner)
			n.crashBeforeFlush(t, !tc.keepB)
			if tc.damage != nil {
				if err := tc.damage(n); err != nil {
					t.Fatal(err)
				}
			}
			cfg := n.cfg
			if tc.moved {
				cfg = func(int) Config { return n.cfg(0) }
			}
			eps, sts, errs := restoreAllFor(t, 4, cfg, -1)
			noErrs(t, errs)
			for r, e := range eps {
				if e != tc.want {
					t.Fatalf("rank %d restored epoch %d, want %d (all: %v)", r, e, tc.want, eps)
				}
			}
			checkState(t, sts, 10*tc.want)
			if tc.want != 2 {
				return
			}
			// The restart completed the interrupted flush: epoch 2 is
			// committed in the prefix and intact there.
			if bad, err := layout.Verify(n.prefix, 2); err != nil || bad != nil {
				t.Fatalf("prefix epoch 2 after the restart: %v %v", bad, err)
			}
			// With the prefix holding it, losing every cache is survivable.
			os.RemoveAll(n.a)
			os.RemoveAll(n.b)
			eps, sts, errs = restoreAllFor(t, 4, n.cfg, -1)
			noErrs(t, errs)
			if eps[0] != 2 {
				t.Fatalf("restored %v from the prefix, want 2", eps)
			}
			checkState(t, sts, 20)
		})
	}
}

func TestPartnerConfig(t *testing.T) {
	t.Setenv(EnvPrefix, "/p")
	t.Setenv(EnvCache, "/c")
	t.Setenv(EnvPartner, "1")
	if c := FromEnv(); c.validate() != nil || !c.Partner {
		t.Fatalf("FromEnv = %+v", c)
	}
	t.Setenv(EnvPartner, "yes please")
	if c := FromEnv(); c.validate() == nil {
		t.Fatal("bad GOMPI_CKPT_PARTNER accepted")
	}
	c := Config{Prefix: "/p", Partner: true}
	if err := c.validate(); err == nil {
		t.Fatal("a partner copy without a cache accepted")
	}
}
