package mpiio

// SetTestHosts makes rank r of every communicator that opens a file live
// on host(r), so that one process can play several hosts; the returned
// function undoes it.
func SetTestHosts(host func(rank int) string) (restore func()) {
	testHost = host
	return func() { testHost = nil }
}

// CacheSnapshots is the number of f's cached writes that took the
// copy-on-write snapshot path.
func CacheSnapshots(f *File) int {
	if f.cache == nil {
		return 0
	}
	f.cache.mu.Lock()
	defer f.cache.mu.Unlock()
	return f.cache.nsnaps
}
