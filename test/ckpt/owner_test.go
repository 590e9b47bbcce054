package ckpt_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gompi/gompi/ckpt/layout"
	"github.com/gompi/gompi/internal/testkit"
)

// TestSecondJobOnPrefix: two real jobs on one prefix. The second fails
// while the first runs, naming the first's host, pid and job id; after a
// kill -9 of the first, the next job takes the prefix over (saying so)
// and resumes from the first's newest epoch. Nothing locked the prefix:
// the second job ran, and the two numbered and pruned epochs over each
// other's.
func TestSecondJobOnPrefix(t *testing.T) {
	prefix := t.TempDir()
	a := start(t, heatWith(prefix, nil, "-steps", "1000000")...)
	rec := filepath.Join(prefix, layout.PrefixOwnerFile)
	var owner layout.Owner
	deadline := time.Now().Add(60 * time.Second)
	for {
		b, err := os.ReadFile(rec)
		if err == nil && json.Unmarshal(b, &owner) == nil {
			if m, err := layout.Newest(prefix); err == nil && m.Epoch >= 1 {
				break
			}
		}
		select {
		case <-a.Done():
			t.Fatalf("the first job ended: %+v", a.MustWait(t, time.Second))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the first job wrote no owner record and no epoch in 60 s")
		}
	}
	b := run(t, heat(prefix)...)
	want := fmt.Sprintf("pid %d on host %s", owner.Pid, owner.Host)
	if b.Code == 0 || !strings.Contains(b.Stderr, "checkpoint prefix in use") || !strings.Contains(b.Stderr, want) || !strings.Contains(b.Stderr, owner.Job) {
		t.Fatalf("second job beside the first: exit %d, stderr:\n%s\nwant a failure naming %q and job %s", b.Code, b.Stderr, want, owner.Job)
	}
	testkit.KillMarked(a.Marker) // kill -9 of every process of the first job
	a.Wait(10 * time.Second)
	newest, err := layout.Newest(prefix)
	if err != nil {
		t.Fatal(err)
	}
	c := run(t, heat(prefix, "-steps", fmt.Sprint(newest.Step+20))...)
	if c.Code != 0 || !strings.Contains(c.Stderr, "took over") || !strings.Contains(c.Stderr, "its process is gone") {
		t.Fatalf("job after the first was killed: exit %d, stderr:\n%s\nwant it to take the prefix over", c.Code, c.Stderr)
	}
	if got := restored(c); got < newest.Epoch {
		t.Fatalf("restored epoch %d, want at least %d (the killed job's newest)", got, newest.Epoch)
	}
	if _, err := os.Stat(rec); !os.IsNotExist(err) {
		t.Fatalf("owner record after the last job ended: %v", err)
	}
}
