package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gompi/gompi/ckpt/layout"
	"github.com/gompi/gompi/internal/mpiexec"
)

// commitEpoch commits a one-rank epoch e in prefix.
func commitEpoch(t *testing.T, prefix string, e int) {
	t.Helper()
	w, err := layout.Create(prefix, e, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("state")); err != nil {
		t.Fatal(err)
	}
	f, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := layout.Commit(prefix, &layout.Manifest{Epoch: e, Ranks: 1, Files: []layout.File{f}}); err != nil {
		t.Fatal(err)
	}
}

func envValue(env []string, name string) (string, bool) {
	for _, kv := range slices.Backward(env) {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// TestRelaunchKeepsCkpointNum: a relaunch under -max-restarts resumes from
// the epoch -ckpoint-num named until the run commits a newer epoch than
// the prefix held at its start; it resumed from the newest, an epoch of
// the timeline the user had asked to leave. Every launch of the run
// carries the same launch id (the prefix's owner record takes it over).
func TestRelaunchKeepsCkpointNum(t *testing.T) {
	prefix := t.TempDir()
	commitEpoch(t, prefix, 4)
	commitEpoch(t, prefix, 6) // the timeline left behind
	var stderr bytes.Buffer
	cfg := &mpiexec.Config{Stderr: &stderr}
	o := &options{ckptPrefix: prefix, ckptNum: 4, maxRestarts: 2}
	if err := checkpointConfig(o, cfg); err != nil {
		t.Fatal(err)
	}
	id, ok := envValue(cfg.Env, layout.EnvLaunch)
	if !ok || len(id) != 16 {
		t.Fatalf("%s=%q, want a 16-digit launch id", layout.EnvLaunch, id)
	}
	relaunch := func(attempt int) *mpiexec.Config {
		c := *cfg
		c.Env = slices.Clone(cfg.Env)
		if err := cfg.Restart.Before(attempt, nil, 1, &c); err != nil {
			t.Fatal(err)
		}
		if got, _ := envValue(c.Env, layout.EnvLaunch); got != id {
			t.Fatalf("relaunch %d: launch id %q, first launch %q", attempt, got, id)
		}
		return &c
	}
	c := relaunch(1)
	if e, _ := envValue(c.Env, envCkptEpoch); e != "4" {
		t.Fatalf("relaunch before a newer commit: %s=%q, want 4\n%s", envCkptEpoch, e, stderr.String())
	}
	if !strings.Contains(stderr.String(), "from epoch 4 (-ckpoint-num") {
		t.Fatalf("relaunch message: %s", stderr.String())
	}
	commitEpoch(t, prefix, 7) // this run's first checkpoint
	stderr.Reset()
	c = relaunch(2)
	if e, ok := envValue(c.Env, envCkptEpoch); ok {
		t.Fatalf("relaunch after the run committed epoch 7: %s=%q, want unset (newest)", envCkptEpoch, e)
	}
	if !strings.Contains(stderr.String(), "epoch 7 in "+prefix) {
		t.Fatalf("relaunch message: %s", stderr.String())
	}
}

// TestCkptRmRefusesARunningJob: `ckpt rm` removed epochs under a running
// job's feet; it now refuses while the prefix's owner record says a job
// may run (its process here, or another node's record refreshed lately),
// and `rm -all` also removes a gone job's record.
func TestCkptRmRefusesARunningJob(t *testing.T) {
	prefix := t.TempDir()
	commitEpoch(t, prefix, 1)
	owner := filepath.Join(prefix, layout.PrefixOwnerFile)
	lock, err := layout.ClaimPrefix(context.Background(), prefix, layout.ThisProcess("job-7"), time.Minute, func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if code, err := ckptCommand(&out, []string{"rm", "-all", prefix}); code != 1 || err == nil ||
		!strings.Contains(err.Error(), "in use by job job-7") {
		t.Fatalf("rm -all with this process owning the prefix: exit %d, %v", code, err)
	}
	lock.Release()
	other := func(age time.Duration) {
		t.Helper()
		b, _ := json.Marshal(layout.Owner{Job: "job-9", Host: "elsewhere", Node: "another-boot-id", Pid: 1, Start: "1"})
		if err := os.WriteFile(owner, b, 0o644); err != nil {
			t.Fatal(err)
		}
		at := time.Now().Add(-age)
		if err := os.Chtimes(owner, at, at); err != nil {
			t.Fatal(err)
		}
	}
	other(time.Second)
	if code, err := ckptCommand(&out, []string{"rm", "-keep", "1", prefix}); code != 1 || err == nil ||
		!strings.Contains(err.Error(), "job-9") {
		t.Fatalf("rm with another host's fresh record: exit %d, %v", code, err)
	}
	other(10 * time.Minute)
	if code, err := ckptCommand(&out, []string{"rm", "-all", prefix}); code != 0 || err != nil {
		t.Fatalf("rm -all with a stale record: exit %d, %v", code, err)
	}
	if eps, _ := layout.List(prefix); len(eps) != 0 {
		t.Fatalf("epochs left after rm -all: %v", eps)
	}
	if _, err := os.Stat(owner); !os.IsNotExist(err) {
		t.Fatalf("stale owner record kept by rm -all: %v", err)
	}
}

// TestCkptRmRenewsPrefixID: ckpt rm renews the prefix's ID (the node
// caches then drop their copies of its epochs: docs/ckpt.md) when it
// removes everything or the newest epochs, not for older epochs (the
// caches may hold the only copies of newer ones), and not for an epoch
// that is not there (a mistyped number cost the caches every epoch).
func TestCkptRmRenewsPrefixID(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string // after the prefix, or before it for options
		opt   bool
		code  int
		renew bool
	}{
		{"all", []string{"-all"}, true, 0, true},
		{"newest", []string{"3"}, false, 0, true},
		{"two newest", []string{"2", "3"}, false, 0, true},
		{"oldest", []string{"1"}, false, 0, false},
		{"keep", []string{"-keep", "1"}, true, 0, false},
		{"missing epoch", []string{"99"}, false, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := t.TempDir()
			for e := 1; e <= 3; e++ {
				commitEpoch(t, prefix, e)
			}
			id, err := layout.PrefixID(prefix)
			if err != nil {
				t.Fatal(err)
			}
			args := append([]string{"rm", prefix}, tc.args...)
			if tc.opt {
				args = append(append([]string{"rm"}, tc.args...), prefix)
			}
			var out bytes.Buffer
			if code, _ := ckptCommand(&out, args); code != tc.code {
				t.Fatalf("ckpt %v: exit %d, want %d\n%s", args, code, tc.code, out.String())
			}
			b, err := os.ReadFile(filepath.Join(prefix, layout.PrefixIDFile))
			if renewed := err != nil || strings.TrimSpace(string(b)) != id; renewed != tc.renew {
				t.Fatalf("ckpt %v: prefix ID renewed %v, want %v", args, renewed, tc.renew)
			}
		})
	}
}
