package main

import (
	"fmt"
	"os"
	"strconv"

	"github.com/gompi/gompi/pmi/client"
	mpi "github.com/gompi/gompi/runtime"
)

// opDie: every rank runs one collective (args[0]: free, bcast or
// allreduce) and the victim (args[1], a rank) leaves as soon as its part
// is done, like a crash (after PMI finalize, so the job goes on). Every
// other rank must complete the operation: whatever the victim sent before
// it left still arrives, on every transport.
func opDie(c *mpi.Comm, pc *client.Client, args []string) error {
	if len(args) != 2 {
		return fmt.Errorf("usage: opdie free|bcast|allreduce VICTIM")
	}
	victim, err := strconv.Atoi(args[1])
	if err != nil || victim < 0 || victim >= c.Size() {
		return fmt.Errorf("victim %q: not a rank of %d", args[1], c.Size())
	}
	// No warm-up: links are made during the operation, as in an
	// application's first collective.
	switch args[0] {
	case "free":
		s, err := c.Split(0, c.Rank())
		if err == nil {
			err = s.Free()
		}
		if err != nil {
			return err
		}
	case "bcast":
		b := make([]byte, 64)
		if c.Rank() == victim {
			for i := range b {
				b[i] = byte(i)
			}
		}
		if err := mpi.Bcast(c, b, victim); err != nil {
			return err
		}
		if b[63] != 63 {
			return fmt.Errorf("bcast: wrong data")
		}
	case "allreduce":
		v := []int{c.Rank()}
		if err := mpi.Allreduce(c, v, v, mpi.Sum); err != nil {
			return err
		}
		if n := c.Size(); v[0] != n*(n-1)/2 {
			return fmt.Errorf("allreduce: %d, want %d", v[0], n*(n-1)/2)
		}
	default:
		return fmt.Errorf("unknown operation %q", args[0])
	}
	if c.Rank() == victim {
		fmt.Printf("rank %d: leaving\n", c.Rank())
		pc.Finalize()
		os.Exit(0)
	}
	return nil
}
