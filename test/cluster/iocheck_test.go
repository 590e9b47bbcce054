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
// TestSharedFSNaiveWritersGoWrong could not survive); and the same with
// collective buffering off (independent, sieved writes).
func TestIOCheckOnSharedFS(t *testing.T) {
	c, s, _ := shareCluster(t)
	if binDir == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("no cluster binaries: %v", skipWhy)
		}
		t.Skip("no cluster binaries")
	}
	dir, err := testkit.BuildTemp("/var/tmp", "gompi-iocheck-bin-", testkit.Pkg("cmd/gompi-iocheck"))
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	iocheck := filepath.Join(dir, "gompi-iocheck")
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"coll", []string{"-mode", "coll"}},
		{"atomic", []string{"-mode", "atomic"}},
		// Collective calls without collective buffering: every rank writes
		// its own (non-overlapping) pieces independently. MPI still
		// promises the bytes after Sync. Data sieving is asked for, but a
		// sieve's read-modify-write is only safe under locks every host
		// honours, and sshfs's are node-local: the package writes the
		// pieces themselves on FUSE (with sieving, hosts undid each
		// other's bytes here).
		{"independent-sieving", []string{"-mode", "coll", "-H", "romio_cb_write=disable", "-H", "romio_ds_write=enable"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"-hosts", c.HostList(2), "-n", "6", iocheck}, tc.args...)
			j := startJob(t, c, c.Client, "", append(args, s.Path("iocheck-"+tc.name))...)
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
