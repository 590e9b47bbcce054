// Command pi computes pi by numerical integration of 4/(1+x²) over [0,1]:
// each rank sums every size-th interval and Reduce adds the parts at rank 0.
// Run it with: gompiexec -n 4 ./pi -n 10000000 (or mpiexec.hydra, or alone).
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"time"

	mpi "github.com/gompi/gompi/runtime"
)

func main() {
	n := flag.Int("n", 10_000_000, "number of intervals")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, *n); err != nil {
		fmt.Fprintln(os.Stderr, "pi:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, n int) error {
	world, err := mpi.Init(ctx)
	if err != nil {
		return err
	}
	start := time.Now()
	// Everyone learns n from rank 0, as a C program reading input would.
	nn := []int64{int64(n)}
	if err := mpi.Bcast(world, nn, 0); err != nil {
		return err
	}
	h := 1 / float64(nn[0])
	sum := 0.0
	for i := world.Rank(); i < int(nn[0]); i += world.Size() {
		x := h * (float64(i) + 0.5)
		sum += 4 / (1 + x*x)
	}
	pi := []float64{0}
	if err := mpi.Reduce(world, []float64{h * sum}, pi, mpi.Sum, 0); err != nil {
		return err
	}
	if world.Rank() == 0 {
		fmt.Printf("pi is approximately %.16f, error %.2e, %d ranks, %v\n",
			pi[0], math.Abs(pi[0]-math.Pi), world.Size(), time.Since(start).Round(time.Microsecond))
	}
	return world.Finalize()
}
