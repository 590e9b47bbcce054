package mpi

import (
	"context"
	"fmt"
)

// Point-to-point messages of derived datatypes: count copies of a Datatype
// laid over a typed buffer (copy i starts i*Extent bytes after &buf[0],
// offsets as in MPI), so strided data such as a column of a row-major grid
// travels without the caller packing it. The data is packed into one
// contiguous message in type-map order (the flattened blocks), and the
// receiver unpacks it through its own type, which must have the same
// type signature in bytes (as MPI requires); the wire carries bytes only.

// typeSpan checks that count copies of dt fit in a buffer of n bytes and
// returns the bytes of data they hold.
func typeSpan(what string, count int, dt Datatype, n int) (int, error) {
	if !dt.Valid() {
		return 0, fmt.Errorf("%w: %s: invalid (zero) Datatype", ErrArg, what)
	}
	if count < 0 {
		return 0, fmt.Errorf("%w: %s: count %d", ErrArg, what, count)
	}
	if count == 0 || dt.Size() == 0 {
		return 0, nil
	}
	d := dt.d
	first, last := d.blocks[0].Off, d.blocks[0].Off+d.blocks[0].Len
	for _, b := range d.blocks {
		first, last = min(first, b.Off), max(last, b.Off+b.Len)
	}
	span := int64(count-1) * d.extent
	lo, hi := first+min(span, 0), last+max(span, 0)
	if lo < 0 || hi > int64(n) {
		return 0, fmt.Errorf("%w: %s: %d copies of %v reach bytes [%d, %d) of a %d-byte buffer", ErrArg, what, count, dt, lo, hi, n)
	}
	return int(int64(count) * d.size), nil
}

// Pack copies the data of count copies of dt over buf into one contiguous
// []byte, in type-map order (MPI_Pack).
func Pack[T Number](buf []T, count int, dt Datatype) ([]byte, error) {
	src := asBytes(buf)
	n, err := typeSpan("Pack", count, dt, len(src))
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, n)
	for i := 0; i < count; i++ {
		base := int64(i) * dt.d.extent
		for _, b := range dt.d.blocks {
			out = append(out, src[base+b.Off:base+b.Off+b.Len]...)
		}
	}
	return out, nil
}

// Unpack scatters packed (as Pack makes it) into count copies of dt over
// buf, in type-map order (MPI_Unpack). A shorter packed fills the first
// bytes of the type map; a longer one is an error wrapping ErrTruncate.
// It returns the bytes unpacked.
func Unpack[T Number](packed []byte, buf []T, count int, dt Datatype) (int, error) {
	dst := asBytes(buf)
	n, err := typeSpan("Unpack", count, dt, len(dst))
	if err != nil {
		return 0, err
	}
	done := 0
	for i := 0; i < count && done < len(packed); i++ {
		base := int64(i) * dt.d.extent
		for _, b := range dt.d.blocks {
			done += copy(dst[base+b.Off:base+b.Off+b.Len], packed[done:])
			if done == len(packed) {
				break
			}
		}
	}
	if len(packed) > n {
		return done, truncErr(len(packed), n, -1, 0)
	}
	return done, nil
}

// SendType sends count copies of dt over buf to dest (see Pack).
func SendType[T Number](c *Comm, buf []T, count int, dt Datatype, dest, tag int) error {
	packed, err := Pack(buf, count, dt)
	if err != nil {
		return err
	}
	return Send(c, packed, dest, tag)
}

// IsendType starts SendType. The data is packed before it returns, so buf
// may change at once.
func IsendType[T Number](c *Comm, buf []T, count int, dt Datatype, dest, tag int) *Request {
	packed, err := Pack(buf, count, dt)
	if err != nil {
		return doneRequest(err)
	}
	return Isend(c, packed, dest, tag)
}

// typedResult turns a byte receive's status into one counted in T, and
// a message of a partial T into errPartial (as a typed receive's).
func typedResult[T Number](st Status, err error) (Status, error) {
	st.Count = countOf(st.Bytes, sizeOf[T]())
	if st.Count == Undefined && err == nil {
		err = errPartial(st.Bytes, sizeOf[T](), st.Source, st.Tag)
	}
	return st, err
}

// RecvType receives a message into count copies of dt over buf from src
// (or AnySource) with tag (or AnyTag). Status.Count is in elements of T.
// A message longer than the type's data fills it and returns an error
// wrapping ErrTruncate.
func RecvType[T Number](c *Comm, buf []T, count int, dt Datatype, src, tag int) (Status, error) {
	n, err := typeSpan("RecvType", count, dt, len(buf)*sizeOf[T]())
	if err != nil {
		return Status{}, err
	}
	if dt.Contiguous() && dt.d.lb == 0 && dt.d.extent == dt.d.size {
		st, err := Recv(c, asBytes(buf)[:n], src, tag) // no unpacking needed
		return typedResult[T](st, err)
	}
	packed := make([]byte, n)
	st, err := Recv(c, packed, src, tag)
	if _, uerr := Unpack(packed[:st.Bytes], buf, count, dt); err == nil {
		err = uerr
	}
	return typedResult[T](st, err)
}

// IrecvType starts RecvType; the data is unpacked into buf when the
// message has arrived, before the request completes.
func IrecvType[T Number](c *Comm, buf []T, count int, dt Datatype, src, tag int) *Request {
	n, err := typeSpan("IrecvType", count, dt, len(buf)*sizeOf[T]())
	if err != nil {
		return doneRequest(err)
	}
	packed := make([]byte, n)
	r := Irecv(c, packed, src, tag)
	if r.isDone() && r.err != nil {
		return r
	}
	// Unpacking needs a step after the transfer, so a goroutine waits
	// for it. The returned request cannot be cancelled (Cancel reports
	// false) and, like any receive, writes buf when its message arrives.
	return Go(func() (Status, error) {
		st, err := r.Wait(context.Background())
		if _, uerr := Unpack(packed[:st.Bytes], buf, count, dt); err == nil {
			err = uerr
		}
		return typedResult[T](st, err)
	})
}

// SendrecvType sends count copies of sdt over sendbuf to dest while
// receiving into rcount copies of rdt over recvbuf from src, so exchanges
// between pairs cannot deadlock (halo exchanges).
func SendrecvType[T Number](c *Comm, sendbuf []T, scount int, sdt Datatype, dest, sendtag int,
	recvbuf []T, rcount int, rdt Datatype, src, recvtag int) (Status, error) {
	packed, err := Pack(sendbuf, scount, sdt)
	if err != nil {
		return Status{}, err
	}
	n, err := typeSpan("SendrecvType", rcount, rdt, len(recvbuf)*sizeOf[T]())
	if err != nil {
		return Status{}, err
	}
	in := make([]byte, n)
	st, err := Sendrecv(c, packed, dest, sendtag, in, src, recvtag)
	if _, uerr := Unpack(in[:st.Bytes], recvbuf, rcount, rdt); err == nil {
		err = uerr
	}
	return typedResult[T](st, err)
}
