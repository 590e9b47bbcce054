package ckpt_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/gompi/gompi/ckpt/layout"
)

// TestPruneFailureNotFatal: an old epoch that cannot be removed (here an
// immutable file; on NFS, a file another client holds open leaves a
// .nfsXXXX that makes its directory impossible to remove) is said, and
// the job goes on checkpointing and removing the other old epochs.
// Rank 0's Checkpoint returned the error, alone: the job died (or its
// other ranks went on without rank 0) after an epoch it had committed,
// and the first undeletable epoch stopped all pruning.
func TestPruneFailureNotFatal(t *testing.T) {
	prefix := t.TempDir()
	args := []string{"-ckpoint-prefix", prefix, "-ckpoint-keep", "2", "-n", "2", bin("ckprobe")}
	if r := run(t, append(args, "-ckpts", "2")...); r.Code != 0 {
		t.Fatalf("first run: exit %d\n%s", r.Code, r.Stderr)
	}
	stuck := layout.RankPath(prefix, 1, 1)
	if out, err := exec.Command("chattr", "+i", stuck).CombinedOutput(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("chattr +i %s: %v %s", stuck, err, out)
		}
		t.Skipf("chattr +i (root, a file system with the immutable flag): %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("chattr", "-i", stuck).Run() })
	r := run(t, append(args, "-ckpts", "3")...)
	if r.Code != 0 || !strings.Contains(r.Stdout, "rank 0: committed epoch 5") {
		t.Fatalf("run with an undeletable old epoch: exit %d, want epochs 3-5 committed\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
	}
	if !strings.Contains(r.Stderr, stuck) {
		t.Fatalf("the failed removal does not name %s:\n%s", stuck, r.Stderr)
	}
	eps, err := layout.List(prefix)
	if err != nil {
		t.Fatal(err)
	}
	var committed []int
	for _, e := range eps {
		if e.Committed() {
			committed = append(committed, e.Epoch)
		}
	}
	if len(committed) != 2 || committed[0] != 4 || committed[1] != 5 {
		t.Fatalf("committed epochs %v, want 4 and 5 (-ckpoint-keep 2; epoch 1 stuck, the others removed)", committed)
	}
}
