// Command faultprog is a Go runtime rank for the fault-injection test: it
// starts a child of its own (as a wrapper or a helper would), joins the
// job, and exchanges messages for about a second.
package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"time"

	mpi "github.com/gompi/gompi/runtime"
)

func main() {
	child := exec.Command("sleep", "600")
	child.Start()
	err := run()
	if child.Process != nil {
		child.Process.Kill()
		child.Wait()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "faultprog:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	world, err := mpi.Init(ctx)
	if err != nil {
		return err
	}
	in, out := []float64{float64(world.Rank())}, []float64{0}
	for i := 0; i < 50; i++ {
		if err := mpi.Allreduce(world, in, out, mpi.Sum); err != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
	return world.Finalize()
}
