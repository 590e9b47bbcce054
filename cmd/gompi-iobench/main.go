// Command gompi-iobench is test/bench/io/iobench.c on gompi's runtime/mpiio:
// the same patterns, sizes, command line and output, so that `make bench-io`
// (go run ./test/bench -io) compares the two in one run. Run it as the ranks
// of a job:
//
//	gompiexec -n 4 gompi-iobench [-i] [-cow] [-H key=value]... write|read hard|contig|fpp FILE BYTES_PER_RANK
//
// Rank 0 prints "io <write|read> <pattern> <coll|indep> <ranks> <bytes>
// <seconds>", seconds from a barrier before Open to a barrier after Close
// (a write includes Sync, as dd's conv=fdatasync), and for a write also
// "block ..." with the time from that barrier until every rank's write calls
// had returned: with the node-local cache (-H gompi_cache_dir=DIR) that is
// what the application waits for, the rest being the flush Close waits for.
//
//	hard    IOR's "hard" pattern: 47008-byte records, record j of rank r at
//	        offset (j*P + r)*47008, through a vector view, all of a rank's
//	        records in one call (WriteAtAll, or WriteAt with -i)
//	contig  rank r owns [r*B, (r+1)*B), written in 8 MiB calls
//	fpp     file per process (FILE.<rank>, a one-rank communicator), 8 MiB
//	        calls
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gompi/gompi/internal/manpage"
	mpi "github.com/gompi/gompi/runtime"
	"github.com/gompi/gompi/runtime/cow"
	"github.com/gompi/gompi/runtime/mpiio"
)

const (
	rec  = 47008
	xfer = 8 << 20
)

func main() {
	if len(os.Args) == 3 && os.Args[1] == manpage.GenFlag {
		os.Exit(writeMan(os.Args[2]))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	comm, err := mpi.Init(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gompi-iobench:", err)
		os.Exit(1)
	}
	if err := run(ctx, comm, os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "gompi-iobench: rank %d: %v\n", comm.Rank(), err)
		comm.Abort(3)
		os.Exit(3)
	}
	if err := comm.Finalize(); err != nil {
		fmt.Fprintln(os.Stderr, "gompi-iobench:", err)
		os.Exit(1)
	}
}

// pat is iobench.c's pat(r, k).
func pat(r int, k int64) byte { return byte(int64(r)*29 + (k>>12)*7 + 1) }

var errUsage = errors.New("usage: gompi-iobench [-i] [-cow] [-H key=value]... write|read hard|contig|fpp FILE BYTES_PER_RANK")

type config struct {
	write, indep bool
	cow          bool // the buffer from cow.Make
	pattern      string
	path         string
	per          int64
	hints        mpiio.Hints
}

func parse(args []string) (config, error) {
	c := config{hints: mpiio.Hints{}}
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		switch {
		case args[0] == "-i":
			c.indep = true
		case args[0] == "-cow":
			c.cow = true
		case args[0] == "-H" && len(args) > 1:
			k, v, ok := strings.Cut(args[1], "=")
			if !ok {
				return c, fmt.Errorf("-H %q: want key=value", args[1])
			}
			c.hints[k] = v
			args = args[1:]
		default:
			return c, errUsage
		}
		args = args[1:]
	}
	if len(args) != 4 || (args[0] != "write" && args[0] != "read") {
		return c, errUsage
	}
	c.write, c.pattern, c.path = args[0] == "write", args[1], args[2]
	switch c.pattern {
	case "hard", "contig":
	case "fpp":
		c.indep = true
	default:
		return c, fmt.Errorf("unknown pattern %q (want hard, contig or fpp)", c.pattern)
	}
	per, err := strconv.ParseInt(args[3], 10, 64)
	if err != nil || per <= 0 {
		return c, fmt.Errorf("BYTES_PER_RANK %q: want a positive integer", args[3])
	}
	c.per = per
	return c, nil
}

func run(ctx context.Context, comm *mpi.Comm, args []string) error {
	c, err := parse(args)
	if err != nil {
		return err
	}
	r, p := comm.Rank(), comm.Size()
	unit := int64(xfer)
	if c.pattern == "hard" {
		unit = rec
	} else if c.per < unit {
		unit = c.per
	}
	n := c.per / unit
	per := n * unit
	chunk := unit // bytes per call
	if c.pattern == "hard" {
		chunk = per
	}
	var buf []byte
	if c.cow {
		// Outside the Go heap, in huge pages: with gompi_cache_snapshot
		// the fork that takes the snapshot copies 1/512 of the page
		// table entries (docs/io.md, "Snapshot writes").
		if buf, err = cow.Make[byte](int(chunk)); err != nil {
			return err
		}
		defer cow.Free(buf)
	} else {
		buf = make([]byte, chunk)
	}
	if c.write {
		for k := range buf {
			buf[k] = pat(r, int64(k))
		}
	}
	fcomm, path := comm, c.path
	if c.pattern == "fpp" {
		if fcomm, err = comm.Split(r, 0); err != nil {
			return err
		}
		path = fmt.Sprintf("%s.%d", c.path, r)
	}
	mode := mpiio.ModeRdonly
	if c.write {
		mode = mpiio.ModeCreate | mpiio.ModeWronly
	}
	if err := comm.Barrier(); err != nil {
		return err
	}
	t0 := time.Now()
	f, err := mpiio.Open(ctx, fcomm, path, mode, c.hints)
	if err != nil {
		return err
	}
	defer f.Close()
	switch c.pattern {
	case "hard":
		// The same type map as Vector(n, rec, p*rec, Byte), built from a
		// record type so that the flattening has n blocks, not n*rec.
		ft, err := mpi.Contiguous(rec, mpi.Byte)
		if err == nil {
			ft, err = mpi.Vector(int(n), 1, p, ft)
		}
		if err == nil {
			err = f.SetView(int64(r)*rec, mpi.Byte, ft)
		}
		if err != nil {
			return err
		}
	case "contig":
		if err := f.SetView(int64(r)*per, mpi.Byte, mpi.Byte); err != nil {
			return err
		}
	}
	for done := int64(0); done < per; done += chunk {
		var got int
		switch {
		case c.write && c.indep:
			got, err = f.WriteAt(buf, done)
		case c.write:
			got, err = f.WriteAtAll(buf, done)
		case c.indep:
			got, err = f.ReadAt(buf, done)
		default:
			got, err = f.ReadAtAll(buf, done)
		}
		if err == nil && got != len(buf) {
			err = fmt.Errorf("%s: %d of %d bytes at view offset %d", path, got, len(buf), done)
		}
		if err != nil {
			return err
		}
		if !c.write {
			for k := 0; k < len(buf); k += 4096 {
				if want := pat(r, int64(k)); buf[k] != want {
					return fmt.Errorf("%s: byte %d of the view is %d, want %d", path, done+int64(k), buf[k], want)
				}
			}
		}
	}
	block := time.Since(t0)
	if c.write {
		if err := f.Sync(); err != nil {
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := comm.Barrier(); err != nil {
		return err
	}
	total := time.Since(t0)
	// The blocking time is the slowest rank's.
	bs := []float64{block.Seconds()}
	if err := mpi.Allreduce(comm, bs, bs, mpi.Max); err != nil {
		return err
	}
	if r == 0 {
		op, how := "read", "coll"
		if c.write {
			op = "write"
		}
		if c.indep {
			how = "indep"
		}
		fmt.Printf("io %s %s %s %d %d %.6f\n", op, c.pattern, how, p, per*int64(p), total.Seconds())
		if c.write {
			fmt.Printf("block %s %s %s %d %d %.6f\n", op, c.pattern, how, p, per*int64(p), bs[0])
		}
	}
	return nil
}
