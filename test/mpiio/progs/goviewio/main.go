// Command goviewio is progs/viewio.c on gompi's runtime/mpiio: the same
// command line, views, byte pattern and checks, so that test/mpiio can
// compare the files each writes and have each read the other's.
//
//	goviewio [-r] [-i] [-H key=value]... FILE VIEW [FILE VIEW]...
//
// See viewio.c for the views.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	mpi "github.com/gompi/gompi/runtime"
	"github.com/gompi/gompi/runtime/mpiio"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	comm, err := mpi.Init(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "goviewio:", err)
		os.Exit(1)
	}
	if err := run(ctx, comm, os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "goviewio: rank %d: %v\n", comm.Rank(), err)
		comm.Abort(3)
		os.Exit(3)
	}
	if err := comm.Finalize(); err != nil {
		fmt.Fprintln(os.Stderr, "goviewio:", err)
		os.Exit(1)
	}
}

// pattern is viewio.c's pattern(r, k).
func pattern(r int, k int64) byte { return byte(int64(r)*37 + k*11 + (k >> 9) + 1) }

var errUsage = errors.New("usage: goviewio [-r] [-i] [-H key=value]... FILE VIEW [FILE VIEW]... (see viewio.c)")

func run(ctx context.Context, comm *mpi.Comm, args []string) error {
	read, indep := false, false
	hints := mpiio.Hints{}
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		switch {
		case args[0] == "-r":
			read = true
		case args[0] == "-i":
			indep = true
		case args[0] == "-H" && len(args) > 1:
			k, v, ok := strings.Cut(args[1], "=")
			if !ok {
				return errUsage
			}
			hints[k] = v
			args = args[1:]
		default:
			return errUsage
		}
		args = args[1:]
	}
	if len(args) < 2 || len(args)%2 != 0 {
		return errUsage
	}
	for ; len(args) > 0; args = args[2:] {
		if err := one(ctx, comm, read, indep, hints, args[0], args[1]); err != nil {
			return err
		}
	}
	return nil
}

func one(ctx context.Context, comm *mpi.Comm, read, indep bool, hints mpiio.Hints, path, spec string) error {
	v, err := BuildView(spec, comm.Rank(), comm.Size())
	if err != nil {
		return err
	}
	r := comm.Rank()
	buf := make([]byte, v.Bytes)
	if !read {
		for k := range buf {
			buf[k] = pattern(r, int64(k))
		}
	}
	mode := mpiio.ModeRdonly
	if !read {
		mode = mpiio.ModeCreate | mpiio.ModeWronly
	}
	f, err := mpiio.Open(ctx, comm, path, mode, hints)
	if err != nil {
		return err
	}
	if err := f.SetView(v.Disp, v.Etype, v.Filetype); err != nil {
		f.Close()
		return err
	}
	var n int
	switch {
	case read && indep:
		n, err = f.ReadAt(buf, 0)
	case read:
		n, err = f.ReadAtAll(buf, 0)
	case indep:
		n, err = f.WriteAt(buf, 0)
	default:
		n, err = f.WriteAtAll(buf, 0)
	}
	if err != nil {
		f.Close()
		return err
	}
	if n != len(buf) {
		f.Close()
		return fmt.Errorf("%s: %d of %d bytes", path, n, len(buf))
	}
	if err := f.Close(); err != nil {
		return err
	}
	if read {
		for k, b := range buf {
			if want := pattern(r, int64(k)); b != want {
				return fmt.Errorf("%s: view byte %d is %d, want %d", path, k, b, want)
			}
		}
	}
	what := "wrote"
	if read {
		what = "verified"
	}
	fmt.Printf("goviewio: rank %d %s %d bytes of %s\n", r, what, len(buf), path)
	return nil
}

// View is one of viewio.c's views for one rank.
type View struct {
	Disp            int64
	Etype, Filetype mpi.Datatype
	Bytes           int64 // this rank's data
}

// BuildView builds the view spec ("vector:3,100,4") names for rank r of p
// exactly as viewio.c does with MPI's constructors.
func BuildView(spec string, r, p int) (View, error) {
	kind, params, ok := strings.Cut(spec, ":")
	if !ok {
		return View{}, fmt.Errorf("view %q: want KIND:N[,N[,N]]", spec)
	}
	a := []int{0, 0, 1}
	for i, s := range strings.Split(params, ",") {
		x, err := strconv.Atoi(s)
		if err != nil || i >= 3 || x < 0 {
			return View{}, fmt.Errorf("view %q: bad parameter %q", spec, s)
		}
		a[i] = x
	}
	v := View{Disp: 64, Etype: mpi.Byte, Filetype: mpi.Byte}
	var err error
	switch kind {
	case "contig":
		v.Disp += int64(r * a[0])
		v.Bytes = int64(a[0])
	case "vector", "hvector":
		c, b, reps := a[0], a[1], a[2]
		var t mpi.Datatype
		if kind == "vector" {
			t, err = mpi.Vector(c, b, p*b, mpi.Byte)
		} else {
			t, err = mpi.Hvector(c, b, int64(p*b), mpi.Byte)
		}
		if err == nil {
			v.Filetype, err = mpi.Resized(t, 0, int64(c*p*b))
		}
		v.Disp += int64(r * b)
		v.Bytes = int64(reps * c * b)
	case "indexed":
		k, u, reps := a[0], a[1], a[2]
		lens, displs := make([]int, k), make([]int, k)
		off, mine := 0, 0
		for i := range lens {
			lens[i] = (i%3 + 1) * u
			displs[i] = off + r*lens[i]
			off += p * lens[i]
			mine += lens[i]
		}
		var t mpi.Datatype
		if t, err = mpi.Indexed(lens, displs, mpi.Byte); err == nil {
			v.Filetype, err = mpi.Resized(t, 0, int64(off))
		}
		v.Bytes = int64(reps * mine)
	case "subarray-c", "subarray-f":
		p0, p1 := grid(p)
		g := []int{a[0], a[1]}
		st0, sz0 := block(g[0], p0, r/p1)
		st1, sz1 := block(g[1], p1, r%p1)
		order := mpi.OrderC
		if kind == "subarray-f" {
			order = mpi.OrderFortran
		}
		v.Filetype, err = mpi.Subarray(g, []int{sz0, sz1}, []int{st0, st1}, order, mpi.Int32)
		v.Etype = mpi.Int32
		v.Bytes = int64(4 * sz0 * sz1)
	case "struct":
		x, y, reps := a[0], a[1], a[2]
		var t mpi.Datatype
		t, err = mpi.Struct([]int{x, y}, []int64{int64(r * x), int64(p*x + 4*r*y)}, []mpi.Datatype{mpi.Byte, mpi.Int32})
		if err == nil {
			v.Filetype, err = mpi.Resized(t, 0, int64(p*(x+4*y)))
		}
		v.Bytes = int64(reps * (x + 4*y))
	default:
		return View{}, fmt.Errorf("view %q: unknown kind %q", spec, kind)
	}
	if err != nil {
		return View{}, fmt.Errorf("view %q: %w", spec, err)
	}
	return v, nil
}

// grid is viewio.c's grid: p0 the largest divisor of p not above sqrt p.
func grid(p int) (int, int) {
	d := 1
	for i := 1; i*i <= p; i++ {
		if p%i == 0 {
			d = i
		}
	}
	return d, p / d
}

// block is viewio.c's block distribution of n over p parts: part i.
func block(n, p, i int) (start, size int) {
	q, rem := n/p, n%p
	size = q
	if i < rem {
		size++
		return i*q + i, size
	}
	return i*q + rem, size
}
