package cluster_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gompi/gompi/internal/testkit"
	"github.com/gompi/gompi/test/cluster"
)

// shareCluster builds a cluster of its own (its hosts run sshfs, which the
// shared cluster's leftover checks would count) with a share mounted on
// every host, and the naive program on the shared disk.
func shareCluster(t *testing.T) (*cluster.Cluster, *cluster.Share, string) {
	t.Helper()
	if err := cluster.CheckSSHFS(); err != nil {
		if os.Getenv("CI") != "" || os.Getenv("GOMPI_REQUIRE_CLUSTER") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	c := cluster.Start(t, cluster.Config{Hosts: 3})
	s, err := c.Share(cluster.ShareConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Unmount(); err != nil {
			t.Error(err)
		}
	})
	dir, err := testkit.BuildTemp("/var/tmp", "gompi-sshfs-bin-", testkit.Pkg("test/cluster/progs/naive"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return c, s, filepath.Join(dir, "naive")
}

// naiveWant is progs/naive's Want.
func naiveWant(o int64) byte { return byte(o*7+o>>12) | 1 }

// TestSharedFSNaiveWritersGoWrong shows what the shared file system of the
// cluster does to a program that ignores MPI-IO's rules: two hosts write
// the two halves of a file (the boundary inside a page) after every host
// has read it once, as any program that looks at its file first does.
// Through mmap the second writer's client writes its whole page back, with
// its stale copy of the first writer's bytes: the server's file loses
// them. With plain writes the server gets every byte, but a third host
// still reads its cached old pages. Both are the file system behaving as
// documented (sshfs -o kernel_cache; NFS clients do the same), which is
// why runtime/mpiio aligns collective file domains to blocks, drops its
// cache after a collective write and locks in atomic mode.
//
// A client keeps its cached pages while the file's size and modification
// time look unchanged, and SFTP carries whole seconds: the writes go wrong
// when they land within the second of the clients' reads, which on a
// loaded machine they may not. The test pins the server file's times
// after each step, so it shows that case every time rather than racing
// the clock.
func TestSharedFSNaiveWritersGoWrong(t *testing.T) {
	c, s, naive := shareCluster(t)
	const size, mid = 3*4096 + 1000, 6000
	n1, n2, n3 := c.Hosts[0], c.Hosts[1], c.Hosts[2]
	for _, how := range []string{"mmap", "write"} {
		t.Run(how, func(t *testing.T) {
			name := "naive-" + how
			file := s.Path(name)
			if _, err := n1.Run(naive, "create", file, strconv.Itoa(size)); err != nil {
				t.Fatal(err)
			}
			st, err := os.Stat(s.ServerPath(name))
			if err != nil {
				t.Fatal(err)
			}
			pin := func() {
				if err := os.Chtimes(s.ServerPath(name), st.ModTime(), st.ModTime()); err != nil {
					t.Fatal(err)
				}
			}
			for _, h := range c.Hosts {
				if _, err := h.Run("cat", file); err != nil { // every client caches the zeros
					t.Fatal(err)
				}
			}
			if _, err := n1.Run(naive, how, file, "0", strconv.Itoa(mid)); err != nil {
				t.Fatal(err)
			}
			pin()
			if _, err := n2.Run(naive, how, file, strconv.Itoa(mid), strconv.Itoa(size-mid)); err != nil {
				t.Fatal(err)
			}
			pin()
			server, err := os.ReadFile(s.ServerPath(name))
			if err != nil {
				t.Fatal(err)
			}
			lost, first := 0, -1
			for o, b := range server {
				if b != naiveWant(int64(o)) {
					if first < 0 {
						first = o
					}
					lost++
				}
			}
			out, readErr := n3.Run(naive, "check", file, strconv.Itoa(size))
			t.Logf("%s: the server's file has %d wrong bytes (first at %d); %s reads: %s", how, lost, first, n3.Name, strings.TrimSpace(out))
			switch how {
			case "mmap":
				// n2's page 1 went back whole, with zeros over n1's [4096, 6000).
				if lost == 0 {
					t.Fatalf("mmap writers on two clients lost nothing: the share does not cache as documented")
				}
				if first < 4096 || first >= mid {
					t.Errorf("first lost byte at %d, want in n1's part of the shared page [4096, %d)", first, mid)
				}
			case "write":
				if lost != 0 {
					t.Errorf("plain writes lost %d bytes on the server (first at %d)", lost, first)
				}
			}
			if readErr == nil {
				t.Errorf("%s read the file right through its stale cache: the share does not cache as documented", n3.Name)
			}
		})
	}
}
