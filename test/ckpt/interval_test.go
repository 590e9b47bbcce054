package ckpt_test

import (
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/gompi/gompi/internal/testkit"
)

var triedRE = regexp.MustCompile(`(?m)^rank 0: (\d+) checkpoints tried, (\d+) failed in ([0-9.]+) s$`)

// TestIntervalAfterFailedCheckpoint: with -ckpoint-interval, a checkpoint
// that fails (a full prefix) is tried again an interval later, not at
// the next NeedCheckpoint: the interval counted from the last successful
// checkpoint, so after one failure NeedCheckpoint said yes at every step,
// and a job that logs the failure and goes on wrote into the full file
// system at every step (here 100 times a second instead of twice).
// 200 steps of 10 ms.
func TestIntervalAfterFailedCheckpoint(t *testing.T) {
	prefix := filepath.Join(testkit.SmallTmpfs(t, 1<<20), "p")
	r := run(t, "-ckpoint-prefix", prefix, "-ckpoint-interval", "0.5", "-n", "2",
		bin("ckprobe"), "-size", "100000", "-misuse", "loop=200")
	m := triedRE.FindStringSubmatch(r.Stdout)
	if m == nil {
		t.Fatalf("exit %d, no count of checkpoints\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
	}
	tried, _ := strconv.Atoi(m[1])
	failed, _ := strconv.Atoi(m[2])
	if failed == 0 || tried != failed {
		t.Fatalf("%d checkpoints tried, %d failed: want every one to fail (1.6 MB epochs, a 1 MiB prefix)", tried, failed)
	}
	secs, _ := strconv.ParseFloat(m[3], 64)
	if limit := int(secs/0.5) + 2; tried > limit {
		t.Fatalf("%d checkpoints tried in %.1f s with -ckpoint-interval 0.5, want at most %d: a failed one is tried again at every step", tried, secs, limit)
	}
}
