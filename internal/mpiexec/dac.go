package mpiexec

import (
	"fmt"

	"github.com/gompi/gompi/internal/control"
)

// survive handles a failed rank under Config.NoAutoCleanup (gompiexec
// -disable-auto-cleanup): the job goes on without it. Every proxy learns
// of it (MsgDead), so PMI_dead_processes lists it to MPICH's
// fault-tolerance paths; Go ranks learn of it from their own links (a
// dead rank's listener refuses the dial, a connected one's link breaks:
// *PeerError). The job's exit code is still the first failure's. What
// still ends the job: an abort (MPI_Abort means the job), a lost host, a
// PMI barrier that can no longer complete, the timeout and signals.
func (j *job) survive(rank, code int, at int64) {
	if j.firstFail < 0 {
		j.firstFail, j.failCode, j.failAt = rank, code, at
	} else {
		j.earlier(rank, code, "", at)
	}
	r := j.ranks[rank]
	how := fmt.Sprintf("exited with code %d", r.code)
	if r.signal != 0 {
		how = fmt.Sprintf("was killed by signal %d (%s)", r.signal, sigName(r.signal))
	}
	fmt.Fprintf(j.cfg.Stderr, "gompiexec: rank %d on %s %s%s; the others go on (-disable-auto-cleanup)\n",
		rank, j.hosts[r.host].name, how, optional(": ", r.failMsg))
	j.broadcast(control.Msg{T: control.MsgDead, Rank: rank})
}
