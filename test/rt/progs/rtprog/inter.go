package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/gompi/gompi/pmi/client"
	mpi "github.com/gompi/gompi/runtime"
)

// interSetup splits the world into A (ranks 0..a-1) and B (the rest, in
// reverse order) and joins them in an intercommunicator. It returns the
// intercommunicator, whether this rank is in A, and the remote group's
// world ranks in its rank order.
func interSetup(c *mpi.Comm) (*mpi.Comm, bool, []int, error) {
	n, r := c.Size(), c.Rank()
	a := max(1, (n-1)/2)
	inA := r < a
	color, key, remoteLeader := 1, n-r, 0
	if inA {
		color, key, remoteLeader = 0, r, n-1
	}
	local, err := c.Split(color, key)
	if err != nil {
		return nil, false, nil, err
	}
	ic, err := local.InterCommCreate(0, c, remoteLeader, 77)
	if err != nil {
		return nil, false, nil, fmt.Errorf("InterCommCreate: %w", err)
	}
	if err := local.Free(); err != nil {
		return nil, false, nil, err
	}
	return ic, inA, ic.RemoteGroup().WorldRanks(), nil
}

// inter exercises an intercommunicator between two unequal halves of the
// world as real processes: point-to-point both ways (named and
// AnySource), Bcast, Allreduce, Allgather, Barrier, Merge and Free.
func inter(c *mpi.Comm) error {
	if c.Size() < 2 {
		return nil
	}
	me := c.Rank()
	ic, inA, other, err := interSetup(c)
	if err != nil {
		return err
	}
	for q := range other {
		if err := mpi.Send(ic, []int{me}, q, 1); err != nil {
			return err
		}
	}
	for q, w := range other {
		buf := []int{-1}
		if _, err := mpi.Recv(ic, buf, q, 1); err != nil || buf[0] != w {
			return fmt.Errorf("from remote %d: %v, %v (want %d)", q, buf, err, w)
		}
	}
	if err := mpi.Send(ic, []int{me}, 0, 2); err != nil {
		return err
	}
	if ic.Rank() == 0 {
		var got []int
		for range other {
			buf := []int{-1}
			if _, err := mpi.Recv(ic, buf, mpi.AnySource, 2); err != nil {
				return err
			}
			got = append(got, buf[0])
		}
		slices.Sort(got)
		if want := slices.Sorted(slices.Values(other)); !slices.Equal(got, want) {
			return fmt.Errorf("AnySource: got %v, want %v", got, want)
		}
	}
	// Bcast of 1 MiB from A's rank 0.
	buf := make([]byte, 1<<20)
	root := 0
	if inA {
		root = mpi.ProcNull
		if ic.Rank() == 0 {
			root = mpi.Root
			for i := range buf {
				buf[i] = byte(i)
			}
		}
	}
	if err := mpi.Bcast(ic, buf, root); err != nil {
		return fmt.Errorf("bcast: %w", err)
	}
	if !inA && (buf[1] != 1 || buf[len(buf)-1] != 255) {
		return fmt.Errorf("bcast: wrong data")
	}
	sum := []int{me}
	if err := mpi.Allreduce(ic, sum, sum, mpi.Sum); err != nil {
		return err
	}
	var want int
	for _, w := range other {
		want += w
	}
	if sum[0] != want {
		return fmt.Errorf("allreduce: %d, want the remote group's sum %d", sum[0], want)
	}
	all := make([]int, len(other))
	if err := mpi.Allgather(ic, []int{me}, all); err != nil || !slices.Equal(all, other) {
		return fmt.Errorf("allgather: %v, %v (want %v)", all, err, other)
	}
	if err := ic.Barrier(); err != nil {
		return err
	}
	if err := interMore(ic, inA, me, other); err != nil {
		return err
	}
	m, err := ic.Merge(inA) // B first
	if err != nil {
		return err
	}
	if inA && m.Rank() != len(other)+ic.Rank() || !inA && m.Rank() != ic.Rank() {
		return fmt.Errorf("merge: rank %d (local rank %d)", m.Rank(), ic.Rank())
	}
	total := []int{me}
	if err := mpi.Allreduce(m, total, total, mpi.Sum); err != nil || total[0] != c.Size()*(c.Size()-1)/2 {
		return fmt.Errorf("merged allreduce: %v, %v", total, err)
	}
	if err := m.Free(); err != nil {
		return err
	}
	return ic.Free()
}

// interMore: value collectives, Dup and Split on the intercommunicator.
func interMore(ic *mpi.Comm, inA bool, me int, other []int) error {
	// BcastValue from B's rank 0 (A's ranks name it as remote rank 0).
	type cfg struct {
		Name  string
		Sizes []int
	}
	v := cfg{Name: "none"}
	root := 0
	if !inA {
		root = mpi.ProcNull
		if ic.Rank() == 0 {
			root, v = mpi.Root, cfg{"from B", []int{me, 1 << 20}}
		}
	}
	if err := mpi.BcastValue(ic, &v, root); err != nil {
		return fmt.Errorf("bcastvalue: %w", err)
	}
	if inA && (v.Name != "from B" || !slices.Equal(v.Sizes, []int{other[0], 1 << 20})) {
		return fmt.Errorf("bcastvalue: %+v", v)
	}
	ws, err := mpi.AllgatherValue(ic, fmt.Sprint(me))
	if err != nil || len(ws) != len(other) || ws[0] != fmt.Sprint(other[0]) {
		return fmt.Errorf("allgathervalue: %v, %v (remote %v)", ws, err, other)
	}
	d, err := ic.Dup()
	if err != nil {
		return fmt.Errorf("dup: %w", err)
	}
	if !slices.Equal(d.RemoteGroup().WorldRanks(), other) || d.Rank() != ic.Rank() {
		return fmt.Errorf("dup: remote group %v, rank %d", d.RemoteGroup().WorldRanks(), d.Rank())
	}
	// Split by world rank parity: the remote members of my parity.
	s, err := d.Split(me%2, me)
	if err != nil {
		return fmt.Errorf("split: %w", err)
	}
	var mine []int
	for _, w := range other {
		if w%2 == me%2 {
			mine = append(mine, w)
		}
	}
	slices.Sort(mine)
	switch {
	case len(mine) == 0 && s != nil:
		return fmt.Errorf("split: a communicator with no remote member of parity %d", me%2)
	case len(mine) > 0:
		if s == nil || !slices.Equal(s.RemoteGroup().WorldRanks(), mine) {
			return fmt.Errorf("split: %v, want the remote group %v", s, mine)
		}
		sum, err := mpi.AllreduceValue(s, me, func(a, b int) int { return a + b })
		var want int
		for _, w := range mine {
			want += w
		}
		if err != nil || sum != want {
			return fmt.Errorf("split: allreducevalue %d, %v; want %d", sum, err, want)
		}
		if err := s.Free(); err != nil {
			return err
		}
	}
	return d.Free()
}

// interDie: the last rank (B's rank 0) leaves right after the
// intercommunicator is made, like a crash (after PMI finalize, so the job
// goes on); A's ranks, most of which never connected to it, must get its
// *PeerError from a named receive, an AnySource receive and a send.
func interDie(ctx context.Context, c *mpi.Comm, pc *client.Client) error {
	ic, inA, _, err := interSetup(c)
	if err != nil {
		return err
	}
	victim := c.Size() - 1
	if c.Rank() == victim {
		fmt.Printf("rank %d: leaving\n", c.Rank())
		pc.Finalize()
		os.Exit(0)
	}
	if !inA {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var pe *mpi.PeerError
	if _, err := mpi.Irecv(ic, make([]byte, 8), 0, 1).Wait(wctx); !errors.As(err, &pe) || pe.Rank != victim {
		return fmt.Errorf("receive from the dead remote rank 0: %v", err)
	}
	if _, err := mpi.Irecv(ic, make([]byte, 8), mpi.AnySource, 1).Wait(wctx); !errors.As(err, &pe) {
		return fmt.Errorf("AnySource receive: %v", err)
	}
	if _, err := mpi.Isend(ic, make([]byte, 1<<20), 0, 1).Wait(wctx); !errors.As(err, &pe) {
		return fmt.Errorf("send to the dead remote rank 0: %v", err)
	}
	fmt.Printf("rank %d: saw %v\n", c.Rank(), pe)
	return nil
}
