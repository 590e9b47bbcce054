// Command gosnapkill is a rank of test/mpiio's snapshot kill test: every
// rank writes BYTES of a rank pattern collectively through a node-local
// cache with gompi_cache_snapshot=enable, and rank 0 kills itself
// (SIGKILL) the moment its write returns, so that gompiexec ends the job
// (its proxy kills the ranks' process group) while the snapshot writers
// are still writing what the calls acknowledged.
//
//	gosnapkill FILE CACHE_DIR BYTES
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	mpi "github.com/gompi/gompi/runtime"
	"github.com/gompi/gompi/runtime/mpiio"
)

// Pattern is byte i of rank r's block (the test checks the file with it).
func Pattern(r int, i int64) byte { return byte(int64(r)*37 + i/4096 + 1) }

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	comm, err := mpi.Init(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gosnapkill:", err)
		os.Exit(1)
	}
	if err := run(ctx, comm, os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "gosnapkill: rank %d: %v\n", comm.Rank(), err)
		comm.Abort(3)
		os.Exit(3)
	}
}

func run(ctx context.Context, comm *mpi.Comm, args []string) error {
	if len(args) != 3 {
		return fmt.Errorf("usage: gosnapkill FILE CACHE_DIR BYTES")
	}
	n, err := strconv.ParseInt(args[2], 10, 64)
	if err != nil || n <= 0 {
		return fmt.Errorf("BYTES %q: want a positive integer", args[2])
	}
	f, err := mpiio.Open(ctx, comm, args[0], mpiio.ModeCreate|mpiio.ModeWronly,
		mpiio.Hints{"gompi_cache_dir": args[1], "gompi_cache_snapshot": "enable", "romio_cb_write": "enable"})
	if err != nil {
		return err
	}
	r := comm.Rank()
	buf := make([]byte, n)
	for i := range buf {
		buf[i] = Pattern(r, int64(i))
	}
	if err := f.SetView(int64(r)*n, mpi.Byte, mpi.Byte); err != nil {
		return err
	}
	if _, err := f.WriteAtAll(buf, 0); err != nil {
		return err
	}
	if r == 0 {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
	clear(buf)   // acknowledged: the buffer is the program's again
	<-ctx.Done() // killed by the launcher
	return ctx.Err()
}
