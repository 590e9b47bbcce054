package ckpt_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/gompi/gompi/ckpt/layout"
	"github.com/gompi/gompi/internal/testkit"
)

// TestCacheBoundedWhileFlushesFail: with a prefix too full for any flush
// (a 1 MiB tmpfs, 1.6 MB epochs), the node cache keeps the newest
// -ckpoint-keep epochs, not every one: it kept them all, as the only
// copies of epochs whose flushes had failed for good, so a long job with a
// full prefix filled /dev/shm (the node's memory) one epoch at a time.
// The newest epochs stay, and a restart takes them from the cache.
func TestCacheBoundedWhileFlushesFail(t *testing.T) {
	prefix := filepath.Join(testkit.SmallTmpfs(t, 1<<20), "p")
	cache := t.TempDir()
	args := []string{"-ckpoint-prefix", prefix, "-ckpoint-cache", cache, "-ckpoint-keep", "2", "-n", "2",
		bin("ckprobe"), "-size", "100000"}
	r := run(t, append(args, "-ckpts", "8")...)
	if !strings.Contains(r.Stderr, "no space left on device") {
		t.Fatalf("exit %d: the flushes did not fail for want of space\n%s", r.Code, r.Stderr)
	}
	eps, err := layout.List(cache)
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for _, e := range eps {
		got = append(got, e.Epoch)
	}
	if len(got) != 2 || got[0] != 7 || got[1] != 8 || !eps[0].Committed() || !eps[1].Committed() {
		t.Fatalf("cache after 8 epochs whose flushes all failed, -ckpoint-keep 2: epochs %v, want 7 and 8 committed", got)
	}
	r = run(t, append(args, "-ckpts", "0")...)
	if !strings.Contains(r.Stdout, "rank 0: restored epoch 8") || !strings.Contains(r.Stdout, "rank 1: restored epoch 8") {
		t.Fatalf("restart from the cache: exit %d\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
	}
}
