package mpi

import (
	"fmt"
	"strings"
)

// RequestError is the error of WaitAll, WaitSome and Testall when some
// requests failed: Indices[k] is the index (in the call's arguments) of a
// failed request and Errs[k] its error. errors.Is and errors.As look
// through to each request's error (a *PeerError, ErrTruncate, ...).
type RequestError struct {
	Indices []int
	Errs    []error
}

func (e *RequestError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "mpi: %d request(s) failed:", len(e.Errs))
	for k, err := range e.Errs {
		if k > 0 {
			b.WriteByte(';')
		}
		fmt.Fprintf(&b, " request %d: %v", e.Indices[k], err)
	}
	return b.String()
}

func (e *RequestError) Unwrap() []error { return e.Errs }

func (e *RequestError) add(i int, err error) {
	if err != nil {
		e.Indices = append(e.Indices, i)
		e.Errs = append(e.Errs, err)
	}
}

// orNil returns e as an error, or nil when no request failed.
func (e *RequestError) orNil() error {
	if len(e.Errs) == 0 {
		return nil
	}
	return e
}

// Testall reports whether every request (nil ones are skipped) has
// completed; if so it returns their statuses and, when any failed, a
// *RequestError naming them. It does not block.
func Testall(reqs ...*Request) (bool, []Status, error) {
	for _, r := range reqs {
		if r != nil && !r.isDone() {
			return false, nil, nil
		}
	}
	st := make([]Status, len(reqs))
	var fail RequestError
	for i, r := range reqs {
		if r != nil {
			st[i] = r.status
			fail.add(i, r.err)
		}
	}
	return true, st, fail.orNil()
}

// Testany reports, without blocking, a completed request: its index,
// status and error, setting that element of reqs to nil (see WaitAny).
// ok is false when requests are pending but none has completed; index is
// -1 when none completed (ok is true then only if every request is nil).
func Testany(reqs ...*Request) (index int, ok bool, st Status, err error) {
	active := false
	for i, r := range reqs {
		if r == nil {
			continue
		}
		if r.isDone() {
			reqs[i] = nil
			return i, true, r.status, r.err
		}
		active = true
	}
	return -1, !active, Status{}, nil
}
