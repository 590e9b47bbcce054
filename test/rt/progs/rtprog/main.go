// Command rtprog is a rank program for the runtime's end-to-end tests; its
// first argument picks a scenario. Each rank prints "rank R: ok" when the
// scenario passes, or "rank R: FAIL ..." and exits 1.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/gompi/gompi/internal/shm"
	"github.com/gompi/gompi/pmi/client"
	mpi "github.com/gompi/gompi/runtime"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	scenario := "all"
	if len(os.Args) > 1 {
		scenario = os.Args[1]
	}
	pc, err := client.New(ctx)
	if err != nil {
		fmt.Println("FAIL pmi:", err)
		os.Exit(1)
	}
	c, err := mpi.InitConfig(ctx, mpi.Config{Bootstrap: pc})
	if err != nil {
		fmt.Println("FAIL init:", err)
		os.Exit(1)
	}
	switch scenario {
	case "all":
		err = all(ctx, c)
	case "die", "kill":
		err = die(ctx, c, pc, scenario == "kill")
	case "killdac":
		// "kill" under gompiexec -disable-auto-cleanup: the job goes on,
		// and PMI_dead_processes names the victim.
		if err = die(ctx, c, pc, true); err == nil {
			err = deadListed(ctx, pc, c.Size()-1)
		}
	case "abort":
		// The last rank aborts with code 7; gompiexec must end the job with 7.
		if c.Rank() == c.Size()-1 {
			c.Abort(7)
			if _, err := mpi.Recv(c, []byte{0}, 0, 1); !errors.Is(err, mpi.ErrAborted) {
				fmt.Printf("rank %d: FAIL receive after abort: %v\n", c.Rank(), err)
			}
			time.Sleep(time.Minute)
		}
		// The receive either waits until gompiexec ends the job or, once
		// the aborting rank has closed its endpoint, fails naming it.
		_, err = mpi.Recv(c, []byte{0}, c.Size()-1, 1)
		var pe *mpi.PeerError
		if !errors.As(err, &pe) || pe.Rank != c.Size()-1 {
			fmt.Printf("rank %d: FAIL receive returned %v\n", c.Rank(), err)
		}
		err = nil
		time.Sleep(time.Minute)
	case "bench":
		err = bench(c)
	case "pairs":
		err = pairs(c)
	case "shmkill":
		// Every pair connects (over shared memory on one host); then rank
		// 0 leaves a rendezvous file as if a peer had died mid-connect, and
		// the last rank is SIGKILLed. gompi-proxy must sweep the file.
		if err = c.Barrier(); err == nil {
			err = ring(c)
		}
		if err == nil && c.Rank() == 0 {
			name := fmt.Sprintf("gompi-%s.deadbeefdeadbeef-0-%d", shm.JobBase(os.Getenv("GOMPI_JOBID")), c.Size()+5)
			err = os.WriteFile(filepath.Join(os.Getenv("GOMPI_SHM_DIR"), name), nil, 0o600)
		}
		if err == nil {
			err = c.Barrier()
		}
		if err == nil && c.Rank() == c.Size()-1 {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		if err == nil {
			time.Sleep(time.Minute) // gompiexec ends the job
		}
	case "stranger":
		err = stranger(ctx, c, pc)
	case "inter":
		err = inter(c)
	case "interdie":
		err = interDie(ctx, c, pc)
	case "opdie":
		err = opDie(c, pc, os.Args[2:])
	case "colldie":
		err = collDie(c, pc, os.Args[2:])
	case "concur":
		err = concur(c)
	default:
		err = fmt.Errorf("unknown scenario %q", scenario)
	}
	if err != nil {
		fmt.Printf("rank %d: FAIL %s: %v\n", c.Rank(), scenario, err)
		os.Exit(1)
	}
	if err := c.Finalize(); err != nil {
		fmt.Printf("rank %d: FAIL finalize: %v\n", c.Rank(), err)
		os.Exit(1)
	}
	fmt.Printf("rank %d: ok\n", c.Rank())
}

// pairs ping-pongs 8 bytes in every pair (0,1), (2,3), ... at once, to see
// latency when ranks outnumber cores, and prints each pair's median.
func pairs(c *mpi.Comm) error {
	r := c.Rank()
	peer := r ^ 1
	if peer >= c.Size() {
		return c.Barrier()
	}
	buf := make([]byte, 8)
	var ds []time.Duration
	for i := 0; i < 2001; i++ {
		t0 := time.Now()
		if r&1 == 0 {
			if err := mpi.Send(c, buf, peer, 0); err != nil {
				return err
			}
			if _, err := mpi.Recv(c, buf, peer, 0); err != nil {
				return err
			}
		} else {
			if _, err := mpi.Recv(c, buf, peer, 0); err != nil {
				return err
			}
			if err := mpi.Send(c, buf, peer, 0); err != nil {
				return err
			}
		}
		ds = append(ds, time.Since(t0))
	}
	slices.Sort(ds[1:])
	if r&1 == 0 {
		fmt.Printf("pairs: %d-%d ping-pong 8 B: median round trip %.2f us\n", r, peer, float64(ds[1+len(ds[1:])/2].Nanoseconds())/1000)
	}
	return c.Barrier()
}

// ring sends one byte around the ring in both directions.
func ring(c *mpi.Comm) error {
	r, n := c.Rank(), c.Size()
	for d := 1; d < n; d++ {
		in := []byte{0}
		if _, err := mpi.Sendrecv(c, []byte{byte(r)}, (r+d)%n, 3, in, (r+n-d)%n, 3); err != nil {
			return err
		}
	}
	return nil
}

func all(ctx context.Context, c *mpi.Comm) error {
	r, n := c.Rank(), c.Size()
	right, left := (r+1)%n, (r+n-1)%n
	step := func(name string, err error) error {
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	}
	// Ring with blocking send/recv: even ranks send first. Sizes cover
	// eager and rendezvous.
	for _, size := range []int{0, 1, 1000, 200000} {
		out := make([]float64, size)
		for i := range out {
			out[i] = float64(r*1000000 + i)
		}
		in := make([]float64, size)
		var err error
		if n == 1 {
			_, err = mpi.Sendrecv(c, out, 0, 1, in, 0, 1)
		} else if r%2 == 0 {
			if err = mpi.Send(c, out, right, 1); err == nil {
				_, err = mpi.Recv(c, in, left, 1)
			}
		} else {
			if _, err = mpi.Recv(c, in, left, 1); err == nil {
				err = mpi.Send(c, out, right, 1)
			}
		}
		if err != nil {
			return step(fmt.Sprintf("ring %d", size), err)
		}
		for i := range in {
			if in[i] != float64(left*1000000+i) {
				return fmt.Errorf("ring %d: in[%d]=%v", size, i, in[i])
			}
		}
	}
	// Isend/Irecv to everyone, WaitAll.
	var reqs []*mpi.Request
	ins := make([][]int32, n)
	for s := 0; s < n; s++ {
		ins[s] = make([]int32, 3)
		reqs = append(reqs, mpi.Irecv(c, ins[s], s, 2))
	}
	for d := 0; d < n; d++ {
		reqs = append(reqs, mpi.Isend(c, []int32{int32(r), int32(d), 7}, d, 2))
	}
	if _, err := mpi.WaitAll(ctx, reqs...); err != nil {
		return step("isend/irecv", err)
	}
	for s := 0; s < n; s++ {
		if ins[s][0] != int32(s) || ins[s][1] != int32(r) {
			return fmt.Errorf("isend/irecv from %d: %v", s, ins[s])
		}
	}
	// Sendrecv shift.
	got := []int{-1}
	st, err := mpi.Sendrecv(c, []int{r}, right, 3, got, left, 3)
	if err != nil || got[0] != left || st.Source != left {
		return fmt.Errorf("sendrecv: %v %+v %v", got, st, err)
	}
	// Probe + values + AnySource + ordering: everyone sends 20 ordered
	// values to rank 0.
	type rec struct {
		From, Seq int
		Note      string
	}
	for i := 0; i < 20; i++ {
		if err := c.SendValue(rec{r, i, strings.Repeat("x", i)}, 0, 4); err != nil {
			return step("send value", err)
		}
	}
	if r == 0 {
		next := make([]int, n)
		for i := 0; i < 20*n; i++ {
			st, err := mpi.Probe[byte](c, mpi.AnySource, 4)
			if err != nil {
				return step("probe", err)
			}
			var v rec
			if _, err := c.RecvValue(&v, st.Source, 4); err != nil {
				return step("recv value", err)
			}
			if v.From != st.Source || v.Seq != next[v.From] {
				return fmt.Errorf("ordering: got %+v from %d, want seq %d", v, st.Source, next[v.From])
			}
			next[v.From]++
		}
	}
	// Truncation.
	if err := mpi.Send(c, []int64{1, 2, 3, 4}, right, 5); err != nil {
		return step("send", err)
	}
	small := make([]int64, 2)
	if st, err := mpi.Recv(c, small, left, 5); !errors.Is(err, mpi.ErrTruncate) || st.Count != 2 {
		return fmt.Errorf("truncation: %+v %v", st, err)
	}
	// Cancellation of a wait, then of the receive.
	req := mpi.Irecv(c, make([]byte, 1), left, 99)
	wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	_, err = req.Wait(wctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || !req.Cancel() {
		return fmt.Errorf("cancellation: %v", err)
	}
	// Dup/Split and collectives.
	d, err := c.Dup()
	if err != nil {
		return step("dup", err)
	}
	s, err := d.Split(r%2, r)
	if err != nil {
		return step("split", err)
	}
	sum := []int{0}
	if err := mpi.Allreduce(s, []int{r}, sum, mpi.Sum); err != nil {
		return step("allreduce", err)
	}
	want := 0
	for i := r % 2; i < n; i += 2 {
		want += i
	}
	if sum[0] != want {
		return fmt.Errorf("split allreduce: %d want %d", sum[0], want)
	}
	for i := 0; i < 3; i++ {
		if err := d.Barrier(); err != nil {
			return step("barrier", err)
		}
	}
	return c.Barrier()
}

// die: the last rank leaves without the runtime's Finalize (its
// connections drop), or with "kill" is killed by SIGKILL; the
// others' pending and later operations with it must fail with *PeerError.
func die(ctx context.Context, c *mpi.Comm, pc *client.Client, kill bool) error {
	n := c.Size()
	victim := n - 1
	if err := c.Barrier(); err != nil { // connects the ring of the barrier
		return err
	}
	for d := 0; d < n; d++ { // connect every pair
		if err := mpi.Send(c, []byte{1}, d, 1); err != nil {
			return err
		}
	}
	for s := 0; s < n; s++ {
		if _, err := mpi.Recv(c, []byte{0}, s, 1); err != nil {
			return err
		}
	}
	if err := c.Barrier(); err != nil {
		return err
	}
	if c.Rank() == victim {
		// Tell the process manager we are done (so it does not end the
		// job), but leave the runtime's connections to drop like a crash.
		fmt.Printf("rank %d: leaving\n", c.Rank())
		if kill {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		pc.Finalize()
		os.Exit(0)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err := mpi.Irecv(c, make([]byte, 8), victim, 2).Wait(wctx)
	var pe *mpi.PeerError
	if !errors.As(err, &pe) || pe.Rank != victim {
		return fmt.Errorf("pending receive from the dead rank: %v", err)
	}
	if err := mpi.Send(c, []byte{1}, victim, 3); !errors.As(err, &pe) {
		return fmt.Errorf("send to the dead rank: %v", err)
	}
	fmt.Printf("rank %d: saw %v\n", c.Rank(), err)
	// The survivors still talk.
	if c.Rank() == 0 && n > 2 {
		return mpi.Send(c, []int{42}, 1, 4)
	}
	if c.Rank() == 1 && n > 2 {
		v := []int{0}
		if _, err := mpi.Recv(c, v, 0, 4); err != nil || v[0] != 42 {
			return fmt.Errorf("survivors: %v %v", v, err)
		}
	}
	return nil
}

// deadListed waits until PMI_dead_processes lists exactly rank victim.
func deadListed(ctx context.Context, pc *client.Client, victim int) error {
	want := fmt.Sprint(victim)
	var got string
	var err error
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if got, err = pc.Get(ctx, "PMI_dead_processes"); err == nil && got == want {
			return nil
		}
	}
	return fmt.Errorf("PMI_dead_processes = %q, %v; want %q", got, err, want)
}

// stranger: rank 0 connects to rank 1's port without the secret; rank 1
// must drop it and the job must go on.
func stranger(ctx context.Context, c *mpi.Comm, pc *client.Client) error {
	if c.Rank() == 0 {
		addr, err := pc.Get(ctx, "gompi-rt-addr-1")
		if err != nil {
			return err
		}
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			return err
		}
		conn.Write([]byte("GOMPI-RT1\x00\x00\x00\x00\x01\x00\x00\x00 forged handshake without the secret ......"))
		conn.SetDeadline(time.Now().Add(30 * time.Second))
		b, _ := io.ReadAll(conn)
		conn.Close()
		if len(b) > 25 { // only the acceptor's hello (magic + nonce)
			return fmt.Errorf("stranger got %d bytes back", len(b))
		}
		fmt.Printf("rank 0: stranger dropped after %d bytes\n", len(b))
	}
	if err := c.Barrier(); err != nil {
		return err
	}
	return all(ctx, c)
}

// bench prints ping-pong latency and bandwidth between ranks 0 and 1, and
// barrier and allreduce times over all ranks (medians of repetitions).
func bench(c *mpi.Comm) error {
	r := c.Rank()
	median := func(f func() error, reps int) (time.Duration, error) {
		var ds []time.Duration
		for i := 0; i < reps; i++ {
			t0 := time.Now()
			if err := f(); err != nil {
				return 0, err
			}
			ds = append(ds, time.Since(t0))
		}
		slices.Sort(ds)
		return ds[len(ds)/2], nil
	}
	if c.Size() >= 2 {
		for _, size := range []int{8, 1 << 20, 4 << 20} {
			buf := make([]byte, size)
			reps := 1000
			if size > 1000 {
				reps = 30
			}
			pingpong := func() error {
				switch r {
				case 0:
					if err := mpi.Send(c, buf, 1, 0); err != nil {
						return err
					}
					_, err := mpi.Recv(c, buf, 1, 0)
					return err
				case 1:
					if _, err := mpi.Recv(c, buf, 0, 0); err != nil {
						return err
					}
					return mpi.Send(c, buf, 0, 0)
				}
				return nil
			}
			pingpong() // connect, warm up
			d, err := median(pingpong, reps)
			if err != nil {
				return err
			}
			if r == 0 {
				oneWay := d / 2
				fmt.Printf("bench: ping-pong %d B: one-way %.2f us, %.2f GB/s\n", size,
					float64(oneWay.Nanoseconds())/1000, float64(size)/float64(oneWay.Nanoseconds()))
			}
		}
	}
	d, err := median(c.Barrier, 200)
	if err != nil {
		return err
	}
	if r == 0 {
		fmt.Printf("bench: barrier %d ranks: %.2f us\n", c.Size(), float64(d.Nanoseconds())/1000)
	}
	for _, n := range []int{1, 1 << 17} {
		in, out := make([]float64, n), make([]float64, n)
		d, err := median(func() error { return mpi.Allreduce(c, in, out, mpi.Sum) }, 50)
		if err != nil {
			return err
		}
		if r == 0 {
			fmt.Printf("bench: allreduce %d doubles, %d ranks: %.2f us\n", n, c.Size(), float64(d.Nanoseconds())/1000)
		}
	}
	return nil
}
