package cluster_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gompi/gompi/internal/testkit"
)

// TestIOCheckOnSharedFS runs gompi-iocheck on the sshfs share, 2 ranks on
// each of 3 hosts, collective and atomic: every byte a rank on one host
// wrote is read back right by a rank on another, though every client
// cached the previous generation of the file (which the naive writers of
// TestSharedFSNaiveWritersGoWrong could not survive). A corrupted
// generation is reported with the offset, rank and host.
func TestIOCheckOnSharedFS(t *testing.T) {
	c, s, _ := shareCluster(t)
	if binDir == "" {
		t.Skip("no cluster binaries")
	}
	dir, err := testkit.BuildTemp("/var/tmp", "gompi-iocheck-bin-", testkit.Pkg("cmd/gompi-iocheck"))
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	iocheck := filepath.Join(dir, "gompi-iocheck")
	for _, mode := range []string{"coll", "atomic"} {
		t.Run(mode, func(t *testing.T) {
			j := startJob(t, c, c.Client, "", "-hosts", c.HostList(2), "-n", "6", iocheck, "-mode", mode, s.Path("iocheck-"+mode))
			r := j.wait(2 * time.Minute)
			if r.Code != 0 || !strings.Contains(r.Stdout, "gompi-iocheck: ok: 6 ranks on 3 hosts") {
				t.Fatalf("exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
			}
			t.Log(strings.TrimSpace(r.Stdout))
			if left := testkit.WaitGone(5*time.Second, func() []int { return testkit.MarkedProcs(j.Marker) }); left != nil {
				t.Fatalf("processes of the job still alive: %v", left)
			}
		})
	}
}
