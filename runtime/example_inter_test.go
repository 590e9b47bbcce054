package mpi_test

import (
	"context"
	"fmt"
	"sync"

	mpi "github.com/gompi/gompi/runtime"
)

// A task farm as two groups: world rank 0 is the manager, ranks 1..3 the
// workers. An intercommunicator joins them, so ranks on either side name
// the other group's members; Bcast with Root/ProcNull sends from one group
// to the other, Allreduce gives each group the other group's sum, and
// Merge makes one communicator with the manager first.
func ExampleComm_InterCommCreate() {
	const n = 4
	job := mpi.NewMemJob(n)
	var wg sync.WaitGroup
	out := make([]string, n)
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			world, err := mpi.InitConfig(context.Background(), mpi.Config{Bootstrap: job.Rank(r), Host: "127.0.0.1"})
			if err != nil {
				fmt.Println(err)
				return
			}
			defer world.Finalize()
			manager := world.Rank() == 0
			color, remoteLeader := 1, 0 // workers: the manager is world rank 0
			if manager {
				color, remoteLeader = 0, 1 // manager: the workers' leader is world rank 1
			}
			local, _ := world.Split(color, world.Rank())
			ic, err := local.InterCommCreate(0, world, remoteLeader, 99)
			if err != nil {
				fmt.Println(err)
				return
			}
			local.Free() // the intercommunicator keeps its own copy
			task := []int{0}
			switch {
			case manager:
				task[0] = 7
				mpi.Bcast(ic, task, mpi.Root)
			default:
				mpi.Bcast(ic, task, 0) // from the remote group's rank 0
			}
			// Each worker sends its result to the manager (remote rank 0).
			if !manager {
				mpi.Send(ic, []int{task[0] * ic.Rank()}, 0, 1)
			} else {
				total := 0
				for i := 0; i < ic.RemoteSize(); i++ {
					v := []int{0}
					mpi.Recv(ic, v, mpi.AnySource, 1)
					total += v[0]
				}
				out[r] = fmt.Sprintf("manager: %d workers, total %d", ic.RemoteSize(), total)
			}
			sum := []int{0}
			mpi.Allreduce(ic, []int{world.Rank()}, sum, mpi.Sum)
			merged, _ := ic.Merge(!manager)
			if world.Rank() == 3 {
				out[r] = fmt.Sprintf("world rank 3: the other group's sum %d, merged rank %d of %d", sum[0], merged.Rank(), merged.Size())
			}
			merged.Free()
			ic.Free()
		}(r)
	}
	wg.Wait()
	fmt.Println(out[0])
	fmt.Println(out[3])
	// Output:
	// manager: 3 workers, total 21
	// world rank 3: the other group's sum 0, merged rank 3 of 4
}
