package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/gompi/gompi/internal/buildinfo"
	"github.com/gompi/gompi/internal/manpage"
	"github.com/spf13/cobra"
)

const iobenchHelp = `gompi-iobench is an MPI program: the Go twin of test/bench/io/iobench.c (ROMIO),
timing runtime/mpiio on IOR-style patterns. make bench-io runs both and compares.

Usage:
  gompiexec -n 4 gompi-iobench [-i] [-cow] [-H key=value]... write|read hard|contig|fpp FILE BYTES_PER_RANK

Patterns: hard (47008-byte records interleaved across ranks), contig (one block per
rank), fpp (a file per process). -i uses independent instead of collective calls;
-cow allocates the buffer with runtime/cow's Make (huge pages outside the Go heap:
what gompi_cache_snapshot=enable forks fastest);
-H passes a hint (cb_nodes, cb_buffer_size, romio_cb_write, striping_unit, the
node-local cache hints) to Open. Rank 0 prints the bytes and seconds.
`

// writeMan writes gompi-iobench.1 into dir (gompi-iobench --gen-man DIR).
func writeMan(dir string) int {
	fs := flag.NewFlagSet("gompi-iobench", flag.ContinueOnError)
	fs.Bool("i", false, "independent ReadAt/WriteAt instead of the collective calls")
	fs.Bool("cow", false, "the buffer from runtime/cow's Make (huge pages, outside the Go heap)")
	fs.String("H", "", "a hint key=value for Open (repeatable)")
	cmd := &cobra.Command{Use: "gompi-iobench [options] write|read PATTERN FILE BYTES_PER_RANK", Short: "MPI-IO benchmark of runtime/mpiio",
		Long: manpage.Preformatted(iobenchHelp), Version: buildinfo.Version(), DisableFlagsInUseLine: true}
	cmd.Flags().AddGoFlagSet(fs)
	err := manpage.Write(dir, manpage.Page{Cmd: cmd, Env: manpage.RankEnv,
		Exit: []manpage.Item{
			{"0", "the benchmark ran"},
			{"1", "MPI initialisation or finalisation failed"},
			{"3", "bad arguments or an I/O error (the job is aborted)"},
		},
		SeeAlso: []string{"gompiexec(1)", "gompi-iocheck(1)"},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "gompi-iobench:", err)
		return 1
	}
	return 0
}
