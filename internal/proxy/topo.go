package proxy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/gompi/gompi/internal/atomicfile"
	"github.com/gompi/gompi/internal/privdir"
)

// Every MPICH rank discovers the node's hardware topology through hwloc at
// MPI_Init, reading hundreds of /sys files; with many ranks per node that is
// a noticeable share of start-up CPU. As Open MPI's and PMIx's launchers do,
// the proxy discovers it once and hands it to the ranks: hwloc loads
// HWLOC_XMLFILE instead of probing, and HWLOC_THISSYSTEM=1 keeps binding
// working. The XML is cached per boot and CPU/memory set, so a job whose
// cgroup allows other CPUs gets its own.

// Topo is the node's topology lookup, started before the job is known
// (PrefetchTopo) so that its file system work (the PATH search for lstopo,
// the boot id, the cache directory's checks) overlaps the session's start
// and the job's arrival instead of delaying the first rank.
type Topo struct {
	done   chan struct{}
	lstopo string // lstopo-no-graphics, "" if not installed
	path   string // the cache file for this boot and CPU set
	cached bool   // path held the topology when looked up
	err    error
}

// PrefetchTopo starts the lookup in the background; pass it as
// Config.Topo. It only reads: lstopo runs, when the cache is missing,
// after the job has been received and has not turned sharing off.
func PrefetchTopo() *Topo {
	t := &Topo{done: make(chan struct{})}
	go func() {
		defer close(t.done)
		t.lstopo, t.path, t.cached, t.err = topoLookup()
	}()
	return t
}

// topoEnv returns the variables that share this node's topology with the
// ranks, or nil when hwloc's lstopo is not installed, sharing is turned off
// (GOMPI_TOPO=0), or the job sets HWLOC_XMLFILE itself. pre is the lookup
// started before the job arrived (nil: look up now).
func topoEnv(ctx context.Context, jobEnv []string, pre *Topo) []string {
	if os.Getenv("GOMPI_TOPO") == "0" || os.Getenv("HWLOC_XMLFILE") != "" {
		return nil
	}
	for _, kv := range jobEnv {
		if strings.HasPrefix(kv, "HWLOC_XMLFILE=") || kv == "GOMPI_TOPO=0" {
			return nil
		}
	}
	if pre == nil {
		pre = PrefetchTopo()
	}
	path, err := pre.file(ctx)
	if err != nil {
		return nil
	}
	return []string{"HWLOC_XMLFILE=" + path, "HWLOC_THISSYSTEM=1"}
}

// file returns the cached topology XML for this boot and CPU set,
// creating it with lstopo when it was missing.
func (t *Topo) file(ctx context.Context) (string, error) {
	select {
	case <-t.done:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	if t.err != nil {
		return "", t.err
	}
	if t.cached {
		return t.path, nil
	}
	return topoGenerate(ctx, t.lstopo, t.path)
}

// topoLookup finds lstopo and the cache file for this boot and CPU set,
// and whether that file is there already.
func topoLookup() (lstopo, path string, cached bool, err error) {
	lstopo, err = exec.LookPath("lstopo-no-graphics")
	if err != nil {
		return "", "", false, err
	}
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", "", false, err
	}
	h := sha256.New()
	h.Write(bytes.TrimSpace(boot))
	if st, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(st), "\n") {
			if strings.HasPrefix(l, "Cpus_allowed_list:") || strings.HasPrefix(l, "Mems_allowed_list:") {
				h.Write([]byte(l))
			}
		}
	}
	dir := privdir.Default()
	// Checked before the cache is trusted: another user could have made
	// the directory, and every MPICH rank loads the XML in it.
	if err := privdir.Ensure(dir); err != nil {
		return "", "", false, fmt.Errorf("topology cache: %w", err)
	}
	path = filepath.Join(dir, "topo-"+hex.EncodeToString(h.Sum(nil))[:16]+".xml")
	fi, err := os.Lstat(path)
	return lstopo, path, err == nil && fi.Mode().IsRegular() && fi.Size() > 0, nil
}

// topoGenerate writes the topology lstopo reports to path.
func topoGenerate(ctx context.Context, lstopo, path string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, lstopo, "--of", "xml", "-").Output()
	if err != nil || !bytes.Contains(out, []byte("<topology")) {
		return "", fmt.Errorf("lstopo: %v", err)
	}
	// Atomically, so a rank of a concurrent job never reads half a file.
	if err := atomicfile.Write(path, out, 0o644); err != nil {
		return "", fmt.Errorf("write topology: %w", err)
	}
	return path, nil
}
