package mpi

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// interAsymAllgather: MPI lets the two groups of an intercommunicator
// send blocks of different lengths in Allgather (group A's sendcount is
// group B's recvcount, and the other way round); here A sends 1 element
// per rank and B 3, blocking and non-blocking, into receive buffers one
// element longer than needed (that element must stay untouched).
func interAsymAllgather(s interSide) error {
	k, rk := 1, 3
	if !s.inA {
		k, rk = 3, 1
	}
	mine := make([]int32, k)
	for i := range mine {
		mine[i] = int32(s.me*10 + i)
	}
	// A context bounds each call: a group that fails alone must not
	// leave the other waiting.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ic := s.ic.WithContext(ctx)
	for _, nb := range []bool{false, true} {
		all := make([]int32, len(s.other)*rk+1)
		for i := range all {
			all[i] = -1
		}
		var err error
		if nb {
			_, err = Iallgather(ic, mine, all).Wait(ctx)
		} else {
			err = Allgather(ic, mine, all)
		}
		if err != nil {
			return fmt.Errorf("allgather (non-blocking %v), %d elements per rank here, %d there: %w", nb, k, rk, err)
		}
		for q, w := range s.other {
			for i := 0; i < rk; i++ {
				if got := all[q*rk+i]; got != int32(w*10+i) {
					return fmt.Errorf("allgather (non-blocking %v): element %d of remote rank %d's block: %d, want %d", nb, i, q, got, w*10+i)
				}
			}
		}
		if all[len(all)-1] != -1 {
			return fmt.Errorf("allgather (non-blocking %v): wrote past the remote blocks: %v", nb, all)
		}
	}
	// Too small a receive buffer on every member of one group (B): each
	// of them fails with ErrTruncate; A, whose receives fit, succeeds.
	all := make([]int32, len(s.other)*rk)
	if !s.inA {
		all = all[:len(all)-1]
	}
	err := Allgather(ic, mine, all)
	switch {
	case s.inA && err != nil:
		return fmt.Errorf("allgather beside a remote group with short buffers: %w", err)
	case !s.inA && !errors.Is(err, ErrTruncate):
		return fmt.Errorf("allgather into %d elements for %d remote ranks x %d: %v, want ErrTruncate", len(all), len(s.other), rk, err)
	}
	return ic.Barrier()
}

func TestInterCommAllgatherCounts(t *testing.T) {
	forInterWorlds(t, interSizes, func(t *testing.T, comms []*Comm) {
		each(t, comms, func(c *Comm) error {
			s, err := makeSide(c)
			if err != nil {
				return err
			}
			if err := interAsymAllgather(s); err != nil {
				return err
			}
			return s.ic.Free()
		})
	})
}

// interScatterLen: on an intercommunicator the root (group A's rank 0)
// sends its whole sendbuf, which must hold RemoteSize() blocks of the
// other group's len(recvbuf). A longer one must fail on every member of
// B with ErrTruncate, a shorter one with ErrArg (not leave zeros in the
// last blocks unreported), and neither may leave B's members waiting.
func interScatterLen(s interSide) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ic := s.ic.WithContext(ctx)
	for _, tc := range []struct {
		extra int
		want  error
	}{{0, nil}, {1, ErrTruncate}, {-1, ErrArg}} {
		const k = 2
		var send, recv []int32
		if s.inA && s.ic.Rank() == 0 {
			send = make([]int32, len(s.other)*k+tc.extra)
			for i := range send {
				send[i] = int32(i + 1)
			}
		}
		if !s.inA {
			recv = make([]int32, k)
		}
		err := Scatter(ic, send, recv, s.rootArg(true, 0))
		switch {
		case s.inA && err != nil:
			return fmt.Errorf("scatter of %d extra elements, at the root's group: %w", tc.extra, err)
		case s.inA:
		case tc.want == nil && err != nil:
			return fmt.Errorf("scatter: %w", err)
		case tc.want == nil && (recv[0] != int32(s.ic.Rank()*k+1) || recv[k-1] != int32(s.ic.Rank()*k+k)):
			return fmt.Errorf("scatter: got %v", recv)
		case tc.want != nil && !errors.Is(err, tc.want):
			return fmt.Errorf("scatter of %d extra elements from the root: %v, want %v", tc.extra, err, tc.want)
		}
		if err := ic.Barrier(); err != nil {
			return fmt.Errorf("barrier after scatter of %d extra: %w", tc.extra, err)
		}
	}
	return nil
}

func TestInterCommScatterLength(t *testing.T) {
	forInterWorlds(t, interSizes, func(t *testing.T, comms []*Comm) {
		each(t, comms, func(c *Comm) error {
			s, err := makeSide(c)
			if err != nil {
				return err
			}
			if err := interScatterLen(s); err != nil {
				return err
			}
			return s.ic.Free()
		})
	})
}
