package rt

import (
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// collDieTransports are the transports the collective-failure promise
// must hold on.
var collDieTransports = []struct {
	name string
	env  []string
}{{"shm", nil}, {"tcp", []string{"GOMPI_SHM=0"}}, {"nocma", []string{"GOMPI_CMA=0"}}}

// wantCollDie checks that every rank but the dead one (n/2) reported every
// collective's *PeerError naming the dead rank and finished.
func wantCollDie(t *testing.T, n int, out func(r int) string) {
	t.Helper()
	dead := n / 2
	for r := 0; r < n; r++ {
		if r == dead {
			continue
		}
		o := out(r)
		for _, op := range []string{"barrier", "bcast", "allreduce", "allreduce-large", "allgather", "alltoall", "iallreduce"} {
			if !strings.Contains(o, fmt.Sprintf("rank %d: %s saw peer rank %d\n", r, op, dead)) {
				t.Fatalf("rank %d: no *PeerError from %s:\n%s", r, op, o)
			}
		}
		if !strings.Contains(o, fmt.Sprintf("rank %d: ok\n", r)) {
			t.Fatalf("rank %d did not finish:\n%s", r, o)
		}
	}
}

// A rank leaves like a crash (after PMI finalize, so gompiexec lets the
// job go on) without entering the collectives the others enter: every
// survivor's collective returns its *PeerError within seconds, including
// the survivors that never exchange a message with it (issue 13).
func TestGompiexecCollMemberDies(t *testing.T) {
	for _, tr := range collDieTransports {
		for _, n := range []int{3, 4, 8} {
			t.Run(tr.name+"/"+strconv.Itoa(n), func(t *testing.T) {
				out, err := runEnv(t, 2*time.Minute, tr.env, bin("gompiexec"), "-n", strconv.Itoa(n), bin("rtprog"), "colldie", "exit")
				if err != nil {
					t.Fatalf("%v:\n%s", err, out)
				}
				wantCollDie(t, n, func(int) string { return out })
			})
		}
	}
}

// The same with the rank SIGKILLed, under a launcher that does not end
// the job (gompiexec ends it at a signalled rank, as Hydra does, unless
// -disable-auto-cleanup: TestGompiexecDACCollMemberKilled).
func TestHarnessCollMemberKilled(t *testing.T) {
	for _, tr := range collDieTransports {
		for _, n := range []int{3, 8} {
			t.Run(tr.name+"/"+strconv.Itoa(n), func(t *testing.T) {
				outs, errs := harness(t, n, tr.env, "colldie", "kill")
				if errs[n/2] == nil || !strings.Contains(errs[n/2].Error(), "killed") {
					t.Fatalf("victim: %v\n%s", errs[n/2], outs[n/2])
				}
				for r, err := range errs {
					if r != n/2 && err != nil {
						t.Fatalf("rank %d: %v\n%s", r, err, outs[r])
					}
				}
				wantCollDie(t, n, func(r int) string { return outs[r] })
			})
		}
	}
}

// The same SIGKILLed rank under gompiexec -disable-auto-cleanup: the job
// goes on, every survivor's collective fails naming it and they finish;
// the job's status is the victim's (128+9).
func TestGompiexecDACCollMemberKilled(t *testing.T) {
	for _, tr := range collDieTransports {
		for _, n := range []int{3, 8} {
			t.Run(tr.name+"/"+strconv.Itoa(n), func(t *testing.T) {
				out, err := runEnv(t, 2*time.Minute, tr.env, bin("gompiexec"), "-disable-auto-cleanup", "-n", strconv.Itoa(n), bin("rtprog"), "colldie", "kill")
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() != 128+9 {
					t.Fatalf("exit %v, want 137:\n%s", err, out)
				}
				wantCollDie(t, n, func(int) string { return out })
			})
		}
	}
}
