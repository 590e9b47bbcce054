package mpich

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestPMI1PutLongerThanLine: a PMI-1 put whose value is within get_maxes'
// vallen_max makes a line longer than 1024 bytes (MPICH 4.1+'s client and
// Hydra both handle it); the value must come back after the fence, as under
// mpiexec.hydra (GOMPI_MPIEXEC=mpiexec.hydra runs this the same).
func TestPMI1PutLongerThanLine(t *testing.T) {
	needSetup(t)
	r := launch(t, "-n", "1", prog("bigput"), "1000")
	if r.code != 0 || !strings.Contains(r.out, "bytes: cmd=put_result rc=0") || !strings.Contains(r.out, "got 1000 bytes back") {
		t.Fatalf("a put of 1000 bytes (vallen_max is 1024): exit %d, want the value back\n%s%s", r.code, r.out, r.err)
	}
}

// TestFenceLargerThanControlFrame: one fence round whose pairs exceed a
// control frame (16 MiB: thousands of ranks' business cards) completes, as
// under mpiexec.hydra; it used to cut the proxy off ("control: frame too
// large"). Two hosts' worth of data also crosses the proxy tree down.
func TestFenceLargerThanControlFrame(t *testing.T) {
	needSetup(t)
	if testing.Short() {
		t.Skip("moves 20 MB of PMI data")
	}
	r := launch(t, "-n", "2", prog("manykeys"), "10000")
	if r.code != 0 || !strings.Contains(r.out, "rank 0 read 2 of 2") || !strings.Contains(r.out, "rank 1 read 2 of 2") {
		t.Fatalf("a 20 MB fence: exit %d, want every rank's keys back\n%s%.2000s", r.code, r.out, r.err)
	}
	if os.Getenv("GOMPI_MPIEXEC") != "" {
		return // the rest is gompiexec's -launcher fork with named hosts
	}
	// Through a launch tree: every proxy's part is under a frame, the
	// round's pairs that come down are not.
	r = launch(t, "-launcher", "fork", "-fanout", "2", "-hosts", "a,b,c", "-n", "3", prog("manykeys"), "7000")
	for i := 0; i < 3; i++ {
		if r.code != 0 || !strings.Contains(r.out, fmt.Sprintf("rank %d read 3 of 3", i)) {
			t.Fatalf("a 21 MB fence over a tree: exit %d, want every rank's keys back\n%s%.2000s", r.code, r.out, r.err)
		}
	}
}
