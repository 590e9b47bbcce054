package mpi

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"
)

// A rank that completes a collective and dies at once (no Finalize)
// must not fail the other members of that collective: every message it
// sent before dying arrives (docs/transport.md, Failures). The rank dies
// as soon as its own part is done, so its links may still be in set-up
// on the other side; many short jobs make those windows likely.
//
// Each (transport, operation) runs dieIters jobs (20, 5 with -short);
// $GOMPI_DIE_ITERS sets another count for a longer hunt, e.g. with two
// copies of the test running at once for load.
func TestDieAfterCollectiveStress(t *testing.T) {
	iters := 20
	if testing.Short() {
		iters = 5
	}
	if v, err := strconv.Atoi(os.Getenv("GOMPI_DIE_ITERS")); err == nil && v > 0 {
		iters = v
	}
	ops := []struct {
		name string
		run  func(c *Comm, victim int) error
	}{
		{"split+free", func(c *Comm, _ int) error {
			s, err := c.Split(0, c.Rank())
			if err != nil {
				return err
			}
			return s.Free()
		}},
		{"inter+free", func(c *Comm, _ int) error {
			// Two groups, the lower half and the rest, joined and freed.
			n, inA := c.Size(), c.Rank() < c.Size()/2
			color, remote := 1, 0
			if inA {
				color, remote = 0, n/2
			}
			local, err := c.Split(color, c.Rank())
			if err != nil {
				return err
			}
			ic, err := local.InterCommCreate(0, c, remote, 77)
			if err != nil {
				return err
			}
			if err := local.Free(); err != nil {
				return err
			}
			return ic.Free()
		}},
		{"bcast", func(c *Comm, victim int) error {
			b := make([]byte, 64)
			if c.Rank() == victim {
				for i := range b {
					b[i] = byte(i)
				}
			}
			if err := Bcast(c, b, victim); err != nil {
				return err
			}
			if b[63] != 63 {
				return fmt.Errorf("bcast: wrong data")
			}
			return nil
		}},
		{"allreduce", func(c *Comm, _ int) error {
			v := []int{c.Rank()}
			if err := Allreduce(c, v, v, Sum); err != nil {
				return err
			}
			if n := c.Size(); v[0] != n*(n-1)/2 {
				return fmt.Errorf("allreduce: %d", v[0])
			}
			return nil
		}},
	}
	for _, tr := range transportMods {
		for _, op := range ops {
			t.Run(tr.name+"/"+op.name, func(t *testing.T) {
				for it := 0; it < iters; it++ {
					n := 3 + it%3
					victim := []int{0, n / 2, n - 1}[it%3]
					dieAfter(t, n, victim, tr.mod, op.run)
					if t.Failed() {
						t.Fatalf("iteration %d (n=%d, victim %d)", it, n, victim)
					}
				}
			})
		}
	}
}

// dieAfter runs f on n fresh ranks; the victim is killed as soon as its
// f returns, and every other rank's f must succeed.
func dieAfter(t *testing.T, n, victim int, mod func(*Config), f func(c *Comm, victim int) error) {
	t.Helper()
	job := NewMemJob(n)
	comms := make([]*Comm, n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			cfg := Config{Bootstrap: job.Rank(i), Host: "127.0.0.1", Linger: 500 * time.Millisecond}
			if mod != nil {
				mod(&cfg)
			}
			c, err := InitConfig(bg, cfg)
			if err != nil {
				errs[i] = err
				return
			}
			comms[i] = c
			errs[i] = f(c, victim)
			if i == victim {
				killProc(c.p)
				c.Finalize()
			}
		}(i)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("ranks did not finish")
	}
	for i, err := range errs {
		if err != nil {
			t.Errorf("rank %d (victim %d of %d): %v", i, victim, n, err)
		}
	}
	for _, c := range comms {
		if c != nil {
			c.Finalize()
		}
	}
}
