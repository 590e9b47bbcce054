package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"time"

	mpi "github.com/gompi/gompi/runtime"
)

// concur: the runtime's concurrency and cancellation promises between
// real processes: communicators made at once on several goroutines are
// separate message spaces, a receive withdrawn by its context took no
// message (each message arrives once, in order, whatever its size), and
// a receive blocked on a communicator that another goroutine frees ends
// with ErrFreed.
func concur(c *mpi.Comm) error {
	if err := concurDups(c); err != nil {
		return fmt.Errorf("concurrent Dups: %w", err)
	}
	if err := concurCancel(c); err != nil {
		return fmt.Errorf("cancelled receives: %w", err)
	}
	if err := concurFree(c); err != nil {
		return fmt.Errorf("free while blocked: %w", err)
	}
	return c.Barrier()
}

func concurDups(c *mpi.Comm) error {
	a, err := c.Dup()
	if err != nil {
		return err
	}
	b, err := c.Dup()
	if err != nil {
		return err
	}
	n, me := c.Size(), c.Rank()
	to, from := (me+1)%n, (me+n-1)%n
	for round := 0; round < 10; round++ {
		var a2, b2 *mpi.Comm
		var ea, eb error
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); a2, ea = a.Dup() }()
		go func() { defer wg.Done(); b2, eb = b.Dup() }()
		wg.Wait()
		if err := errors.Join(ea, eb); err != nil {
			return err
		}
		if err := errors.Join(mpi.Send(a2, []byte{'a'}, to, 0), mpi.Send(b2, []byte{'b'}, to, 0)); err != nil {
			return err
		}
		got := make([]byte, 1)
		if _, err := mpi.Recv(b2, got, from, 0); err != nil || got[0] != 'b' {
			return fmt.Errorf("round %d: receive on one Dup got %q (%v), sent on another made at the same time", round, got, err)
		}
		if _, err := mpi.Recv(a2, got, from, 0); err != nil || got[0] != 'a' {
			return fmt.Errorf("round %d: receive on one Dup got %q (%v), sent on another made at the same time", round, got, err)
		}
		if err := errors.Join(a2.Free(), b2.Free()); err != nil {
			return err
		}
	}
	return errors.Join(a.Free(), b.Free())
}

// concurSizes: empty, eager, past the shared-memory eager limit (64 KiB)
// and past the CMA split (256 KiB).
var concurSizes = []int{0, 8, 1000, 70000, 300 << 10}

func concurMsg(i int) []byte {
	b := make([]byte, concurSizes[i%len(concurSizes)])
	for k := range b {
		b[k] = byte(i + k)
	}
	if len(b) >= 8 {
		binary.LittleEndian.PutUint64(b, uint64(i))
	}
	return b
}

// concurCancel: every even rank sends to the next odd one, which
// receives with contexts that end at random moments.
func concurCancel(c *mpi.Comm) error {
	const msgs = 150
	me := c.Rank()
	switch {
	case me%2 == 0 && me+1 < c.Size():
		for i := 0; i < msgs; i++ {
			if err := mpi.Send(c, concurMsg(i), me+1, i%2); err != nil {
				return err
			}
		}
	case me%2 == 1:
		rng := rand.New(rand.NewSource(int64(me)))
		buf := make([]byte, 300<<10)
		for i := 0; i < msgs; {
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.Intn(300))*time.Microsecond)
			st, err := mpi.RecvContext(ctx, c, buf, me-1, i%2)
			cancel()
			if err != nil && errors.Is(err, ctx.Err()) {
				continue
			}
			if err != nil {
				return err
			}
			want := concurMsg(i)
			if st.Bytes != len(want) || string(buf[:st.Bytes]) != string(want) {
				return fmt.Errorf("message %d: got %d bytes, want %d (lost, duplicated or overtaken)", i, st.Bytes, len(want))
			}
			i++
		}
		if ok, st, err := mpi.Iprobe[byte](c, mpi.AnySource, mpi.AnyTag); ok || err != nil {
			return fmt.Errorf("a message is left over: %+v %v", st, err)
		}
	}
	return c.Barrier()
}

func concurFree(c *mpi.Comm) error {
	d, err := c.Dup()
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() {
		_, err := mpi.Recv(d, make([]byte, 8), (d.Rank()+1)%d.Size(), 99)
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if err := d.Free(); err != nil {
		return err
	}
	select {
	case err := <-done:
		if !errors.Is(err, mpi.ErrFreed) {
			return fmt.Errorf("receive on the freed communicator returned %v, want ErrFreed", err)
		}
	case <-time.After(5 * time.Second):
		return errors.New("a receive blocked on a communicator still waits 5s after another goroutine freed it")
	}
	return nil
}
