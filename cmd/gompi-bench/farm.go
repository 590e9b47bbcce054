package main

import (
	"time"

	mpi "github.com/gompi/gompi/runtime"
)

// farmTasks is the number of tasks of the farm benchmark.
const farmTasks = 2000

// farmWork is how long task i computes: 10 to 80 µs, varying, so that the
// master's waits for requests are neither all short nor all alike.
func farmWork(i int) time.Duration { return time.Duration(i%8+1) * 10 * time.Microsecond }

// farm is a task farm (test/bench/osu/osu.c's "farm" does the same with
// MPICH): rank 0 hands out farmTasks tasks, each an 8-byte message, to
// whichever worker asks first (Recv from AnySource), and the workers
// compute (busy, farmWork) and ask for the next with an 8-byte request. It
// prints the time of the whole farm in ms: request/response traffic where
// every wait is as long as a task, the case where a waiting policy that
// spins too long or sleeps too early shows.
func (b *bench) farm() error {
	c, r := b.c, b.c.Rank()
	tasks := farmTasks
	if b.iters > 0 {
		tasks = b.iters
	}
	msg := make([]int64, 1)
	if err := c.Barrier(); err != nil {
		return err
	}
	t0 := time.Now()
	if r == 0 {
		stopped := 0
		for next := 0; stopped < c.Size()-1; {
			st, err := mpi.Recv(c, msg, mpi.AnySource, 1)
			if err != nil {
				return err
			}
			msg[0] = -1
			if next < tasks {
				msg[0] = int64(next)
				next++
			} else {
				stopped++
			}
			if err := mpi.Send(c, msg, st.Source, 2); err != nil {
				return err
			}
		}
	} else {
		msg[0] = 0
		for {
			if err := mpi.Send(c, msg, 0, 1); err != nil {
				return err
			}
			if _, err := mpi.Recv(c, msg, 0, 2); err != nil {
				return err
			}
			if msg[0] < 0 {
				break
			}
			t := time.Now()
			for d := farmWork(int(msg[0])); time.Since(t) < d; {
			}
		}
	}
	b.emit("farm", 8, float64(time.Since(t0).Nanoseconds())/1e6)
	return nil
}
