package proxy

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeLstopo puts an lstopo-no-graphics on a PATH of its own that counts
// its runs in the returned file, and a private TMPDIR for the cache.
func fakeLstopo(t *testing.T) (runs string) {
	t.Helper()
	bin := t.TempDir()
	runs = filepath.Join(t.TempDir(), "runs")
	script := "#!/bin/sh\necho run >> " + runs + "\necho '<topology version=\"2.0\"/>'\n"
	if err := os.WriteFile(filepath.Join(bin, "lstopo-no-graphics"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin)
	t.Setenv("TMPDIR", t.TempDir())
	t.Setenv("GOMPI_TOPO", "")
	t.Setenv("HWLOC_XMLFILE", "")
	return runs
}

func countRuns(t *testing.T, runs string) int {
	b, err := os.ReadFile(runs)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "run")
}

// The lookup started before the job (PrefetchTopo) is used once the job
// is known: lstopo runs only when the cache is missing and the job has not
// turned sharing off, and a cache made by an earlier job is found.
func TestTopoPrefetch(t *testing.T) {
	for _, tc := range []struct {
		name     string
		jobEnv   []string
		cached   bool // a previous job made the cache
		wantEnv  bool
		wantRuns int
	}{
		{name: "cold", wantEnv: true, wantRuns: 1},
		{name: "cached", cached: true, wantEnv: true, wantRuns: 1},
		{name: "job turns it off", jobEnv: []string{"GOMPI_TOPO=0"}, wantRuns: 0},
		{name: "job brings its own", jobEnv: []string{"HWLOC_XMLFILE=/x.xml"}, wantRuns: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runs := fakeLstopo(t)
			ctx := context.Background()
			if tc.cached {
				if env := topoEnv(ctx, nil, nil); len(env) != 2 {
					t.Fatalf("first job: env %q", env)
				}
			}
			pre := PrefetchTopo()
			env := topoEnv(ctx, tc.jobEnv, pre)
			if got := countRuns(t, runs); got != tc.wantRuns {
				t.Errorf("lstopo ran %d times, want %d", got, tc.wantRuns)
			}
			if !tc.wantEnv {
				if env != nil {
					t.Fatalf("env %q, want none", env)
				}
				return
			}
			if len(env) != 2 || env[1] != "HWLOC_THISSYSTEM=1" {
				t.Fatalf("env %q", env)
			}
			path := strings.TrimPrefix(env[0], "HWLOC_XMLFILE=")
			b, err := os.ReadFile(path)
			if err != nil || !strings.Contains(string(b), "<topology") {
				t.Fatalf("topology file %s: %q, %v", path, b, err)
			}
		})
	}
}

// Without lstopo there is nothing to share, and a cancelled job does not
// wait for the lookup.
func TestTopoNoLstopo(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	t.Setenv("GOMPI_TOPO", "")
	t.Setenv("HWLOC_XMLFILE", "")
	if env := topoEnv(context.Background(), nil, PrefetchTopo()); env != nil {
		t.Fatalf("env %q without lstopo", env)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	never := &Topo{done: make(chan struct{})}
	if env := topoEnv(ctx, nil, never); env != nil {
		t.Fatalf("env %q from an unfinished lookup", env)
	}
}
