package cluster_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gompi/gompi/internal/testkit"
	"github.com/gompi/gompi/runtime/mpiio/journal"
)

// TestIOCheckOnSharedFS runs gompi-iocheck on the sshfs share, 2 ranks on
// each of 3 hosts, collective and atomic: every byte a rank on one host
// wrote is read back right by a rank on another, though every client
// cached the previous generation of the file (which the naive writers of
// TestSharedFSNaiveWritersGoWrong could not survive); and the same with
// collective buffering off (independent, sieved writes).
func TestIOCheckOnSharedFS(t *testing.T) {
	c, s, _ := shareCluster(t)
	dir := iocheckBin(t)
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
		// Node-local write-back cache on every rank: each rank caches its
		// own pieces of its host's (block-aligned) domains, pieces of
		// other hosts' domains travel to their aggregator; Sync drains
		// every rank's flusher before anyone reads.
		{"cached", []string{"-mode", "coll", "-H", "gompi_cache_dir=/tmp/gompi-iocheck-cache"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"-hosts", c.HostList(2), "-n", "6", iocheck}, tc.args...)
			j := startJob(t, c, c.Client, "", append(args, s.Path("iocheck-"+tc.name))...)
			r := j.wait(2 * time.Minute)
			if r.Code != 0 || !strings.Contains(r.Stdout, "gompi-iocheck: ok: 6 ranks on 3 hosts") {
				t.Fatalf("exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
			}
			t.Log(strings.TrimSpace(r.Stdout))
			// One aggregator per host by default: the package tells the
			// namespace hosts apart although they share a host name.
			if !strings.Contains(r.Stdout, "; 3 aggregators") {
				t.Fatalf("want 3 aggregators (one per host):\n%s", r.Stdout)
			}
			if left := testkit.WaitGone(5*time.Second, func() []int { return testkit.MarkedProcs(j.Marker) }); left != nil {
				t.Fatalf("processes of the job still alive: %v", left)
			}
		})
	}
}

// TestWriteSharedOnSharedFS: 2 ranks on each of 3 hosts append records at
// the shared file pointer (mpiio's WriteShared) into one file on the sshfs
// share, all at once; every rank then finds each record there once, whole,
// and each rank's in order. sshfs has no lock that binds two clients, so
// this holds only because the pointer is claimed from rank 0 over the
// runtime's messages. Records of 3000 bytes share pages across hosts.
func TestWriteSharedOnSharedFS(t *testing.T) {
	c, s, _ := shareCluster(t)
	dir := iocheckBin(t)
	args := []string{"-hosts", c.HostList(2), "-n", "6", filepath.Join(dir, "gompi-iocheck"), "-mode", "shared", "-blocks", "150", s.Path("iocheck-shared")}
	j := startJob(t, c, c.Client, "", args...)
	r := j.wait(2 * time.Minute)
	if r.Code != 0 || !strings.Contains(r.Stdout, "gompi-iocheck: ok: 6 ranks on 3 hosts wrote 900 records") {
		t.Fatalf("exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	t.Log(strings.TrimSpace(r.Stdout))
	// The server's own copy, read past every client's cache.
	b, err := os.ReadFile(s.ServerPath("iocheck-shared"))
	if err != nil || len(b) != 900*3000 {
		t.Fatalf("server's file: %d bytes, %v; want %d", len(b), err, 900*3000)
	}
	if left := testkit.WaitGone(5*time.Second, func() []int { return testkit.MarkedProcs(j.Marker) }); left != nil {
		t.Fatalf("processes of the job still alive: %v", left)
	}
}

// TestIOCacheReplayOnHosts: gompiexec -io-cache DIR replays, on every host
// and before that host's ranks start, the journal a killed job's
// node-local cache left in the host's own DIR (each host has a private
// /tmp here), so each rank reads its shared file with the acknowledged
// bytes in place.
func TestIOCacheReplayOnHosts(t *testing.T) {
	c := setup(t)
	stage, err := os.MkdirTemp(binDir, "iocache-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(stage)
	const cdir = "/tmp/gompi-iocache"
	for i, h := range c.Hosts {
		target := filepath.Join(stage, "shared-"+strconv.Itoa(i))
		os.WriteFile(target, []byte("----------"), 0o644)
		data := []byte("n" + strconv.Itoa(i+1))
		jnl := append(journal.Header(target), journal.ExtentRecord(journal.Extent{Seq: 1, FileOff: 4, Len: int64(len(data)), CRC: journal.Checksum(data)})...)
		key := filepath.Join(stage, "k"+strconv.Itoa(i))
		os.WriteFile(key+journal.JournalSuffix, jnl, 0o600)
		os.WriteFile(key+journal.DataSuffix, data, 0o600)
		if _, err := h.Run("sh", "-c", "mkdir -p "+cdir+" && mv "+key+".* "+cdir+"/"); err != nil {
			t.Fatal(err)
		}
	}
	r := runJob(t, c, c.Client, "", "-l", "-io-cache", cdir, "-hosts", c.HostList(1), "-n", strconv.Itoa(len(c.Hosts)),
		"sh", "-c", `cat `+stage+`/shared-$PMI_RANK; echo; ls `+cdir)
	if r.Code != 0 {
		t.Fatalf("exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	for i := range c.Hosts {
		want := fmt.Sprintf("[%d] ----n%d----\n", i, i+1)
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("missing %q (rank %d's shared file after replay) in\n%s", want, i, r.Stdout)
		}
	}
	if strings.Contains(r.Stdout, journal.JournalSuffix) {
		t.Errorf("a journal is left after the replay:\n%s", r.Stdout)
	}
}

// iocheckBin builds gompi-iocheck where every host sees it (removed at the
// test's end).
func iocheckBin(t *testing.T) string {
	t.Helper()
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
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
