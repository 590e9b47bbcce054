package ckpt_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gompi/gompi/ckpt/layout"
	"github.com/gompi/gompi/internal/testkit"
)

// recycleHeat is heat with a larger grid (2 MiB per rank file), an epoch
// every 2 steps and one epoch kept, so that cache files are recycled from
// the third epoch on.
var recycleHeat = []string{"-n", "1024", "-steps", "120", "-ckpt-every", "2", "-delay", "1ms"}

// TestKillWhileOverwritingSpare kills -9 the rank that is overwriting a
// spare cache file (the storage of a retired or preallocated epoch file,
// renamed to the new epoch's temporary name and overwritten in place),
// caught by its open file's inode, then restarts: every restart resumes
// from the newest epoch intact at that moment, the half-overwritten epoch
// is never taken for whole, and the final grid equals an uninterrupted
// run's.
func TestKillWhileOverwritingSpare(t *testing.T) {
	kills := 5
	if testing.Short() {
		kills = 2
	}
	want := checksum(t, run(t, append([]string{"-n", "4", bin("heat")}, recycleHeat...)...))
	prefix, cache := t.TempDir(), filepath.Join(t.TempDir(), "cache")
	args := func() []string {
		return append([]string{"-ckpoint-prefix", prefix, "-ckpoint-keep", "1", "-ckpoint-cache", cache,
			"-n", "4", bin("heat")}, recycleHeat...)
	}
	hits := 0
	for i := 0; hits < kills; i++ {
		if i == 4*kills {
			t.Fatalf("caught a rank overwriting a spare in %d of %d runs, want %d", hits, i, kills)
		}
		expect := newestIntact(prefix, cache)
		j := start(t, args()...)
		victim := overwritingSpare(j, cache)
		if victim > 0 {
			syscall.Kill(victim, syscall.SIGKILL)
			hits++
		}
		r := j.MustWait(t, 120*time.Second)
		if left := testkit.WaitGone(10*time.Second, func() []int { return testkit.MarkedProcs(j.Marker) }); left != nil {
			t.Fatalf("run %d: processes left behind: %v", i, left)
		}
		if got := restored(r); got != expect {
			t.Fatalf("run %d: restored epoch %d, the newest intact was %d\nstdout:\n%s\nstderr:\n%s", i, got, expect, r.Stdout, r.Stderr)
		}
		t.Logf("run %d: restored epoch %d, killed a rank overwriting a spare: %v, exit %d", i, expect, victim > 0, r.Code)
		if r.Code == 0 {
			if got := checksum(t, r); got != want {
				t.Fatalf("run %d: checksum %s, uninterrupted %s", i, got, want)
			}
			prefix, cache = t.TempDir(), filepath.Join(t.TempDir(), "cache")
		}
	}
	r := run(t, args()...)
	if got := checksum(t, r); got != want {
		t.Fatalf("final run after %d kills: checksum %s, uninterrupted %s", kills, got, want)
	}
}

// overwritingSpare watches job j's heat ranks until one has open, as an
// epoch's temporary rank file, a file that was a spare in cache's spare
// directory, and returns its pid; 0 if the job ends first.
func overwritingSpare(j *testkit.Job, cache string) int {
	var heats []int
	spares := map[uint64]bool{}
	for {
		select {
		case <-j.Done():
			return 0
		default:
		}
		if len(heats) < 4 {
			heats = heats[:0]
			for _, pid := range testkit.MarkedProcs(j.Marker) {
				if p, err := testkit.ReadProc(pid); err == nil && p.Comm == "heat" {
					heats = append(heats, pid)
				}
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		ents, _ := os.ReadDir(layout.SpareDir(cache))
		for _, de := range ents {
			if info, err := de.Info(); err == nil {
				spares[info.Sys().(*syscall.Stat_t).Ino] = true
			}
		}
		for _, pid := range heats {
			fdDir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
			fds, _ := os.ReadDir(fdDir)
			for _, fd := range fds {
				target, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
				if err != nil || !strings.HasPrefix(target, cache) || !strings.HasSuffix(target, ".tmp") {
					continue
				}
				st, err := os.Stat(filepath.Join(fdDir, fd.Name()))
				if err == nil && spares[st.Sys().(*syscall.Stat_t).Ino] {
					return pid
				}
			}
		}
		time.Sleep(200 * time.Microsecond)
	}
}
