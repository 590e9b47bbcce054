package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/gompi/gompi/internal/buildinfo"
	"github.com/gompi/gompi/internal/manpage"
	"github.com/spf13/cobra"
)

const benchHelp = `gompi-bench is an MPI program: it runs the OSU micro-benchmarks' point-to-point
and collective loops (osu_latency, osu_bw, osu_mbw_mr, osu_allreduce, ...) with gompi's
Go rank runtime, printing "<bench> <bytes> <value>" lines (microseconds; GB/s for bw;
millions of messages/s for mr; ms for farm).

Usage:
  gompiexec -n 2 gompi-bench [-table] [-max BYTES] [-iters N] latency|pairs|bw|mr|mrp|farm|allreduce|barrier|overlap

Benchmarks: latency (ping-pong between ranks 0 and 1), pairs (every even rank with
the next), bw (windowed bandwidth), mr (message rate, osu_mbw_mr: ranks i and
i+size/2 in pairs, windows of 64), mrp (mr with persistent requests started with
StartAll), farm (task farm: rank 0 hands 2000 tasks of
10-80 us to the workers that ask first, from AnySource receives), allreduce, barrier,
overlap (Iallreduce hidden behind compute).
`

// writeMan writes gompi-bench.1 into dir (gompi-bench --gen-man DIR); the
// options come from the flag set main defines.
func writeMan(dir string, fs *flag.FlagSet) int {
	cmd := &cobra.Command{Use: "gompi-bench [options] benchmark [MAXBYTES [ITERS]]", Short: "OSU-style MPI micro-benchmarks for gompi",
		Long: manpage.Preformatted(benchHelp), Version: buildinfo.Version(), DisableFlagsInUseLine: true}
	cmd.Flags().AddGoFlagSet(fs)
	err := manpage.Write(dir, manpage.Page{Cmd: cmd,
		Env: manpage.RankEnv,
		Exit: []manpage.Item{
			{"0", "the benchmark ran"},
			{"1", "MPI initialisation or a benchmark step failed"},
			{"2", "bad arguments"},
		},
		SeeAlso: []string{"gompiexec(1)"},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "gompi-bench:", err)
		return 1
	}
	return 0
}
