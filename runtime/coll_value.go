package mpi

import "fmt"

// Collectives of arbitrary values (mpi4py's lowercase bcast, scatter,
// gather, allgather, alltoall, reduce, allreduce), encoded with the
// runtime's Codec (Config.Codec, encoding/gob by default). The calling
// rank's own value is never encoded: root's BcastValue keeps *v, and a
// rank's own element of a gathered slice is v itself (not a copy).

func (c *Comm) marshal(v any) ([]byte, error) {
	b, err := c.p.cfg.Codec.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("mpi: encode value: %w", err)
	}
	return b, nil
}

func unmarshalAs[T any](c *Comm, data []byte) (T, error) {
	var v T
	if err := c.p.cfg.Codec.Unmarshal(data, &v); err != nil {
		return v, fmt.Errorf("mpi: decode value: %w", err)
	}
	return v, nil
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
// the encoded value.
func BcastValue[T any](c *Comm, v *T, root int) error {
	if err := c.checkRoot(root); err != nil {
		return err
	}
	if v == nil {
		return fmt.Errorf("%w: nil value pointer", ErrArg)
	}
	n := len(c.group)
	rel := mod(c.rank-root, n)
	var data []byte
	var err error
	if c.rank == root {
		if data, err = c.marshal(*v); err != nil {
			return err
		}
	}
	mask := 1
	for mask < n {
		if rel&mask != 0 {
			if data, err = c.crecvAlloc((rel-mask+root)%n, tagValue); err != nil {
				return err
			}
			break
		}
		mask <<= 1
	}
	reqs := c.startReqs()
	for mask >>= 1; mask > 0; mask >>= 1 {
		if rel+mask < n {
			reqs = append(reqs, c.isend(c.collCtx(), data, (rel+mask+root)%n, tagValue))
		}
	}
	if err := c.finishReqs(reqs); err != nil {
		return err
	}
	if c.rank != root {
		x, err := unmarshalAs[T](c, data)
		if err != nil {
			return err
		}
		*v = x
	}
	return nil
}

// ScatterValue gives vals[i] of root (len(vals) == Size(); ignored
// elsewhere) to rank i.
func ScatterValue[T any](c *Comm, vals []T, root int) (T, error) {
	var zero T
	if err := c.checkRoot(root); err != nil {
		return zero, err
	}
	n := len(c.group)
	if c.rank != root {
		data, err := c.crecvAlloc(root, tagValue)
		if err != nil {
			return zero, err
		}
		return unmarshalAs[T](c, data)
	}
	if len(vals) != n {
		return zero, fmt.Errorf("%w: scatter: %d values for %d ranks", ErrArg, len(vals), n)
	}
	reqs := c.startReqs()
	var err error
	for i := 0; i < n && err == nil; i++ {
		if i != root {
			var b []byte
			if b, err = c.marshal(vals[i]); err == nil {
				reqs = append(reqs, c.isend(c.collCtx(), b, i, tagValue))
			}
		}
	}
	if werr := c.finishReqs(reqs); err == nil {
		err = werr
	}
	return vals[root], err
}

// GatherValue returns, at root, every rank's v in rank order (nil
// elsewhere).
func GatherValue[T any](c *Comm, v T, root int) ([]T, error) {
	if err := c.checkRoot(root); err != nil {
		return nil, err
	}
	n := len(c.group)
	if c.rank != root {
		b, err := c.marshal(v)
		if err != nil {
			return nil, err
		}
		return nil, c.csend(b, root, tagValue)
	}
	reqs := make([]*Request, n)
	for i := range reqs {
		if i != root {
			reqs[i] = c.irecv(c.collCtx(), nil, 1, i, tagValue, true)
		}
	}
	if err := c.waitReqs(reqs...); err != nil {
		return nil, err
	}
	out := make([]T, n)
	for i, r := range reqs {
		if i == root {
			out[i] = v
			continue
		}
		x, err := unmarshalAs[T](c, r.data)
		if err != nil {
			return nil, err
		}
		out[i] = x
	}
	return out, nil
}

// AllgatherValue returns every rank's v in rank order, on every rank: an
// Allgather of the encoded lengths, then an Allgatherv (ring) of the
// encodings.
func AllgatherValue[T any](c *Comm, v T) ([]T, error) {
	n := len(c.group)
	b, err := c.marshal(v)
	if err != nil {
		return nil, err
	}
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
		if i == c.rank {
			out[i] = v
			continue
		}
		if out[i], err = unmarshalAs[T](c, all[displs[i]:displs[i]+counts[i]]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// AlltoallValue sends vals[i] (len(vals) == Size()) to rank i and returns
// the values received, indexed by sender.
func AlltoallValue[T any](c *Comm, vals []T) ([]T, error) {
	n, r := len(c.group), c.rank
	if len(vals) != n {
		return nil, fmt.Errorf("%w: alltoall: %d values for %d ranks", ErrArg, len(vals), n)
	}
	reqs := make([]*Request, 2*n)
	for s := 1; s < n; s++ {
		src := mod(r-s, n)
		reqs[src] = c.irecv(c.collCtx(), nil, 1, src, tagValue, true)
	}
	var err error
	for s := 1; s < n && err == nil; s++ {
		dst := (r + s) % n
		var b []byte
		if b, err = c.marshal(vals[dst]); err == nil {
			reqs[n+dst] = c.isend(c.collCtx(), b, dst, tagValue)
		}
	}
	if werr := c.waitReqs(reqs...); err == nil {
		err = werr
	}
	if err != nil {
		return nil, err
	}
	out := make([]T, n)
	out[r] = vals[r]
	for i := 0; i < n; i++ {
		if i != r {
			if out[i], err = unmarshalAs[T](c, reqs[i].data); err != nil {
				return nil, err
			}
		}
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
	if err != nil || c.rank != root {
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
