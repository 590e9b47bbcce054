package mpi

import "fmt"

// Prefix reductions and reduce-scatter.

// Scan sets rank r's recvbuf to sendbuf(0) ∘ ... ∘ sendbuf(r) element-wise
// (inclusive prefix; len(recvbuf) >= len(sendbuf); sendbuf may be recvbuf).
// Recursive doubling: log2(n) exchanges of the partial reduction, in rank
// order (valid for non-commutative ops).
func Scan[T Number](c *Comm, sendbuf, recvbuf []T, op Op) error {
	return scan(c, sendbuf, recvbuf, op, false)
}

// Exscan sets rank r's recvbuf to sendbuf(0) ∘ ... ∘ sendbuf(r-1)
// (exclusive prefix). Rank 0's recvbuf is left unchanged. Same algorithm
// as Scan.
func Exscan[T Number](c *Comm, sendbuf, recvbuf []T, op Op) error {
	return scan(c, sendbuf, recvbuf, op, true)
}

func scan[T Number](c *Comm, sendbuf, recvbuf []T, op Op, exclusive bool) error {
	if err := c.intraOnly("Scan/Exscan"); err != nil {
		return err
	}
	cnt := len(sendbuf)
	if err := checkOp[T](op, cnt); err != nil {
		return err
	}
	if len(recvbuf) < cnt {
		return fmt.Errorf("%w: receive buffer of %d for %d elements", ErrArg, len(recvbuf), cnt)
	}
	recvbuf = recvbuf[:cnt]
	n, r := len(c.group), c.rank
	// partial: the reduction of the ranks in my current (doubling) group;
	// recvbuf: the reduction of the ranks below me seen so far (plus me
	// for Scan).
	partial := scratch[T](c, 0, cnt)
	tmp := scratch[T](c, 1, cnt)
	copy(partial, sendbuf)
	if !exclusive && !sameSlice(sendbuf, recvbuf) {
		copy(recvbuf, sendbuf)
	}
	tag := tagScan
	if exclusive {
		tag = tagExscan
	}
	have := false // Exscan: recvbuf holds something
	for mask := 1; mask < n; mask <<= 1 {
		p := r ^ mask
		if p >= n {
			continue
		}
		if err := c.csendrecv(asBytes(partial), p, asBytes(tmp), p, tag); err != nil {
			return err
		}
		if p < r {
			// tmp comes from below: prepend it to both.
			switch {
			case !exclusive:
				combine(op, tmp, recvbuf)
			case !have:
				copy(recvbuf, tmp)
				have = true
			default:
				combine(op, tmp, recvbuf)
			}
			combine(op, tmp, partial)
		} else {
			accumulate(op, partial, tmp)
		}
	}
	return nil
}

// ReduceScatterBlock reduces sendbuf (Size()*k elements on every rank)
// element-wise with op and leaves block r (elements [r*k, (r+1)*k)) of the
// result in rank r's recvbuf (len >= k). Commutative ops use the ring
// reduce-scatter; others Reduce to rank 0 and Scatter. On an
// intercommunicator, each group's recvbufs get blocks of the reduction of
// the other group's sendbufs (both groups' Size()*k must agree).
func ReduceScatterBlock[T Number](c *Comm, sendbuf, recvbuf []T, op Op) error {
	if err := c.errUsable(); err != nil {
		return err
	}
	if err := checkOp[T](op, len(sendbuf)); err != nil {
		return err
	}
	n := c.Size() // the local group's on an intercommunicator
	if len(sendbuf)%n != 0 {
		return fmt.Errorf("%w: reduce-scatter: send buffer of %d not a multiple of %d ranks", ErrArg, len(sendbuf), n)
	}
	k := len(sendbuf) / n
	if k%op.Unit() != 0 {
		return fmt.Errorf("%w: reduce-scatter: blocks of %d are not whole units of %d", ErrArg, k, op.Unit())
	}
	if len(recvbuf) < k {
		return fmt.Errorf("%w: reduce-scatter: receive buffer of %d for %d", ErrArg, len(recvbuf), k)
	}
	if c.inter != nil {
		counts, displs := make([]int, n), make([]int, n)
		for i := range counts {
			counts[i], displs[i] = k, i*k
		}
		return interReduceScatter(c, sendbuf, recvbuf[:k], counts, displs, op)
	}
	if !op.d.commute {
		var all []T
		if c.rank == 0 {
			all = make([]T, len(sendbuf))
		}
		if err := reduceBinomial(c, sendbuf, all, op, 0); err != nil {
			return err
		}
		return Scatter(c, all, recvbuf[:k], 0)
	}
	acc := scratch[T](c, 0, len(sendbuf))
	if n > 1 {
		if err := ringReduceScatter(c, sendbuf, acc, layout{b: blocks{n * k, k}}, op, tagRedScat); err != nil {
			return err
		}
	} else {
		copy(acc, sendbuf)
	}
	copy(recvbuf, acc[c.rank*k:(c.rank+1)*k])
	return nil
}

// ReduceScatter reduces sendbuf (sum(counts) elements on every rank)
// element-wise with op and leaves counts[r] elements of the result, those
// after counts[0..r-1], in rank r's recvbuf (len >= counts[r]). Counts
// must agree on every rank (and be whole units of op). Commutative ops
// use the ring reduce-scatter (blocks of the given sizes); others Reduce
// to rank 0 and Scatterv. On an intercommunicator, counts are the local
// group's shares of the reduction of the other group's sendbufs (both
// groups' totals must agree).
func ReduceScatter[T Number](c *Comm, sendbuf, recvbuf []T, counts []int, op Op) error {
	if err := c.errUsable(); err != nil {
		return err
	}
	n := c.Size() // the local group's on an intercommunicator
	displs, err := checkV(n, counts, nil, len(sendbuf), "reduce-scatter")
	if err != nil {
		return err
	}
	total := displs[n-1] + counts[n-1]
	if err := checkOp[T](op, total); err != nil {
		return err
	}
	for i, k := range counts {
		if k%op.Unit() != 0 {
			return fmt.Errorf("%w: reduce-scatter: count %d of rank %d is not whole units of %d", ErrArg, k, i, op.Unit())
		}
	}
	if len(sendbuf) != total {
		return fmt.Errorf("%w: reduce-scatter: send buffer of %d for counts totalling %d", ErrArg, len(sendbuf), total)
	}
	mine := counts[c.rank]
	if len(recvbuf) < mine {
		return fmt.Errorf("%w: reduce-scatter: receive buffer of %d for %d", ErrArg, len(recvbuf), mine)
	}
	if c.inter != nil {
		return interReduceScatter(c, sendbuf, recvbuf[:mine], counts, displs, op)
	}
	if !op.d.commute {
		var all []T
		if c.rank == 0 {
			all = make([]T, total)
		}
		if err := reduceBinomial(c, sendbuf, all, op, 0); err != nil {
			return err
		}
		return Scatterv(c, all, counts, displs, recvbuf[:mine], 0)
	}
	acc := scratch[T](c, 0, total)
	if n > 1 {
		if err := ringReduceScatter(c, sendbuf, acc, layout{counts: counts, displs: displs, elem: 1}, op, tagRedScat); err != nil {
			return err
		}
	} else {
		copy(acc, sendbuf)
	}
	copy(recvbuf, acc[displs[c.rank]:displs[c.rank]+mine])
	return nil
}
