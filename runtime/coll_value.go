package mpi

import (
	"errors"
	"fmt"
)

// Collectives of arbitrary values (mpi4py's lowercase bcast, scatter,
// gather, allgather, alltoall, reduce, allreduce), encoded with the
// runtime's Codec (Config.Codec, encoding/gob by default). The calling
// rank's own value is never encoded: root's BcastValue keeps *v, and a
// rank's own element of a gathered slice is v itself (not a copy).
//
// Values are encoded through a *T, so an interface T travels as an
// interface value (gob: its concrete type must be registered). A value
// that cannot be encoded is sent as a failure frame (see encodeValue), so
// no rank waits for it; every value collective ends by agreeing on
// whether any rank's codec failed (one small Allreduce), so that either
// every rank returns an error wrapping ErrCodec or none does.

// valueOf encodes *p (p is a *T, so that gob sees T even when T is an
// interface).
func (c *Comm) valueOf(p any) ([]byte, error) { return c.encodeValue(p) }

func decodeAs[T any](c *Comm, msg []byte, from int) (T, error) {
	var v T
	err := c.decodeValue(msg, from, &v)
	return v, err
}

// agree ends a value collective: cerr is this rank's codec error (or
// argument error, see scatterFailed; or nil). Every rank learns the
// highest rank that failed; ranks that did not fail return an error
// naming it (wrapping ErrArg or ErrCodec, as that rank's).
func (c *Comm) agree(cerr error) error {
	if c.inter != nil {
		return c.interAgree(cerr)
	}
	in, out := []int64{failCode(c.rank, cerr)}, []int64{0}
	if err := Allreduce(c, in, out, Max); err != nil {
		return errors.Join(cerr, err)
	}
	if cerr != nil {
		return cerr
	}
	return failErr(out[0], "")
}

// failCode is a rank's word in the agreement: 0 if it did not fail, else
// 2*(rank+1), plus 1 for an argument error.
func failCode(rank int, err error) int64 {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, ErrArg):
		return 2*int64(rank+1) + 1
	}
	return 2 * int64(rank+1)
}

// failErr is the error of a non-failing rank when the highest failure's
// code is code (nil for 0); where qualifies the rank ("local ", "remote ").
func failErr(code int64, where string) error {
	switch {
	case code == 0:
		return nil
	case code&1 == 1:
		return fmt.Errorf("%w: the value collective failed on %srank %d", ErrArg, where, code/2-1)
	}
	return fmt.Errorf("%w: on %srank %d", ErrCodec, where, code/2-1)
}

// self is this rank's index among the ranks a value collective's results
// are indexed by: its rank, or -1 on an intercommunicator (the results
// come from the remote group).
func (c *Comm) self() int {
	if c.inter != nil {
		return -1
	}
	return c.rank
}

// keep records the first codec error.
func keep(first *error, err error) {
	if err != nil && *first == nil {
		*first = err
	}
}

// crecvAlloc receives a message of any length from src.
func (c *Comm) crecvAlloc(src, tag int) ([]byte, error) {
	r := c.irecv(c.collCtx(), nil, 1, src, tag+c.tagOff, true)
	if _, err := c.wait(r); err != nil {
		return nil, err
	}
	return r.data, nil
}

// BcastValue sets *v on every rank to root's *v, along a binomial tree of
// the encoded value. On an intercommunicator root is Root on the root,
// ProcNull on the rest of its group (whose *v is left alone) and the
// root's rank in the other group, whose members receive the value.
func BcastValue[T any](c *Comm, v *T, root int) error {
	if err := c.errUsable(); err != nil {
		return err
	}
	if v == nil {
		return fmt.Errorf("%w: nil value pointer", ErrArg)
	}
	if c.inter != nil {
		return interBcastValue(c, v, root)
	}
	if err := c.checkRoot(root); err != nil {
		return err
	}
	var data []byte
	var cerr, err error
	if c.rank == root {
		data, cerr = c.valueOf(v)
	}
	if data, err = c.bcastEncoded(data, root); err != nil {
		return err
	}
	if c.rank != root {
		x, err := decodeAs[T](c, data, root)
		if err == nil {
			*v = x
		}
		cerr = err
	}
	return c.agree(cerr)
}

// bcastEncoded broadcasts root's data (of a length only root knows) along
// a binomial tree and returns it on every rank.
func (c *Comm) bcastEncoded(data []byte, root int) ([]byte, error) {
	n := len(c.group)
	rel := mod(c.rank-root, n)
	mask := 1
	var err error
	for mask < n {
		if rel&mask != 0 {
			if data, err = c.crecvAlloc((rel-mask+root)%n, tagValue); err != nil {
				return nil, err
			}
			break
		}
		mask <<= 1
	}
	reqs := c.startReqs()
	for mask >>= 1; mask > 0; mask >>= 1 {
		if rel+mask < n {
			reqs = append(reqs, c.cisend(data, (rel+mask+root)%n, tagValue))
		}
	}
	return data, c.finishReqs(reqs)
}

// ScatterValue gives vals[i] of root (len(vals) == Size(); ignored
// elsewhere) to rank i.
func ScatterValue[T any](c *Comm, vals []T, root int) (T, error) {
	var zero T
	if err := c.errUsable(); err != nil {
		return zero, err
	}
	if c.inter != nil {
		return interScatterValue(c, vals, root)
	}
	if err := c.checkRoot(root); err != nil {
		return zero, err
	}
	n := len(c.group)
	if c.rank != root {
		data, err := c.crecvAlloc(root, tagValue)
		if err != nil {
			return zero, err
		}
		x, cerr := decodeAs[T](c, data, root)
		return x, c.agree(cerr)
	}
	if len(vals) != n {
		return zero, c.scatterFailed(len(vals))
	}
	reqs := c.startReqs()
	var cerr error
	for i := 0; i < n; i++ {
		if i != root {
			b, err := c.valueOf(&vals[i])
			keep(&cerr, err)
			reqs = append(reqs, c.cisend(b, i, tagValue))
		}
	}
	if err := c.finishReqs(reqs); err != nil {
		return zero, err
	}
	return vals[root], c.agree(cerr)
}

// GatherValue returns, at root, every rank's v in rank order (nil
// elsewhere).
func GatherValue[T any](c *Comm, v T, root int) ([]T, error) {
	if err := c.errUsable(); err != nil {
		return nil, err
	}
	if c.inter != nil {
		return interGatherValue(c, v, root)
	}
	if err := c.checkRoot(root); err != nil {
		return nil, err
	}
	n := len(c.group)
	if c.rank != root {
		b, cerr := c.valueOf(&v)
		if err := c.csend(b, root, tagValue); err != nil {
			return nil, err
		}
		return nil, c.agree(cerr)
	}
	reqs := make([]*Request, n)
	for i := range reqs {
		if i != root {
			reqs[i] = c.irecv(c.collCtx(), nil, 1, i, tagValue+c.tagOff, true)
		}
	}
	if err := c.waitReqs(reqs...); err != nil {
		return nil, err
	}
	out := make([]T, n)
	var cerr error
	for i, r := range reqs {
		if i == root {
			out[i] = v
			continue
		}
		x, err := decodeAs[T](c, r.data, i)
		keep(&cerr, err)
		out[i] = x
	}
	if err := c.agree(cerr); err != nil {
		return nil, err
	}
	return out, nil
}

// AllgatherValue returns every rank's v in rank order, on every rank: an
// Allgather of the encoded lengths, then an Allgatherv (ring) of the
// encodings.
func AllgatherValue[T any](c *Comm, v T) ([]T, error) {
	if err := c.errUsable(); err != nil {
		return nil, err
	}
	n := len(c.group) // the remote group's size on an intercommunicator
	b, cerr := c.valueOf(&v)
	lens := make([]int64, n)
	if err := Allgather(c, []int64{int64(len(b))}, lens); err != nil {
		return nil, err
	}
	counts, displs := make([]int, n), make([]int, n)
	total := 0
	for i, l := range lens {
		counts[i], displs[i] = int(l), total
		total += int(l)
	}
	all := make([]byte, total)
	if err := Allgatherv(c, b, all, counts, displs); err != nil {
		return nil, err
	}
	out := make([]T, n)
	for i := range out {
		if i == c.self() {
			out[i] = v
			continue
		}
		x, err := decodeAs[T](c, all[displs[i]:displs[i]+counts[i]], i)
		keep(&cerr, err)
		out[i] = x
	}
	if err := c.agree(cerr); err != nil {
		return nil, err
	}
	return out, nil
}

// AlltoallValue sends vals[i] (len(vals) == Size()) to rank i and returns
// the values received, indexed by sender.
func AlltoallValue[T any](c *Comm, vals []T) ([]T, error) {
	if err := c.errUsable(); err != nil {
		return nil, err
	}
	n, r, self := len(c.group), c.rank, c.self()
	if len(vals) != n {
		return nil, fmt.Errorf("%w: alltoall: %d values for %d ranks", ErrArg, len(vals), n)
	}
	reqs := make([]*Request, 2*n)
	for s := 0; s < n; s++ {
		if src := mod(r-s, n); src != self {
			reqs[src] = c.irecv(c.collCtx(), nil, 1, src, tagValue+c.tagOff, true)
		}
	}
	var cerr error
	for s := 0; s < n; s++ {
		if dst := (r + s) % n; dst != self {
			b, err := c.valueOf(&vals[dst])
			keep(&cerr, err)
			reqs[n+dst] = c.cisend(b, dst, tagValue)
		}
	}
	if err := c.waitReqs(reqs...); err != nil {
		return nil, err
	}
	out := make([]T, n)
	if self >= 0 {
		out[r] = vals[r]
	}
	for i := 0; i < n; i++ {
		if i != self {
			x, err := decodeAs[T](c, reqs[i].data, i)
			keep(&cerr, err)
			out[i] = x
		}
	}
	if err := c.agree(cerr); err != nil {
		return nil, err
	}
	return out, nil
}

// ReduceValue folds every rank's v with f in rank order at root:
// f(...f(f(v0, v1), v2)..., vn-1) (f need not be commutative). Other ranks
// get the zero T. The values are gathered at root, so this suits small
// values; use Reduce for numeric arrays.
func ReduceValue[T any](c *Comm, v T, f func(a, b T) T, root int) (T, error) {
	var zero T
	if f == nil {
		return zero, fmt.Errorf("%w: nil reduction function", ErrArg)
	}
	all, err := GatherValue(c, v, root)
	if err != nil || all == nil { // not the root
		return zero, err
	}
	acc := all[0]
	for _, x := range all[1:] {
		acc = f(acc, x)
	}
	return acc, nil
}

// AllreduceValue is ReduceValue with the result on every rank (an
// AllgatherValue and the same fold everywhere).
func AllreduceValue[T any](c *Comm, v T, f func(a, b T) T) (T, error) {
	var zero T
	if f == nil {
		return zero, fmt.Errorf("%w: nil reduction function", ErrArg)
	}
	all, err := AllgatherValue(c, v)
	if err != nil {
		return zero, err
	}
	acc := all[0]
	for _, x := range all[1:] {
		acc = f(acc, x)
	}
	return acc, nil
}
