package ckpt_test

import (
	"math/rand"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gompi/gompi/internal/testkit"
)

// TestKillAnywhere kills a rank or gompiexec itself with SIGKILL at random
// moments of checkpointed runs (while ranks write epochs, while caches
// flush), then restarts: every restart must resume from the newest epoch
// intact at that moment, and the final grid must equal an uninterrupted
// run's bit for bit. 50 kills; 8 with -short. Every fourth run keeps its
// grid in runtime/cow's memory: its cached checkpoints are snapshots
// still being written when the kill comes, and their writers must not
// outlive the rank.
func TestKillAnywhere(t *testing.T) {
	kills := 50
	if testing.Short() {
		kills = 8
	}
	want := baseline(t)
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	prefix, cache := t.TempDir(), filepath.Join(t.TempDir(), "cache")
	// Small epochs often: most of the run is checkpointing or flushing.
	extra := []string{"-ckpt-every", "2", "-delay", "1ms"}
	var last string
	for i := 0; i < kills; i++ {
		opts := []string{}
		useCache := i%2 == 1
		if useCache {
			opts = []string{"-ckpoint-cache", cache}
		}
		c := ""
		if useCache {
			c = cache
		}
		expect := newestIntact(prefix, c)
		ex := extra
		if i%4 == 3 {
			// Every other cached run snapshots its grid (runtime/cow).
			ex = append([]string{"-cow"}, extra...)
		}
		j := start(t, heatWith(prefix, opts, ex...)...)
		time.Sleep(time.Duration(150+rng.Intn(700)) * time.Millisecond)
		victim := "gompiexec"
		if rng.Intn(2) == 0 {
			var heats []int
			for _, pid := range testkit.MarkedProcs(j.Marker) {
				if p, err := testkit.ReadProc(pid); err == nil && p.Comm == "heat" {
					heats = append(heats, pid)
				}
			}
			if len(heats) > 0 {
				victim = "rank"
				syscall.Kill(heats[rng.Intn(len(heats))], syscall.SIGKILL)
			}
		}
		if victim == "gompiexec" {
			syscall.Kill(j.Cmd.Process.Pid, syscall.SIGKILL)
		}
		r := j.MustWait(t, 60*time.Second)
		if left := testkit.WaitGone(10*time.Second, func() []int { return testkit.MarkedProcs(j.Marker) }); left != nil {
			t.Fatalf("kill %d (%s): processes left behind: %v", i, victim, left)
		}
		decided := restoredRE.MatchString(r.Stdout) || strings.Contains(r.Stdout, "heat: no checkpoint")
		if got := restored(r); decided && got != expect {
			t.Fatalf("kill %d: the run restored epoch %d, the newest intact was %d\nstdout:\n%s\nstderr:\n%s",
				i, got, expect, r.Stdout, r.Stderr)
		}
		t.Logf("kill %d: %s killed, cache %v, cow %v, restored epoch %d, exit %d", i, victim, useCache, i%4 == 3, expect, r.Code)
		if r.Code == 0 {
			// Finished before the kill: start over from an empty prefix
			// next time round so later kills land mid-run.
			last = checksum(t, r)
			if last != want {
				t.Fatalf("kill %d: finished with checksum %s, uninterrupted %s", i, last, want)
			}
			prefix, cache = t.TempDir(), filepath.Join(t.TempDir(), "cache")
		}
	}
	r := run(t, heatWith(prefix, []string{"-ckpoint-cache", cache}, extra...)...)
	if got := checksum(t, r); got != want {
		t.Fatalf("final run after %d kills: checksum %s, uninterrupted %s", kills, got, want)
	}
}
