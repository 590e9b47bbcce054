package ckpt_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCacheAfterPrefixRemoved: once the user removed a prefix's epochs
// (gompiexec ckpt rm -all, rm -rf, or ckpt rm of the newest epochs to roll
// back), the next run does not restore the node caches' copies of them
// (it did, from /dev/shm, with nothing said): they are removed from the
// cache, and said so. Without a removal, or after removing only older
// epochs, the cache's epochs serve a restart as before.
func TestCacheAfterPrefixRemoved(t *testing.T) {
	// ckptRm runs gompiexec ckpt rm [opts] PREFIX [epochs].
	ckptRm := func(opts []string, epochs ...string) func(t *testing.T, prefix string) {
		return func(t *testing.T, prefix string) {
			args := append(append(append([]string{"ckpt", "rm"}, opts...), prefix), epochs...)
			// As a one-rank job of the test's gompiexec (run): one copy.
			if r := run(t, append([]string{"-n", "1", bin("gompiexec")}, args...)...); r.Code != 0 {
				t.Fatalf("gompiexec %v: exit %d\nstdout:\n%s\nstderr:\n%s", args, r.Code, r.Stdout, r.Stderr)
			}
		}
	}
	for _, tc := range []struct {
		name   string
		remove func(t *testing.T, prefix string)
		want   string // what the second run says on rank 0
		purged bool   // the cache's epochs were said removed
	}{
		{"kept", func(*testing.T, string) {}, "restored epoch 3", false},
		{"ckpt rm -all", ckptRm([]string{"-all"}), "no checkpoint", true},
		{"rm -rf", func(t *testing.T, prefix string) {
			if err := os.RemoveAll(prefix); err != nil {
				t.Fatal(err)
			}
		}, "no checkpoint", true},
		{"ckpt rm of the newest epoch", ckptRm(nil, "3"), "restored epoch 2", true},
		{"ckpt rm of an old epoch", ckptRm(nil, "1"), "restored epoch 3", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix, cache := t.TempDir(), filepath.Join(t.TempDir(), "cache")
			args := []string{"-ckpoint-prefix", prefix, "-ckpoint-cache", cache, "-ckpoint-keep", "3", "-n", "2", bin("ckprobe")}
			if r := run(t, args...); r.Code != 0 || !strings.Contains(r.Stdout, "rank 1: committed epoch 3") {
				t.Fatalf("first run: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
			}
			tc.remove(t, prefix)
			r := run(t, append(args, "-ckpts", "0")...)
			if r.Code != 0 || !strings.Contains(r.Stdout, "rank 0: "+tc.want) || !strings.Contains(r.Stdout, "rank 1: "+tc.want) {
				t.Fatalf("second run after %s: exit %d, want every rank to say %q\nstdout:\n%s\nstderr:\n%s",
					tc.name, r.Code, tc.want, r.Stdout, r.Stderr)
			}
			if said := strings.Contains(r.Stderr, "removed from "+cache); said != tc.purged {
				t.Fatalf("the cache's epochs said removed: %v, want %v\n%s", said, tc.purged, r.Stderr)
			}
		})
	}
}
