package mpi

import (
	"context"
	"fmt"
)

// Simple binomial-tree collectives over numeric slices. They run on the
// communicator's collective context, so they never match user messages.
// (First implementations; the collectives work extends or replaces them.)
//
// Building blocks for collectives inside this package:
//   - c.isend(c.collCtx(), bytes, dest, tag) *Request and
//     c.irecv(c.collCtx(), bytes, elemSize, src, tag, false) *Request move
//     raw bytes on the collective context; asBytes(slice) views a []T as bytes.
//   - Each collective uses its own tag (tagBarrier, tagBcast, ...; add new
//     ones to the list in comm.go); ordering between successive calls follows
//     from MPI's non-overtaking rule, since every rank calls collectives in the
//     same order.

// Op is a reduction operation.
type Op int

// Reduction operations.
const (
	Sum Op = iota
	Prod
	Min
	Max
)

func apply[T Number](op Op, acc, in []T) error {
	switch op {
	case Sum:
		for i := range acc {
			acc[i] += in[i]
		}
	case Prod:
		for i := range acc {
			acc[i] *= in[i]
		}
	case Min:
		for i := range acc {
			acc[i] = min(acc[i], in[i])
		}
	case Max:
		for i := range acc {
			acc[i] = max(acc[i], in[i])
		}
	default:
		return fmt.Errorf("%w: op %d", ErrArg, op)
	}
	return nil
}

// bcastBytes broadcasts buf from root along a binomial tree.
func (c *Comm) bcastBytes(buf []byte, root, tag int) error {
	n := len(c.group)
	if root < 0 || root >= n {
		return fmt.Errorf("%w: root %d", ErrRank, root)
	}
	rel := (c.rank - root + n) % n
	ctx := context.Background()
	mask := 1
	for mask < n {
		if rel&mask != 0 {
			src := (rel - mask + root) % n
			if _, err := c.irecv(c.collCtx(), buf, 1, src, tag, false).Wait(ctx); err != nil {
				return err
			}
			break
		}
		mask <<= 1
	}
	var reqs []*Request
	for mask >>= 1; mask > 0; mask >>= 1 {
		if rel+mask < n {
			reqs = append(reqs, c.isend(c.collCtx(), buf, (rel+mask+root)%n, tag))
		}
	}
	_, err := WaitAll(ctx, reqs...)
	return err
}

// Bcast copies root's buf into every rank's buf.
func Bcast[T Number](c *Comm, buf []T, root int) error {
	return c.bcastBytes(asBytes(buf), root, tagBcast)
}

// Reduce combines every rank's sendbuf element-wise with op into root's
// recvbuf (ignored elsewhere; may be nil). len(recvbuf) >= len(sendbuf) at root.
func Reduce[T Number](c *Comm, sendbuf, recvbuf []T, op Op, root int) error {
	n := len(c.group)
	if root < 0 || root >= n {
		return fmt.Errorf("%w: root %d", ErrRank, root)
	}
	if c.rank == root && len(recvbuf) < len(sendbuf) {
		return fmt.Errorf("%w: receive buffer of %d for %d elements", ErrArg, len(recvbuf), len(sendbuf))
	}
	if err := apply(op, []T(nil), nil); err != nil {
		return err
	}
	acc := append([]T(nil), sendbuf...)
	tmp := make([]T, len(sendbuf))
	rel := (c.rank - root + n) % n
	ctx := context.Background()
	for mask := 1; mask < n; mask <<= 1 {
		if rel&mask != 0 {
			dst := (rel - mask + root) % n
			if _, err := c.isend(c.collCtx(), asBytes(acc), dst, tagReduce).Wait(ctx); err != nil {
				return err
			}
			return nil
		}
		if rel+mask < n {
			src := (rel + mask + root) % n
			if _, err := c.irecv(c.collCtx(), asBytes(tmp), sizeOf[T](), src, tagReduce, false).Wait(ctx); err != nil {
				return err
			}
			apply(op, acc, tmp)
		}
	}
	copy(recvbuf, acc)
	return nil
}

// Allreduce is Reduce to rank 0 followed by Bcast.
func Allreduce[T Number](c *Comm, sendbuf, recvbuf []T, op Op) error {
	if len(recvbuf) < len(sendbuf) {
		return fmt.Errorf("%w: receive buffer of %d for %d elements", ErrArg, len(recvbuf), len(sendbuf))
	}
	if err := Reduce(c, sendbuf, recvbuf, op, 0); err != nil {
		return err
	}
	return Bcast(c, recvbuf[:len(sendbuf)], 0)
}
