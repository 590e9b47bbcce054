package ckpt_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCacheAfterPrefixRemoved: once the user removed a prefix's epochs
// (gompiexec ckpt rm -all, or rm -rf), the next run starts from the
// beginning: the node caches' copies of the removed epochs are not
// restored (they were, from /dev/shm, with nothing said), and are
// removed from the cache. Without the removal the cache's epochs serve a
// restart as before.
func TestCacheAfterPrefixRemoved(t *testing.T) {
	for _, tc := range []struct {
		name    string
		remove  func(t *testing.T, prefix string)
		restart bool // the second run restores epoch 3
	}{
		{"kept", func(*testing.T, string) {}, true},
		{"ckpt rm -all", func(t *testing.T, prefix string) {
			if r := run(t, bin("gompiexec"), "ckpt", "rm", "-all", prefix); r.Code != 0 {
				t.Fatalf("ckpt rm -all: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
			}
		}, false},
		{"rm -rf", func(t *testing.T, prefix string) {
			if err := os.RemoveAll(prefix); err != nil {
				t.Fatal(err)
			}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix, cache := t.TempDir(), filepath.Join(t.TempDir(), "cache")
			args := []string{"-ckpoint-prefix", prefix, "-ckpoint-cache", cache, "-n", "2", bin("ckprobe")}
			if r := run(t, args...); r.Code != 0 || !strings.Contains(r.Stdout, "rank 1: committed epoch 3") {
				t.Fatalf("first run: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
			}
			tc.remove(t, prefix)
			r := run(t, args...)
			restored := strings.Contains(r.Stdout, "rank 0: restored epoch 3") && strings.Contains(r.Stdout, "rank 1: restored epoch 3")
			fresh := strings.Contains(r.Stdout, "rank 0: no checkpoint") && strings.Contains(r.Stdout, "rank 1: no checkpoint")
			if r.Code != 0 || restored != tc.restart || fresh == tc.restart {
				t.Fatalf("second run after %s: exit %d, restored epoch 3 %v, want %v\nstdout:\n%s\nstderr:\n%s",
					tc.name, r.Code, restored, tc.restart, r.Stdout, r.Stderr)
			}
			if !tc.restart && !strings.Contains(r.Stderr, "removed from "+cache) {
				t.Fatalf("the cache's stale epochs were not said removed:\n%s", r.Stderr)
			}
		})
	}
}
