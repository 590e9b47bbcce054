// Command sharedarray writes a 2-D array of float64 into one shared file
// from every rank and has rank 0 verify it: the seed program (every rank
// mapping the file and writing its rows) done with MPI-IO. Each rank owns
// a block of rows, describes it with a subarray view, and all write with
// one collective WriteAtAll; after Sync rank 0 reads the whole file back.
//
//	gompiexec -n 4 ./sharedarray -file /shared/a.dat -rows 1000 -cols 1000
//
// Element (i, j) holds i*cols + j, so any misplaced byte is caught.
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"math"
	"os"

	mpi "github.com/gompi/gompi/runtime"
	"github.com/gompi/gompi/runtime/mpiio"
)

func main() {
	file := flag.String("file", "", "shared file to write (required)")
	rows := flag.Int("rows", 512, "rows of the array")
	cols := flag.Int("cols", 512, "columns of the array")
	cbNodes := flag.String("cb_nodes", "", "aggregators (default: one per host)")
	flag.Parse()
	if err := run(*file, *rows, *cols, *cbNodes); err != nil {
		fmt.Fprintln(os.Stderr, "sharedarray:", err)
		os.Exit(1)
	}
}

func run(file string, rows, cols int, cbNodes string) error {
	if file == "" || rows <= 0 || cols <= 0 {
		return fmt.Errorf("need -file and positive -rows, -cols")
	}
	ctx := context.Background()
	world, err := mpi.Init(ctx)
	if err != nil {
		return err
	}
	defer world.Finalize()
	rank, size := world.Rank(), world.Size()
	// Block distribution of rows; the first rows%size ranks get one more.
	lo := rank*(rows/size) + min(rank, rows%size)
	n := rows / size
	if rank < rows%size {
		n++
	}
	hints := mpiio.Hints{}
	if cbNodes != "" {
		hints["cb_nodes"] = cbNodes
	}
	f, err := mpiio.Open(ctx, world, file, mpiio.ModeCreate|mpiio.ModeRdwr, hints)
	if err != nil {
		return err
	}
	sub, err := mpi.Subarray([]int{rows, cols}, []int{n, cols}, []int{lo, 0}, mpi.OrderC, mpi.Float64)
	if err != nil {
		return err
	}
	if err := f.SetView(0, mpi.Float64, sub); err != nil {
		return err
	}
	mine := make([]float64, n*cols)
	for i := range n {
		for j := range cols {
			mine[i*cols+j] = float64((lo+i)*cols + j)
		}
	}
	if _, err := mpiio.WriteAtAll(f, mine, 0); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	bad := 0
	if rank == 0 {
		// Read the file as plain bytes, independently of the package.
		b, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		if len(b) != rows*cols*8 {
			return fmt.Errorf("%s has %d bytes, want %d", file, len(b), rows*cols*8)
		}
		for k := 0; k < rows*cols; k++ {
			if v := math.Float64frombits(binary.LittleEndian.Uint64(b[8*k:])); v != float64(k) {
				if bad == 0 {
					fmt.Fprintf(os.Stderr, "sharedarray: element (%d, %d) = %v, want %d\n", k/cols, k%cols, v, k)
				}
				bad++
			}
		}
		if bad > 0 {
			return fmt.Errorf("%d of %d elements wrong", bad, rows*cols)
		}
		fmt.Printf("sharedarray: %d x %d array written by %d ranks: ok\n", rows, cols, size)
	}
	return nil
}
