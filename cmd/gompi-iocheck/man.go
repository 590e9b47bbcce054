package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/gompi/gompi/internal/buildinfo"
	"github.com/gompi/gompi/internal/manpage"
	"github.com/spf13/cobra"
)

const iocheckHelp = `gompi-iocheck is an MPI program that checks whether a shared file system gives
runtime/mpiio's guarantees between hosts. Every rank writes a rank-stamped pattern
into FILE, in blocks interleaved with every other rank's (3000 bytes by default, so
ranks of different hosts share pages), twice; after the second write and Sync each
rank reads back what a rank on another host wrote and checks every byte. Rank 0
prints "ok" or one line per failing rank naming the first wrong offset, the
writer's rank and host and the reader's.

Usage:
  gompiexec -hosts a:2,b:2 gompi-iocheck [-mode coll|atomic|shared] [-block N] [-blocks N] [-H key=value]... FILE

Modes: coll writes with WriteAtAll (two-phase, block-aligned file domains); atomic
writes with WriteAt in atomic mode (byte-range locks); shared appends -blocks records
of -block bytes per rank at the shared file pointer (WriteShared, all ranks at once),
and every rank then checks that each record is in FILE once, whole, in its writer's
order.
`

// writeMan writes gompi-iocheck.1 into dir (gompi-iocheck --gen-man DIR).
func writeMan(dir string, fs *flag.FlagSet) int {
	cmd := &cobra.Command{Use: "gompi-iocheck [options] FILE", Short: "check MPI-IO consistency of a shared file system across hosts",
		Long: manpage.Preformatted(iocheckHelp), Version: buildinfo.Version(), DisableFlagsInUseLine: true}
	cmd.Flags().AddGoFlagSet(fs)
	err := manpage.Write(dir, manpage.Page{Cmd: cmd, Env: manpage.RankEnv,
		Exit: []manpage.Item{
			{"0", "every byte read back was the one written"},
			{"1", "a mismatch, or MPI or I/O failed"},
			{"2", "bad arguments"},
		},
		SeeAlso: []string{"gompiexec(1)", "gompi-iobench(1)"},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "gompi-iocheck:", err)
		return 1
	}
	return 0
}
