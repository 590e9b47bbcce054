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

// addFailure records request i's error in *e, made on the first failure
// (WaitAll is on the message-rate path: no allocation when all succeed).
func addFailure(e **RequestError, i int, err error) {
	if err == nil {
		return
	}
	if *e == nil {
		*e = new(RequestError)
	}
	(*e).Indices = append((*e).Indices, i)
	(*e).Errs = append((*e).Errs, err)
}

// failures returns e as an error, or nil when no request failed.
func failures(e *RequestError) error {
	if e == nil {
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
	var fail *RequestError
	for i, r := range reqs {
		if r != nil {
			st[i] = r.status
			addFailure(&fail, i, r.err)
		}
	}
	return true, st, failures(fail)
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
