package cluster_test

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gompi/gompi/ckpt/layout"
	"github.com/gompi/gompi/test/cluster"
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
	want, prefix := heatBaseline(t, c, heatArgs)
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

// TestCheckpointPartnerHostLost: with -ckpoint-partner, a host whose
// node-local cache is lost before the newest epoch reached the prefix
// costs no epoch. A first run crashes; the newest epoch is then taken out
// of the prefix (its flush "had not completed") and the second host's
// cache is removed; a rerun on the first host alone restores that epoch,
// rebuilt from the partner copies in the first host's cache, not an older
// one from the prefix, completes its flush, and ends with the
// uninterrupted run's checksum.
func TestCheckpointPartnerHostLost(t *testing.T) {
	if testing.Short() {
		t.Skip("takes ~20 s")
	}
	c := setup(t)
	heatArgs := []string{"-n", "128", "-steps", "300", "-ckpt-every", "10", "-delay", "5ms"}
	want, prefix := heatBaseline(t, c, heatArgs)
	cache := fmt.Sprintf("/tmp/gompi-heat-partner-%d", os.Getpid()) // private on every host
	keep, lost := c.Hosts[0], c.Hosts[1]
	t.Cleanup(func() {
		keep.Run("rm", "-rf", cache)
		lost.Run("rm", "-rf", cache)
	})
	ckptArgs := []string{"-ckpoint-prefix", prefix, "-ckpoint-cache", cache, "-ckpoint-partner", "-ckpoint-keep", "3"}
	first := runJob(t, c, c.Client, "", append(append(ckptArgs, "-hosts", c.HostList(2), "-n", "4", bin("heat"), "-crash-at", "150"), heatArgs...)...)
	if first.Code == 0 {
		t.Fatalf("the run with -crash-at 150 succeeded\n%s", first.Stdout)
	}
	// The newest epoch committed in the surviving host's cache.
	out, err := keep.Run("sh", "-c", "ls "+cache)
	if err != nil {
		t.Fatal(err)
	}
	newest := 0
	for _, f := range strings.Fields(out) {
		if e, ok := layout.ParseEpochDir(f); ok && e > newest {
			if _, err := keep.Run("test", "-f", cache+"/"+f+"/"+layout.ManifestName); err == nil {
				newest = e
			}
		}
	}
	if newest < 2 {
		t.Fatalf("no epoch committed in %s's cache: %q", keep.Name, out)
	}
	if out, err := keep.Run("ls", layout.EpochDir(layout.PartnerDir(cache), newest)); err != nil || !strings.Contains(out, "rank.00002") {
		t.Fatalf("%s holds no partner copy of rank 2's epoch %d: %q %v", keep.Name, newest, out, err)
	}
	// The flush of the newest epoch had not completed, and the second
	// host's cache is gone with it.
	if err := layout.Remove(prefix, newest); err != nil {
		t.Fatal(err)
	}
	if old, err := layout.Newest(prefix); err != nil || old.Epoch >= newest {
		t.Fatalf("the prefix should offer only an older epoch now: %+v %v", old, err)
	}
	if _, err := lost.Run("rm", "-rf", cache); err != nil {
		t.Fatal(err)
	}

	r := runJob(t, c, c.Client, "", append(append(ckptArgs, "-hosts", keep.Name+":4", "-n", "4", bin("heat")), heatArgs...)...)
	t.Logf("stdout:\n%s\nstderr:\n%s", r.Stdout, r.Stderr)
	if !strings.Contains(r.Stdout, fmt.Sprintf("heat: restored epoch %d at step", newest)) {
		t.Fatalf("the rerun did not restore epoch %d (rebuilt from the partner copies)", newest)
	}
	got := heatChecksum.FindStringSubmatch(r.Stdout)
	if r.Code != 0 || got == nil || got[1] != want {
		t.Fatalf("exit %d, checksum %v, uninterrupted %s", r.Code, got, want)
	}
	// The interrupted flush was completed (and newer epochs followed).
	if m, err := layout.Newest(prefix); err != nil || m.Epoch <= newest {
		t.Fatalf("prefix newest after the rerun: %+v %v, want past %d", m, err, newest)
	}
}

// heatBaseline runs heat uninterrupted on 2 hosts x 2 ranks and returns
// its checksum, and a fresh checkpoint prefix on the shared disk.
func heatBaseline(t *testing.T, c *cluster.Cluster, heatArgs []string) (checksum, prefix string) {
	t.Helper()
	base := runJob(t, c, c.Client, "", append([]string{"-hosts", c.HostList(2), "-n", "4", bin("heat")}, heatArgs...)...)
	m := heatChecksum.FindStringSubmatch(base.Stdout)
	if base.Code != 0 || m == nil {
		t.Fatalf("uninterrupted run: exit %d\n%s\n%s", base.Code, base.Stdout, base.Stderr)
	}
	prefix, err := os.MkdirTemp("/var/tmp", "gompi-ckpt-prefix-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(prefix) })
	return m[1], prefix
}
