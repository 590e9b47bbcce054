// Package ckpt_test runs examples/heat under the real gompiexec with
// checkpoints, in the spirit of LLNL SCR's test scripts: run and continue,
// damage epochs in every way a crash or a bad disk can, kill ranks and the
// launcher at random moments, and check every restart resumes from the
// newest complete epoch with a final grid bitwise identical to an
// uninterrupted run's.
package ckpt_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gompi/gompi/ckpt/layout"
	"github.com/gompi/gompi/internal/testkit"
)

var binDir string

func TestMain(m *testing.M) {
	os.Exit(testkit.MainWithBinaries(m, &binDir, "gompi-ckpt-",
		testkit.Pkg("cmd/gompiexec"), testkit.Pkg("cmd/gompi-proxy"), testkit.Pkg("examples/heat"),
		testkit.Pkg("test/ckpt/progs/ckprobe")))
}

func bin(name string) string { return filepath.Join(binDir, name) }

// heatArgs is a short heat run: 120 steps, an epoch every 10.
var heatArgs = []string{"-n", "96", "-steps", "120", "-ckpt-every", "10", "-delay", "2ms"}

// start starts gompiexec with args, tagged with a marker of its own.
func start(t *testing.T, args ...string) *testkit.Job {
	t.Helper()
	marker := testkit.NewMarker("gompi-ckpt-test")
	full := append([]string{"-genv", testkit.MarkerVar, marker}, args...)
	j := testkit.NewJob(marker, "", bin("gompiexec"), full...)
	t.Cleanup(func() { testkit.KillMarked(marker) })
	if err := j.Start(); err != nil {
		t.Fatal(err)
	}
	return j
}

// run runs gompiexec to its end and checks it left nothing behind.
func run(t *testing.T, args ...string) testkit.Result {
	t.Helper()
	j := start(t, args...)
	r := j.MustWait(t, 120*time.Second)
	if left := testkit.WaitGone(5*time.Second, func() []int { return testkit.MarkedProcs(j.Marker) }); left != nil {
		t.Fatalf("processes left behind: %v", left)
	}
	return r
}

// heat is gompiexec's command line for heat on 4 ranks checkpointing to
// prefix (none if empty) with launcher options opts, heat options extra.
func heatWith(prefix string, opts []string, extra ...string) []string {
	args := append([]string{}, opts...)
	if prefix != "" {
		args = append(args, "-ckpoint-prefix", prefix, "-ckpoint-keep", "20")
	}
	args = append(args, "-n", "4", bin("heat"))
	return append(append(args, heatArgs...), extra...)
}

func heat(prefix string, extra ...string) []string { return heatWith(prefix, nil, extra...) }

// newestIntact is the epoch a restart must resume from: the newest with a
// manifest (in the cache or the prefix) whose every rank file is intact
// in one of them; 0 if none.
func newestIntact(prefix, cache string) int {
	best := 0
	for _, d := range []string{prefix, cache} {
		if d == "" {
			continue
		}
		eps, _ := layout.List(d)
		for _, e := range eps {
			if !e.Committed() || e.Epoch <= best {
				continue
			}
			ok := true
			for _, f := range e.Manifest.Files {
				if layout.VerifyFile(prefix, e.Epoch, f) != nil && (cache == "" || layout.VerifyFile(cache, e.Epoch, f) != nil) {
					ok = false
				}
			}
			if ok {
				best = e.Epoch
			}
		}
	}
	return best
}

var checksumRE = regexp.MustCompile(`(?m)^checksum ([0-9a-f]{64})$`)
var restoredRE = regexp.MustCompile(`(?m)^heat: restored epoch (\d+) at step (\d+)$`)

func checksum(t *testing.T, r testkit.Result) string {
	t.Helper()
	m := checksumRE.FindStringSubmatch(r.Stdout)
	if m == nil || r.Code != 0 {
		t.Fatalf("exit %d, no checksum\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
	}
	return m[1]
}

// restored is the epoch a run restored, 0 if none.
func restored(r testkit.Result) int {
	m := restoredRE.FindStringSubmatch(r.Stdout)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

var (
	baseOnce sync.Once
	base     string
)

// baseline is the checksum of an uninterrupted run without checkpoints.
func baseline(t *testing.T) string {
	t.Helper()
	baseOnce.Do(func() { base = checksum(t, run(t, heat("")...)) })
	if base == "" {
		t.Fatal("no baseline checksum")
	}
	return base
}

func TestCheckpointedRunMatches(t *testing.T) {
	prefix := t.TempDir()
	r := run(t, heat(prefix)...)
	if got := checksum(t, r); got != baseline(t) {
		t.Fatalf("checksum with checkpoints %s, without %s", got, baseline(t))
	}
	out := run(t, bin("gompiexec"), "ckpt", "verify", prefix)
	if !strings.Contains(out.Stdout, "a restart would resume from epoch 12") {
		t.Fatalf("ckpt verify after 12 epochs:\n%s%s", out.Stdout, out.Stderr)
	}
}

// TestRunAgainContinues: a second run continues from the first's newest
// epoch and numbers its epochs after it.
func TestRunAgainContinues(t *testing.T) {
	prefix := t.TempDir()
	r := run(t, heat(prefix, "-steps", "50")...)
	checksum(t, r)
	m, err := layout.Newest(prefix)
	if err != nil || m.Epoch != 5 || m.Step != 50 {
		t.Fatalf("after 50 steps: %+v %v, want epoch 5 at step 50", m, err)
	}
	r = run(t, heat(prefix)...)
	if e := restored(r); e != 5 {
		t.Fatalf("second run restored epoch %d, want 5\n%s", e, r.Stdout)
	}
	if got := checksum(t, r); got != baseline(t) {
		t.Fatalf("continued run's checksum %s, uninterrupted %s", got, baseline(t))
	}
	if m, _ := layout.Newest(prefix); m == nil || m.Epoch != 12 {
		t.Fatalf("epochs did not continue: newest %+v, want 12", m)
	}
}

// crashed leaves prefix (and cache) as a run killed at step 60 does.
func crashed(t *testing.T, prefix string, extra ...string) {
	t.Helper()
	r := run(t, heat(prefix, append([]string{"-crash-at", "60"}, extra...)...)...)
	if r.Code == 0 {
		t.Fatalf("crashing run exited 0:\n%s", r.Stderr)
	}
	if m, err := layout.Newest(prefix); err != nil || m.Epoch != 6 {
		t.Fatalf("after the crash: %+v %v, want epoch 6 (step 60) committed", m, err)
	}
}

func TestRestartAfterDamage(t *testing.T) {
	flip := func(path string) error {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		b[len(b)/3] ^= 0x01
		return os.WriteFile(path, b, 0o644)
	}
	for _, tc := range []struct {
		name   string
		damage func(prefix string) error
		extra  []string
		want   int
	}{
		{"intact", func(string) error { return nil }, nil, 6},
		{"one rank's file deleted", func(p string) error { return os.Remove(layout.RankPath(p, 6, 2)) }, nil, 5},
		{"one byte corrupted", func(p string) error { return flip(layout.RankPath(p, 6, 1)) }, nil, 5},
		{"two epochs damaged", func(p string) error {
			os.Remove(layout.RankPath(p, 6, 0))
			return flip(layout.RankPath(p, 5, 3))
		}, nil, 4},
		{"manifest gone", func(p string) error { return os.Remove(filepath.Join(layout.EpochDir(p, 6), layout.ManifestName)) }, nil, 5},
		{"a rank reports a failed read", func(string) error { return nil }, []string{"-fail-restore-rank", "2"}, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := t.TempDir()
			crashed(t, prefix)
			if err := tc.damage(prefix); err != nil {
				t.Fatal(err)
			}
			r := run(t, heat(prefix, tc.extra...)...)
			if e := restored(r); e != tc.want {
				t.Fatalf("restored epoch %d, want %d\nstdout:\n%s\nstderr:\n%s", e, tc.want, r.Stdout, r.Stderr)
			}
			if got := checksum(t, r); got != baseline(t) {
				t.Fatalf("checksum %s, uninterrupted %s", got, baseline(t))
			}
		})
	}
}

func TestRestartFromCache(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(prefix, cache string) error
	}{
		{"intact", func(_, _ string) error { return nil }},
		{"newest epoch deleted from the cache", func(_, c string) error { return layout.Remove(c, 6) }},
		{"whole cache removed", func(_, c string) error { return os.RemoveAll(c) }},
		{"newest epoch gone from cache and prefix", func(p, c string) error {
			layout.Remove(c, 6)
			return layout.Remove(p, 6)
		}},
		{"cache copy corrupted", func(_, c string) error { return os.Truncate(layout.RankPath(c, 6, 0), 5) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix, cache := t.TempDir(), filepath.Join(t.TempDir(), "cache")
			opts := []string{"-ckpoint-cache", cache}
			r := run(t, heatWith(prefix, opts, "-crash-at", "60")...)
			if r.Code == 0 {
				t.Fatalf("crashing run exited 0:\n%s", r.Stderr)
			}
			if m, err := layout.Newest(cache); err != nil || m.Epoch != 6 {
				t.Fatalf("cache after the crash: %+v %v, want epoch 6", m, err)
			}
			if err := tc.damage(prefix, cache); err != nil {
				t.Fatal(err)
			}
			want := newestIntact(prefix, cache)
			if want < 4 {
				t.Fatalf("only epoch %d is intact: the flush fell far behind", want)
			}
			r = run(t, heatWith(prefix, opts)...)
			if e := restored(r); e != want {
				t.Fatalf("restored epoch %d, want %d\nstdout:\n%s\nstderr:\n%s", e, want, r.Stdout, r.Stderr)
			}
			if got := checksum(t, r); got != baseline(t) {
				t.Fatalf("checksum %s, uninterrupted %s", got, baseline(t))
			}
			// The run's end flushed its newest epoch: the prefix alone
			// holds it.
			if m, err := layout.Newest(prefix); err != nil || m.Epoch < 12 {
				t.Fatalf("prefix after the run: %+v %v, want the final epoch", m, err)
			}
		})
	}
}

var snappedRE = regexp.MustCompile(`(?m)^heat: rank 0 snapshotted (\d+) checkpoints$`)

// TestSnapshotRestart: heat with its grid in runtime/cow's memory and a
// cache level checkpoints by copy-on-write snapshots (its halo exchange
// receives into the snapshotted grid over the shared-memory transport
// while the writers run); a run crashed at step 60 restarts from the
// newest intact epoch and ends with the uninterrupted run's checksum. With
// GOMPI_COW=off the same run takes the copy path.
func TestSnapshotRestart(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		snap bool
	}{
		{"snapshot", nil, true},
		{"GOMPI_COW=off", []string{"-genv", "GOMPI_COW", "off"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix, cache := t.TempDir(), filepath.Join(t.TempDir(), "cache")
			opts := append([]string{"-ckpoint-cache", cache}, tc.env...)
			r := run(t, heatWith(prefix, opts, "-cow", "-crash-at", "60")...)
			if r.Code == 0 {
				t.Fatalf("crashing run exited 0:\n%s", r.Stderr)
			}
			want := newestIntact(prefix, cache)
			if want < 3 {
				t.Fatalf("only epoch %d is intact after a crash at step 60", want)
			}
			r = run(t, heatWith(prefix, opts, "-cow")...)
			if e := restored(r); e != want {
				t.Fatalf("restored epoch %d, want %d\nstdout:\n%s\nstderr:\n%s", e, want, r.Stdout, r.Stderr)
			}
			if got := checksum(t, r); got != baseline(t) {
				t.Fatalf("checksum %s, uninterrupted %s", got, baseline(t))
			}
			m := snappedRE.FindStringSubmatch(r.Stdout)
			if m == nil || (m[1] != "0") != tc.snap {
				t.Fatalf("snapshotted checkpoints: %v, want some: %v\nstdout:\n%s", m, tc.snap, r.Stdout)
			}
		})
	}
}

// TestRunAgainOtherGrid: a second run with another -n over the same prefix
// stops with an error naming the epoch and both sizes (Restore resizes a
// registered slice to what was saved; heat indexed past the restored grid
// and panicked).
func TestRunAgainOtherGrid(t *testing.T) {
	prefix := t.TempDir()
	checksum(t, run(t, heat(prefix, "-steps", "20")...))
	r := run(t, heat(prefix, "-n", "120")...)
	if r.Code == 0 || strings.Contains(r.Stderr, "panic") || !strings.Contains(r.Stderr, "written with another -n") {
		t.Fatalf("run with another -n: exit %d, want an error naming the grid sizes, no panic\n%s", r.Code, r.Stderr)
	}
}
