package mpi_test

import (
	"context"
	"fmt"
	"sync"

	mpi "github.com/gompi/gompi/runtime"
)

// Two ranks in one process (an in-memory process manager instead of PMI):
// rank 0 sends a slice and a value, rank 1 receives them, and both sum
// their ranks with Allreduce. A real program calls mpi.Init(ctx) instead.
func Example() {
	job := mpi.NewMemJob(2)
	var wg sync.WaitGroup
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			world, err := mpi.InitConfig(context.Background(), mpi.Config{Bootstrap: job.Rank(r), Host: "127.0.0.1"})
			if err != nil {
				fmt.Println(err)
				return
			}
			defer world.Finalize()
			if world.Rank() == 0 {
				mpi.Send(world, []float64{1.5, 2.5}, 1, 7)
				world.SendValue(map[string]int{"answer": 42}, 1, 8)
			} else {
				buf := make([]float64, 4)
				st, _ := mpi.Recv(world, buf, 0, mpi.AnyTag)
				var m map[string]int
				world.RecvValue(&m, mpi.AnySource, 8)
				fmt.Println("rank 1 got", buf[:st.Count], "with tag", st.Tag, "and", m["answer"])
			}
			sum := []int{0}
			mpi.Allreduce(world, []int{world.Rank() + 1}, sum, mpi.Sum)
			if world.Rank() == 1 {
				fmt.Println("sum of rank+1:", sum[0])
			}
		}(r)
	}
	wg.Wait()
	// Output:
	// rank 1 got [1.5 2.5] with tag 7 and 42
	// sum of rank+1: 3
}
