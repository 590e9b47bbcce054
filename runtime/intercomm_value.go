package mpi

import (
	"errors"
	"fmt"
)

// Value collectives on intercommunicators (the rooted ones; Allgather,
// Alltoall and Allreduce share the intracommunicator code, which indexes
// their results by remote rank). Each group's results come from the
// other group, as in the typed intercommunicator collectives
// (intercomm_coll.go); every member of both groups then takes part in
// interAgree, so a codec failure anywhere is ErrCodec everywhere.

// interBcastValue: the root sends the encoding to the other group's rank
// 0, which broadcasts it within its group.
func interBcastValue[T any](c *Comm, v *T, root int) error {
	isRoot, idle, err := c.interRooted(root, "bcastvalue")
	if err != nil {
		return err
	}
	var cerr error
	switch {
	case isRoot:
		var data []byte
		data, cerr = c.valueOf(v)
		if err := c.csend(data, 0, tagValue); err != nil {
			return err
		}
	case !idle:
		lc := c.inter.local
		var data []byte
		if lc.rank == 0 {
			if data, err = c.crecvAlloc(root, tagValue); err != nil {
				return err
			}
		}
		if data, err = lc.bcastEncoded(data, 0); err != nil {
			return err
		}
		var x T
		if x, cerr = decodeAs[T](c, data, root); cerr == nil {
			*v = x
		}
	}
	return c.agree(cerr)
}

// interScatterValue: the root sends vals[i] (RemoteSize() of them) to
// remote rank i; the root's group returns the zero T.
func interScatterValue[T any](c *Comm, vals []T, root int) (T, error) {
	var zero T
	isRoot, idle, err := c.interRooted(root, "scattervalue")
	switch {
	case err != nil:
		return zero, err
	case idle:
		return zero, c.agree(nil)
	case !isRoot:
		data, err := c.crecvAlloc(root, tagValue)
		if err != nil {
			return zero, err
		}
		x, cerr := decodeAs[T](c, data, root)
		return x, c.agree(cerr)
	}
	rn := len(c.group)
	if len(vals) != rn {
		return zero, c.scatterFailed(len(vals))
	}
	reqs := c.startReqs()
	var cerr error
	for i := range rn {
		b, err := c.valueOf(&vals[i])
		keep(&cerr, err)
		reqs = append(reqs, c.cisend(b, i, tagValue))
	}
	if err := c.finishReqs(reqs); err != nil {
		return zero, err
	}
	return zero, c.agree(cerr)
}

// scatterFailed is ScatterValue's root with the wrong number of values:
// it sends every receiver an argument-error frame (valArg) and completes
// the agreement, so that every rank fails with ErrArg instead of the
// receivers waiting for ever.
func (c *Comm) scatterFailed(n int) error {
	text := fmt.Sprintf("scattervalue: the root passed %d values for %d receiving ranks", n, len(c.group))
	aerr := fmt.Errorf("%w: %s", ErrArg, text)
	frame := append([]byte{valArg}, text...)
	reqs := c.startReqs()
	for i := range c.group {
		if i != c.self() {
			reqs = append(reqs, c.cisend(frame, i, tagValue))
		}
	}
	if err := c.finishReqs(reqs); err != nil {
		return errors.Join(aerr, err)
	}
	return c.agree(aerr)
}

// interGatherValue: every member of the other group sends its encoding to
// the root, which returns RemoteSize() values in remote rank order; the
// root's group returns nil elsewhere.
func interGatherValue[T any](c *Comm, v T, root int) ([]T, error) {
	isRoot, idle, err := c.interRooted(root, "gathervalue")
	switch {
	case err != nil:
		return nil, err
	case idle:
		return nil, c.agree(nil)
	case !isRoot:
		b, cerr := c.valueOf(&v)
		if err := c.csend(b, root, tagValue); err != nil {
			return nil, err
		}
		return nil, c.agree(cerr)
	}
	rn := len(c.group)
	reqs := make([]*Request, rn)
	for i := range reqs {
		reqs[i] = c.irecv(c.collCtx(), nil, 1, i, tagValue+c.tagOff, true)
	}
	if err := c.waitReqs(reqs...); err != nil {
		return nil, err
	}
	out := make([]T, rn)
	var cerr error
	for i, r := range reqs {
		x, err := decodeAs[T](c, r.data, i)
		keep(&cerr, err)
		out[i] = x
	}
	if err := c.agree(cerr); err != nil {
		return nil, err
	}
	return out, nil
}

// interAgree is agree on an intercommunicator: each group reduces its
// members' codec failures to its rank 0, the rank 0s swap them, and each
// broadcasts both within its group, so every member of both groups
// learns the highest failing local and remote rank.
func (c *Comm) interAgree(cerr error) error {
	lc := c.inter.local
	in, out := []int64{failCode(lc.rank, cerr)}, []int64{0, 0} // local, remote
	if err := Reduce(lc, in, out[:1], Max, 0); err != nil {
		return errors.Join(cerr, err)
	}
	if lc.rank == 0 {
		if err := c.csendrecv(asBytes(out[:1]), 0, asBytes(out[1:]), 0, tagValueAgree); err != nil {
			return errors.Join(cerr, err)
		}
	}
	if err := Bcast(lc, out, 0); err != nil {
		return errors.Join(cerr, err)
	}
	if cerr != nil {
		return cerr
	}
	if err := failErr(out[1], "remote "); err != nil {
		return err
	}
	return failErr(out[0], "local ")
}
