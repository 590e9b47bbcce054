package mpi

// Generalized requests (MPI_Grequest_start): operations built outside the
// messaging engine (file I/O, non-blocking collectives, application work)
// hand back the same *Request as Isend/Irecv, so one WaitAny or WaitAll
// covers them all.

// StartRequest returns a pending request and the function that completes
// it. Only the first call of complete counts; later ones are ignored.
// Cancel on such a request reports false.
func StartRequest() (req *Request, complete func(Status, error)) {
	r := newRequest()
	return r, r.complete
}

// Go runs f on a new goroutine and returns a request that completes with
// f's result when f returns.
func Go(f func() (Status, error)) *Request {
	r := newRequest()
	go func() {
		st, err := f()
		r.complete(st, err)
	}()
	return r
}
