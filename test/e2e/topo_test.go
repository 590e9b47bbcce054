package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Ranks get the node's hwloc topology from the proxy (so MPICH ranks skip
// probing /sys), unless the user set their own or turned sharing off.
func TestTopologySharedWithRanks(t *testing.T) {
	if _, err := exec.LookPath("lstopo-no-graphics"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("hwloc's lstopo-no-graphics is not installed (test/setup.sh installs it with mpich)")
		}
		t.Skip("hwloc's lstopo-no-graphics is not installed (test/setup.sh installs it with mpich)")
	}
	script := `echo "file=$HWLOC_XMLFILE this=$HWLOC_THISSYSTEM n=$(grep -c '<topology' "$HWLOC_XMLFILE")"`
	r := runJob(t, "", "-n", "2", "/bin/sh", "-c", script)
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	if len(lines) != 2 || lines[0] != lines[1] || !strings.HasSuffix(lines[0], " this=1 n=1") {
		t.Fatalf("ranks should share one topology file:\n%s", r.Stdout)
	}
	path := strings.TrimPrefix(strings.Fields(lines[0])[0], "file=")
	if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
		t.Fatalf("topology file %s: %v", path, err)
	}
	r = runJob(t, "", "-genv", "HWLOC_XMLFILE", "/mine.xml", "-n", "1", "/bin/sh", "-c", `echo "file=$HWLOC_XMLFILE this=$HWLOC_THISSYSTEM"`)
	if strings.TrimSpace(r.Stdout) != "file=/mine.xml this=" {
		t.Fatalf("the user's HWLOC_XMLFILE must win: %q", r.Stdout)
	}
	r = runJob(t, "", "-genv", "GOMPI_TOPO", "0", "-n", "1", "/bin/sh", "-c", `echo "file=$HWLOC_XMLFILE"`)
	if strings.TrimSpace(r.Stdout) != "file=" {
		t.Fatalf("GOMPI_TOPO=0 must turn sharing off: %q", r.Stdout)
	}
}

// A topology cache directory that is not ours alone (another user could
// have made it under /tmp and planted the XML every MPICH rank loads) is
// not used.
func TestTopologyCacheRefusesForeignDirectory(t *testing.T) {
	if _, err := exec.LookPath("lstopo-no-graphics"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("hwloc's lstopo-no-graphics is not installed (test/setup.sh installs it with mpich)")
		}
		t.Skip("hwloc's lstopo-no-graphics is not installed (test/setup.sh installs it with mpich)")
	}
	tmp := t.TempDir()
	dir := filepath.Join(tmp, fmt.Sprintf("gompi-%d", os.Getuid()))
	os.Mkdir(dir, 0o777)
	os.Chmod(dir, 0o777) // as if another user had made it for everyone
	j := newJob(t, "", "-n", "1", "/bin/sh", "-c", `echo "file=$HWLOC_XMLFILE"`)
	j.Cmd.Env = append(j.Cmd.Env, "TMPDIR="+tmp)
	j.startJob()
	r := j.wait(30 * time.Second)
	if r.Code != 0 || strings.TrimSpace(r.Stdout) != "file=" {
		t.Fatalf("exit %d, rank saw %q: a world-writable cache directory was used", r.Code, r.Stdout)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("the proxy wrote into %s: %v", dir, ents)
	}
}
