package ckpt_test

import (
	"strings"
	"testing"
	"time"
)

// TestMismatchedCollectives: a rank program that calls a collective of
// package ckpt on some ranks only (Checkpoint on rank 0 alone, say, under
// a condition only rank 0 evaluates), while the others call another,
// fails on every rank with an error naming both calls, instead of
// hanging in the mismatched reductions until the batch system's limit.
func TestMismatchedCollectives(t *testing.T) {
	for _, tc := range []struct {
		rank0, others string
		cache         bool
	}{
		{"Checkpoint", "NeedCheckpoint", false},
		{"Checkpoint", "NeedCheckpoint", true},
		{"Checkpoint", "Close", false},
		{"Flush", "Checkpoint", true},
		{"Restore", "NeedCheckpoint", false},
		{"Restore", "Checkpoint", true},
		{"HaveRestart", "Restore", false},
	} {
		name := tc.rank0 + "/" + tc.others
		if tc.cache {
			name += "/cache"
		}
		t.Run(name, func(t *testing.T) {
			// Every rank must get to say its error: no cleanup at the
			// first rank that exits.
			args := []string{"-disable-auto-cleanup", "-ckpoint-prefix", t.TempDir()}
			if tc.cache {
				args = append(args, "-ckpoint-cache", t.TempDir())
			}
			args = append(args, "-n", "3", bin("ckprobe"), "-misuse", tc.rank0+"/"+tc.others)
			j := start(t, args...)
			r, err := j.Wait(30 * time.Second)
			if err != nil {
				t.Fatalf("rank 0 calling %s while the others call %s: %v", tc.rank0, tc.others, err)
			}
			want := "ranks called different collective operations"
			if r.Code == 0 || strings.Count(r.Stderr, want) < 3 || strings.Contains(r.Stderr, "panic") {
				t.Fatalf("exit %d: want every rank's error saying %q, naming %s and %s\nstdout:\n%s\nstderr:\n%s",
					r.Code, want, tc.rank0, tc.others, r.Stdout, r.Stderr)
			}
			for _, op := range []string{tc.rank0, tc.others} {
				if !strings.Contains(r.Stderr, op) {
					t.Fatalf("the error does not name %s:\n%s", op, r.Stderr)
				}
			}
		})
	}
}

// TestRestoreBeforeRegister: Restore called before the state is
// registered fails on every rank, naming the sections the epoch holds,
// instead of returning the epoch with nothing loaded: the program said it
// had restored epoch 3 and ran again from its initial state.
func TestRestoreBeforeRegister(t *testing.T) {
	prefix := t.TempDir()
	args := []string{"-ckpoint-prefix", prefix, "-n", "2", bin("ckprobe")}
	if r := run(t, args...); r.Code != 0 {
		t.Fatalf("first run: exit %d\n%s", r.Code, r.Stderr)
	}
	r := run(t, append([]string{"-disable-auto-cleanup"}, append(args, "-misuse", "register-after-restore")...)...)
	if r.Code == 0 || strings.Contains(r.Stdout, "restored epoch") || strings.Count(r.Stderr, "before Restore") < 2 ||
		!strings.Contains(r.Stderr, `"state"`) {
		t.Fatalf("Restore before Register: exit %d, want every rank's error naming the saved sections and saying to register them before Restore\nstdout:\n%s\nstderr:\n%s",
			r.Code, r.Stdout, r.Stderr)
	}
}
