package mpich

import (
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
