package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/gompi/gompi/pmi/client"
	mpi "github.com/gompi/gompi/runtime"
)

// collDieOps are the collectives the survivors of collDie enter, each on
// its own communicator (a Dup made while every rank was alive).
var collDieOps = []struct {
	name string
	f    func(c *mpi.Comm) error
}{
	{"barrier", func(c *mpi.Comm) error { return c.Barrier() }},
	{"bcast", func(c *mpi.Comm) error { return mpi.Bcast(c, make([]byte, 64), 0) }},
	{"allreduce", func(c *mpi.Comm) error { v := []int64{1}; return mpi.Allreduce(c, v, v, mpi.Sum) }},
	{"allreduce-large", func(c *mpi.Comm) error { v := make([]float64, 32<<10); return mpi.Allreduce(c, v, v, mpi.Sum) }},
	{"allgather", func(c *mpi.Comm) error { return mpi.Allgather(c, []int32{1}, make([]int32, c.Size())) }},
	{"alltoall", func(c *mpi.Comm) error {
		return mpi.Alltoall(c, make([]int32, c.Size()), make([]int32, c.Size()))
	}},
	{"iallreduce", func(c *mpi.Comm) error {
		v := []int64{1}
		_, err := mpi.Iallreduce(c, v, v, mpi.Sum).Wait(context.Background())
		return err
	}},
}

// collDie: rank n/2 leaves like a crash (args[0] "exit": PMI finalize and
// exit without the runtime's Finalize, so gompiexec lets the job go on;
// "kill": SIGKILL, for launchers that do not end the job) without
// entering any collective, and every other rank enters every collective
// of collDieOps. Each must return the dead rank's *PeerError within
// seconds, whether or not the rank ever exchanged messages with it; a
// call that does not is reported as hung (the job then fails rather than
// waiting for the test's deadline).
func collDie(c *mpi.Comm, pc *client.Client, args []string) error {
	if len(args) != 1 || (args[0] != "exit" && args[0] != "kill") {
		return fmt.Errorf("usage: colldie exit|kill")
	}
	dead := c.Size() / 2
	dups := make([]*mpi.Comm, len(collDieOps))
	for i := range dups {
		d, err := c.Dup()
		if err != nil {
			return err
		}
		dups[i] = d
	}
	if c.Rank() == dead {
		fmt.Printf("rank %d: leaving\n", c.Rank())
		if args[0] == "kill" {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		pc.Finalize()
		os.Exit(0)
	}
	for i, op := range collDieOps {
		done := make(chan error, 1)
		go func() { done <- op.f(dups[i]) }()
		var err error
		select {
		case err = <-done:
		case <-time.After(20 * time.Second):
			return fmt.Errorf("%s: hung for 20s after rank %d died", op.name, dead)
		}
		var pe *mpi.PeerError
		if !errors.As(err, &pe) || pe.Rank != dead {
			return fmt.Errorf("%s: %v, want a *PeerError naming rank %d", op.name, err, dead)
		}
		fmt.Printf("rank %d: %s saw peer rank %d\n", c.Rank(), op.name, pe.Rank)
	}
	return nil
}
