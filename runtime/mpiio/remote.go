package mpiio

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"

	mpi "github.com/gompi/gompi/runtime"
)

// remoteClasses are the kinds of failure that keep their identity when a
// collective call reports one rank's failure to the others: the others'
// error wraps ErrRemote and the failed rank's class, so errors.Is answers
// the same on every rank (as ROMIO returns one error class on every rank:
// a collective Open of a missing file is MPI_ERR_NO_SUCH_FILE everywhere,
// not only on the rank that opened it first). Only the message travels
// besides, so the class is the first of these the error matches.
var remoteClasses = []error{
	os.ErrNotExist, os.ErrExist, os.ErrPermission,
	ErrMode, ErrView, ErrClosed, mpi.ErrArg,
	syscall.ENOSPC, syscall.EDQUOT, syscall.EFBIG, syscall.EIO,
	context.Canceled, context.DeadlineExceeded,
}

// remoteMsg encodes err for the other ranks: one byte of class (0: none,
// i+1: remoteClasses[i]), then the message, without the *Error's own
// "mpiio: op path: rank r" when it is of path (the others' *Error says
// that already).
func remoteMsg(path string, err error) string {
	c := byte(0)
	for i, k := range remoteClasses {
		if errors.Is(err, k) {
			c = byte(i + 1)
			break
		}
	}
	text := err.Error()
	if e, ok := err.(*Error); ok && e.Path == path && e.Err != nil {
		text = e.Err.Error()
		if e.Off >= 0 {
			text = fmt.Sprintf("offset %d: %s", e.Off, text)
		}
	}
	return string([]byte{c}) + text
}

// remoteError is another rank's failure decoded from remoteMsg.
type remoteError struct {
	class error // nil when none
	msg   string
}

func newRemoteError(enc string) error {
	e := &remoteError{msg: enc}
	if len(enc) > 0 {
		if c := int(enc[0]); c <= len(remoteClasses) {
			e.msg = enc[1:]
			if c > 0 {
				e.class = remoteClasses[c-1]
			}
		}
	}
	return e
}

func (e *remoteError) Error() string { return ErrRemote.Error() + ": " + e.msg }

func (e *remoteError) Unwrap() []error {
	if e.class == nil {
		return []error{ErrRemote}
	}
	return []error{ErrRemote, e.class}
}
