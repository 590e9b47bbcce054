package cluster_test

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gompi/gompi/ckpt/layout"
)

var heatChecksum = regexp.MustCompile(`(?m)^checksum ([0-9a-f]{64})$`)

// TestCheckpointHostLost cuts one host off mid-run under -max-restarts 1:
// gompiexec relaunches on the hosts that are left, the ranks resume from
// the newest epoch every rank can read (node-local caches in each host's
// private /tmp, the prefix on the filesystem all hosts share), and the
// final grid is the same as an uninterrupted run's.
func TestCheckpointHostLost(t *testing.T) {
	if testing.Short() {
		t.Skip("takes ~25 s")
	}
	c := setup(t)
	heatArgs := []string{"-n", "128", "-steps", "400", "-ckpt-every", "10", "-delay", "10ms"}
	base := runJob(t, c, c.Client, "", append([]string{"-hosts", c.HostList(2), "-n", "4", bin("heat")}, heatArgs...)...)
	m := heatChecksum.FindStringSubmatch(base.Stdout)
	if base.Code != 0 || m == nil {
		t.Fatalf("uninterrupted run: exit %d\n%s\n%s", base.Code, base.Stdout, base.Stderr)
	}
	want := m[1]

	prefix, err := os.MkdirTemp("/var/tmp", "gompi-ckpt-prefix-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(prefix) })
	cache := fmt.Sprintf("/tmp/gompi-heat-cache-%d", os.Getpid()) // private on every host
	cut := c.Hosts[1]
	j := startJob(t, c, c.Client, "", append([]string{"-max-restarts", "1", "-ckpoint-prefix", prefix,
		"-ckpoint-cache", cache, "-hosts", c.HostList(2), "-n", "4", bin("heat")}, heatArgs...)...)
	deadline := time.Now().Add(60 * time.Second)
	for {
		if m, err := layout.Newest(prefix); err == nil && m.Epoch >= 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no epoch flushed to the prefix\n%s", j.Stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := cut.CutLink(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cut.RestoreLink() })
	r := j.wait(120 * time.Second)
	t.Logf("stdout:\n%s\nstderr:\n%s", r.Stdout, r.Stderr)
	got := heatChecksum.FindStringSubmatch(r.Stdout)
	if r.Code != 0 || got == nil || got[1] != want {
		t.Fatalf("exit %d, checksum %v, uninterrupted %s", r.Code, got, want)
	}
	if !strings.Contains(r.Stderr, "host "+cut.Name+" was lost; restart 1 of 1") {
		t.Fatalf("no restart message naming %s", cut.Name)
	}
	if !regexp.MustCompile(`heat: restored epoch \d+ at step \d+`).MatchString(r.Stdout) {
		t.Fatal("the relaunch did not restore a checkpoint")
	}
	cut.RestoreLink()
	j.assertNoLeftovers(20 * time.Second)
}
