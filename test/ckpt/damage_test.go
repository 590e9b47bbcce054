package ckpt_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gompi/gompi/ckpt/layout"
)

// TestDamageSaidOnRestart: a restart that passes over a damaged epoch
// says which file of which rank failed which check, on the way to the
// older epoch it restores. It did so silently: the job resumed from an
// older epoch than the user expected, and the bad disk or the truncated
// copy went unreported.
func TestDamageSaidOnRestart(t *testing.T) {
	flip := func(p string) error {
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		b[len(b)/2] ^= 0x10
		return os.WriteFile(p, b, 0o644)
	}
	for _, tc := range []struct {
		name   string
		file   func(prefix string) string
		damage func(p string) error
		says   []string
	}{
		{"bit flip in a rank file", func(p string) string { return layout.RankPath(p, 3, 1) }, flip,
			[]string{"rank 1", "crc32c"}},
		{"rank file cut short", func(p string) string { return layout.RankPath(p, 3, 1) },
			func(p string) error { return os.Truncate(p, 100) }, []string{"rank 1", "100 bytes"}},
		{"rank file gone", func(p string) string { return layout.RankPath(p, 3, 0) }, os.Remove,
			[]string{"rank 0", "missing"}},
		{"manifest damaged", func(p string) string { return filepath.Join(layout.EpochDir(p, 3), layout.ManifestName) },
			func(p string) error { return os.Truncate(p, 40) }, []string{"corrupt"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := t.TempDir()
			args := []string{"-ckpoint-prefix", prefix, "-ckpoint-keep", "5", "-n", "2", bin("ckprobe")}
			if r := run(t, args...); r.Code != 0 {
				t.Fatalf("first run: exit %d\n%s", r.Code, r.Stderr)
			}
			file := tc.file(prefix)
			if err := tc.damage(file); err != nil {
				t.Fatal(err)
			}
			r := run(t, append(args, "-ckpts", "0")...)
			if r.Code != 0 || !strings.Contains(r.Stdout, "rank 0: restored epoch 2") {
				t.Fatalf("restart: exit %d, want epoch 2 restored\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
			}
			for _, s := range append([]string{file, "epoch 3"}, tc.says...) {
				if !strings.Contains(r.Stderr, s) {
					t.Fatalf("restart passed over the damaged epoch 3 without saying %q\nstderr:\n%s", s, r.Stderr)
				}
			}
		})
	}
}
