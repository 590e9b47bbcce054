package mpi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// partialRecv receives rank 0's message with tag into buf by one of the
// receive paths; probed says whether the message was probed first (so it
// is in the unexpected queue and Irecv takes it at once).
var partialRecv = []struct {
	name   string
	probed bool
	recv   func(c *Comm, buf []int32, tag int) (Status, error)
}{
	{"recv", false, func(c *Comm, buf []int32, tag int) (Status, error) { return Recv(c, buf, 0, tag) }},
	{"recv-queued", true, func(c *Comm, buf []int32, tag int) (Status, error) { return Recv(c, buf, 0, tag) }},
	{"irecv", false, func(c *Comm, buf []int32, tag int) (Status, error) {
		return Irecv(c, buf, 0, tag).Wait(context.Background())
	}},
	{"irecv-now", true, func(c *Comm, buf []int32, tag int) (Status, error) {
		return Irecv(c, buf, 0, tag).Wait(context.Background())
	}},
	{"recv-context", false, func(c *Comm, buf []int32, tag int) (Status, error) {
		return RecvContext(context.Background(), c, buf, 0, tag)
	}},
	{"sendrecv", false, func(c *Comm, buf []int32, tag int) (Status, error) {
		return Sendrecv(c, []int32{}, 0, tag, buf, 0, tag)
	}},
	{"mrecv", false, func(c *Comm, buf []int32, tag int) (Status, error) {
		m, st, err := Mprobe[int32](c, 0, tag)
		if err != nil {
			return st, err
		}
		pst := st
		st, err = Mrecv(m, buf)
		if pst.Count != Undefined { // the message is received all the same: a rendezvous sender waits for it
			err = fmt.Errorf("Mprobe: Count %d of a %d-byte message, want Undefined", pst.Count, pst.Bytes)
		}
		return st, err
	}},
	{"recvtype", false, func(c *Comm, buf []int32, tag int) (Status, error) {
		return RecvType(c, buf, len(buf), TypeOf[int32](), 0, tag)
	}},
	{"recvtype-vector", false, func(c *Comm, buf []int32, tag int) (Status, error) {
		// Every other element: the message lands spread out, so the test
		// below reads it back packed.
		v, err := Vector(len(buf), 1, 2, TypeOf[int32]())
		if err != nil {
			return Status{}, err
		}
		spread := make([]int32, 2*len(buf))
		st, err := RecvType(c, spread, 1, v, 0, tag)
		packed, perr := Pack(spread, 1, v)
		copy(asBytes(buf), packed)
		return st, errors.Join(err, perr)
	}},
}

// TestRecvPartialElement: a message that is not a whole number of the
// receive type's elements (6 bytes into []int32) is received, but Count is
// Undefined (MPI_Get_count's MPI_UNDEFINED) and the receive's error wraps
// ErrArg naming the source and tag, on every transport and path: eager
// and rendezvous (ring, TCP, cross-memory attach), posted before or after
// the message arrived, direct, non-blocking, Sendrecv, Mrecv, RecvType.
// A probe reports Count Undefined.
func TestRecvPartialElement(t *testing.T) {
	for _, tr := range transportMods {
		for _, size := range []int{6, 1<<18 + 2} {
			t.Run(fmt.Sprintf("%s/%d", tr.name, size), func(t *testing.T) {
				comms, _ := world(t, 2, tr.mod)
				msg := make([]byte, size)
				for i := range msg {
					msg[i] = byte(i%251 + 1)
				}
				each(t, comms, func(c *Comm) error {
					// Rank 1 records a path's failure and goes on, so
					// rank 0 is not left waiting at the barrier.
					var bad []error
					for i, p := range partialRecv {
						tag := 7 + i
						if c.Rank() == 0 {
							if p.name == "sendrecv" {
								if _, err := Sendrecv(c, msg, 1, tag, []byte{}, 1, tag); err != nil {
									return err
								}
							} else if err := Send(c, msg, 1, tag); err != nil {
								return err
							}
							if err := c.Barrier(); err != nil {
								return err
							}
							continue
						}
						if err := checkPartial(c, p.name, p.probed, p.recv, tag, msg); err != nil {
							bad = append(bad, err)
						}
						if err := c.Barrier(); err != nil {
							return err
						}
					}
					return errors.Join(bad...)
				})
			})
		}
	}
}

// checkPartial receives msg (not a whole number of int32s) from rank 0
// with recv and checks Count, the error and the bytes.
func checkPartial(c *Comm, name string, probed bool, recv func(*Comm, []int32, int) (Status, error), tag int, msg []byte) error {
	size := len(msg)
	var perr error
	if probed {
		st, err := Probe[int32](c, 0, tag)
		if err != nil || st.Count != Undefined || st.Bytes != size {
			perr = fmt.Errorf("%s: Probe: %+v, %v; want Count Undefined, Bytes %d", name, st, err, size)
		}
	}
	buf := make([]int32, size/4+2)
	st, err := recv(c, buf, tag) // even after a failed probe: a rendezvous sender waits
	if perr != nil {
		return perr
	}
	want := fmt.Sprintf("from rank 0 (tag %d)", tag)
	if !errors.Is(err, ErrArg) || !strings.Contains(fmt.Sprint(err), want) {
		return fmt.Errorf("%s: error %v, want ErrArg naming %q", name, err, want)
	}
	if st.Count != Undefined || st.Bytes != size || st.Source != 0 || st.Tag != tag {
		return fmt.Errorf("%s: status %+v, want Count Undefined, Bytes %d, source 0, tag %d", name, st, size, tag)
	}
	if got := asBytes(buf)[:size]; string(got) != string(msg) {
		return fmt.Errorf("%s: the message's bytes were not all delivered", name)
	}
	return nil
}
