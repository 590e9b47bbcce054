package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestUnderGompiexec runs every benchmark with tiny sizes and iteration
// counts as a 2-rank job and checks the output format only (never the
// figures: timing belongs to make bench).
func TestUnderGompiexec(t *testing.T) {
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", dir+"/",
		"github.com/gompi/gompi/cmd/gompiexec", "github.com/gompi/gompi/cmd/gompi-proxy",
		"github.com/gompi/gompi/cmd/gompi-bench")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	run := func(t *testing.T, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		argv := append([]string{"-n", "2", filepath.Join(dir, "gompi-bench")}, args...)
		cmd := exec.CommandContext(ctx, filepath.Join(dir, "gompiexec"), argv...)
		cmd.Env = append(os.Environ(), "GOMPI_PROXY="+filepath.Join(dir, "gompi-proxy"))
		out, err := cmd.CombinedOutput()
		if ctx.Err() != nil {
			t.Fatalf("gompiexec %v did not finish within a minute:\n%s", argv, out)
		}
		return string(out), err
	}
	sizes := func(from, to int) []int {
		var ns []int
		for n := from; n <= to; n *= 2 {
			ns = append(ns, n)
		}
		return ns
	}
	for _, c := range []struct {
		bench string
		sizes []int
	}{
		{"latency", sizes(1, 1024)},
		{"pairs", sizes(1, 1024)},
		{"bw", sizes(1, 1024)},
		{"mr", sizes(1, 1024)},
		{"mrp", sizes(1, 1024)},
		{"farm", []int{8}},
		{"allreduce", sizes(8, 1024)},
		{"barrier", []int{0}},
	} {
		t.Run(c.bench, func(t *testing.T) {
			out, err := run(t, "-max", "1024", "-iters", "10", c.bench)
			if err != nil {
				t.Fatalf("%v:\n%s", err, out)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if len(lines) != len(c.sizes) {
				t.Fatalf("%d lines, want %d (one per size, rank 0 only):\n%s", len(lines), len(c.sizes), out)
			}
			for i, l := range lines {
				f := strings.Fields(l)
				if len(f) != 3 || f[0] != c.bench || f[1] != strconv.Itoa(c.sizes[i]) {
					t.Fatalf("line %q, want %q <bytes=%d> <value>:\n%s", l, c.bench, c.sizes[i], out)
				}
				if v, err := strconv.ParseFloat(f[2], 64); err != nil || v < 0 {
					t.Fatalf("line %q: bad value:\n%s", l, out)
				}
			}
		})
	}
	t.Run("overlap", func(t *testing.T) {
		out, err := run(t, "-max", "1024", "-iters", "5", "overlap")
		if err != nil {
			t.Fatalf("%v:\n%s", err, out)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		want := []string{"overlap_comm", "overlap_compute", "overlap_both", "overlap"}
		if len(lines) != len(want) {
			t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), out)
		}
		for i, l := range lines {
			f := strings.Fields(l)
			if len(f) != 3 || f[0] != want[i] || f[1] != "1024" {
				t.Fatalf("line %q, want %q 1024 <value>:\n%s", l, want[i], out)
			}
			if v, err := strconv.ParseFloat(f[2], 64); err != nil || v <= 0 {
				t.Fatalf("line %q: bad value:\n%s", l, out)
			}
		}
	})
	t.Run("table", func(t *testing.T) {
		// osu.c's positional MAXBYTES and ITERS work too.
		out, err := run(t, "-table", "latency", "64", "5")
		if err != nil {
			t.Fatalf("%v:\n%s", err, out)
		}
		if !strings.Contains(out, "# gompi-bench latency, 2 ranks") || !strings.Contains(out, "one-way latency (µs)") ||
			!strings.Contains(out, "64 B") || strings.Contains(out, "latency 64 ") {
			t.Fatalf("no table:\n%s", out)
		}
	})
	t.Run("unknown", func(t *testing.T) {
		if out, err := run(t, "nosuch"); err == nil || !strings.Contains(out, "unknown benchmark nosuch") {
			t.Fatalf("err %v:\n%s", err, out)
		}
	})
}
