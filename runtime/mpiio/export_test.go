package mpiio

// SetTestHosts makes rank r of every communicator that opens a file live
// on host(r), so that one process can play several hosts; the returned
// function undoes it.
func SetTestHosts(host func(rank int) string) (restore func()) {
	testHost = host
	return func() { testHost = nil }
}
