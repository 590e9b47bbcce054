package mpi

import (
	"fmt"
	"unsafe"
)

// overlaps reports whether two byte slices share memory.
func overlaps(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	pa, pb := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return pa < pb+uintptr(len(b)) && pb < pa+uintptr(len(a))
}

// errAliased: Sendrecv's buffers share memory, so the message received
// would overwrite the one being sent (MPI forbids it; it used to corrupt
// data silently).
func errAliased() error {
	return fmt.Errorf("%w: Sendrecv's send and receive buffers overlap (use SendrecvReplace)", ErrArg)
}

// SendrecvReplace sends buf to dest and replaces its contents with the
// message received from src (MPI_Sendrecv_replace). A shorter message
// fills buf's first Status.Count elements; a longer one is an error
// wrapping ErrTruncate. The outgoing data is copied first, so buf may be
// received into while the send is still in flight.
func SendrecvReplace[T Number](c *Comm, buf []T, dest, sendtag, src, recvtag int) (Status, error) {
	out := append([]T(nil), buf...)
	return Sendrecv(c, out, dest, sendtag, buf, src, recvtag)
}
