// Command tutorial is the mpi4py tutorial (https://mpi4py.readthedocs.io,
// "Tutorial") in Go: point-to-point communication of a value (a Python dict
// becomes a Go map), broadcast, scatter and gather of values, and the
// buffer-based collectives on a numeric matrix that root scatters by rows.
// Every step checks its result; rank 0 prints one line per step.
//
//	gompiexec -n 4 ./tutorial -rows 1000 -cols 64
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"reflect"
	"time"

	mpi "github.com/gompi/gompi/runtime"
)

var (
	rows = flag.Int("rows", 1000, "rows N of the matrix that root scatters")
	cols = flag.Int("cols", 64, "columns M of the matrix")
)

func main() {
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	comm, err := mpi.Init(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tutorial:", err)
		os.Exit(1)
	}
	for _, step := range []struct {
		name string
		f    func(*mpi.Comm) error
	}{
		{"point-to-point of a map", p2p},
		{"broadcast of a value", bcast},
		{"scatter of values", scatter},
		{"gather of values", gather},
		{"broadcast of an array", bcastArray},
		{"scatter of matrix rows, gather of row sums", rowSums},
	} {
		if err := step.f(comm); err != nil {
			fmt.Fprintf(os.Stderr, "tutorial: rank %d: %s: %v\n", comm.Rank(), step.name, err)
			comm.Abort(1)
			os.Exit(1)
		}
		if comm.Rank() == 0 {
			fmt.Printf("tutorial: %s: ok\n", step.name)
		}
	}
	if err := comm.Finalize(); err != nil {
		fmt.Fprintln(os.Stderr, "tutorial:", err)
		os.Exit(1)
	}
}

// p2p: rank 0 sends a dict to rank 1.
//
//	if rank == 0:
//	    data = {'a': 7, 'b': 3.14}
//	    comm.send(data, dest=1, tag=11)
//	elif rank == 1:
//	    data = comm.recv(source=0, tag=11)
func p2p(comm *mpi.Comm) error {
	want := map[string]float64{"a": 7, "b": 3.14}
	switch comm.Rank() {
	case 0:
		if comm.Size() > 1 {
			return comm.SendValue(want, 1, 11)
		}
	case 1:
		var data map[string]float64
		if _, err := comm.RecvValue(&data, 0, 11); err != nil {
			return err
		}
		if !reflect.DeepEqual(data, want) {
			return fmt.Errorf("received %v", data)
		}
	}
	return nil
}

// Data is the tutorial's {'key1': [7, 2.72, 2+3j], 'key2': ('abc', 'xyz')}.
type Data struct {
	Key1 []any
	Key2 [2]string
}

// bcast:
//
//	if rank == 0:
//	    data = {'key1' : [7, 2.72, 2+3j], 'key2' : ( 'abc', 'xyz')}
//	else:
//	    data = None
//	data = comm.bcast(data, root=0)
func bcast(comm *mpi.Comm) error {
	want := Data{Key1: []any{7, 2.72, complex(2, 3)}, Key2: [2]string{"abc", "xyz"}}
	var data Data
	if comm.Rank() == 0 {
		data = want
	}
	if err := mpi.BcastValue(comm, &data, 0); err != nil {
		return err
	}
	if !reflect.DeepEqual(data, want) {
		return fmt.Errorf("got %#v", data)
	}
	return nil
}

// scatter:
//
//	if rank == 0:
//	    data = [(i+1)**2 for i in range(size)]
//	else:
//	    data = None
//	data = comm.scatter(data, root=0)
//	assert data == (rank+1)**2
func scatter(comm *mpi.Comm) error {
	var data []int
	if comm.Rank() == 0 {
		for i := 0; i < comm.Size(); i++ {
			data = append(data, (i+1)*(i+1))
		}
	}
	mine, err := mpi.ScatterValue(comm, data, 0)
	if err != nil {
		return err
	}
	if r := comm.Rank(); mine != (r+1)*(r+1) {
		return fmt.Errorf("got %d", mine)
	}
	return nil
}

// gather:
//
//	data = (rank+1)**2
//	data = comm.gather(data, root=0)
//	if rank == 0:
//	    for i in range(size):
//	        assert data[i] == (i+1)**2
//	else:
//	    assert data is None
func gather(comm *mpi.Comm) error {
	r := comm.Rank()
	data, err := mpi.GatherValue(comm, (r+1)*(r+1), 0)
	if err != nil {
		return err
	}
	if r != 0 {
		if data != nil {
			return errors.New("non-root got data")
		}
		return nil
	}
	for i := range comm.Size() {
		if data[i] != (i+1)*(i+1) {
			return fmt.Errorf("data[%d] = %d", i, data[i])
		}
	}
	return nil
}

// bcastArray: buffer-based broadcast of a NumPy array.
//
//	if rank == 0:
//	    data = np.arange(100, dtype='i')
//	else:
//	    data = np.empty(100, dtype='i')
//	comm.Bcast(data, root=0)
func bcastArray(comm *mpi.Comm) error {
	data := make([]int32, 100)
	if comm.Rank() == 0 {
		for i := range data {
			data[i] = int32(i)
		}
	}
	if err := mpi.Bcast(comm, data, 0); err != nil {
		return err
	}
	for i := range data {
		if data[i] != int32(i) {
			return fmt.Errorf("data[%d] = %d", i, data[i])
		}
	}
	return nil
}

// rowSums: root holds an N×M matrix of float64 (row-major); Scatterv
// gives each rank a block of whole rows (N/size each, the first N%size
// ranks one more), every rank sums its rows, Gatherv collects the sums at
// root, which checks them against its own computation and prints the
// total.
func rowSums(comm *mpi.Comm) error {
	n, m := *rows, *cols
	size, rank := comm.Size(), comm.Rank()
	rowsOf := func(r int) int {
		k := n / size
		if r < n%size {
			k++
		}
		return k
	}
	counts, rowCounts := make([]int, size), make([]int, size)
	for r := range counts {
		rowCounts[r] = rowsOf(r)
		counts[r] = rowCounts[r] * m
	}
	var a []float64
	if rank == 0 {
		a = make([]float64, n*m)
		for i := range n {
			for j := range m {
				a[i*m+j] = math.Sin(float64(i+1)) * float64(j%7+1)
			}
		}
	}
	local := make([]float64, counts[rank])
	if err := mpi.Scatterv(comm, a, counts, nil, local, 0); err != nil {
		return err
	}
	sums := make([]float64, rowCounts[rank])
	for i := range sums {
		for _, x := range local[i*m : (i+1)*m] {
			sums[i] += x
		}
	}
	var all []float64
	if rank == 0 {
		all = make([]float64, n)
	}
	if err := mpi.Gatherv(comm, sums, all, rowCounts, nil, 0); err != nil {
		return err
	}
	// Everyone also learns the grand total (Allreduce of the local sums).
	mine, total := []float64{0}, []float64{0}
	for _, s := range sums {
		mine[0] += s
	}
	if err := mpi.Allreduce(comm, mine, total, mpi.Sum); err != nil {
		return err
	}
	if rank != 0 {
		return nil
	}
	want := 0.0
	for i := range n {
		s := 0.0
		for _, x := range a[i*m : (i+1)*m] {
			s += x
		}
		if all[i] != s {
			return fmt.Errorf("row %d: sum %v, want %v", i, all[i], s)
		}
		want += s
	}
	if math.Abs(total[0]-want) > 1e-9*math.Max(1, math.Abs(want)) {
		return fmt.Errorf("total %v, want %v", total[0], want)
	}
	fmt.Printf("tutorial: %d×%d matrix over %d ranks: %d row sums checked, total %.6f\n", n, m, size, n, want)
	return nil
}
