package mpiio

import "os"

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

// CacheThrough is the number of f's writes too large for its cache
// directory, written to the file itself.
func CacheThrough(f *File) int {
	if f.cache == nil {
		return 0
	}
	f.cache.mu.Lock()
	defer f.cache.mu.Unlock()
	return f.cache.through
}

// SetTestBeforeRelease makes fn run at the end of every collective write
// on a cached file, before its snapshot writers are released.
func SetTestBeforeRelease(fn func(f *File)) (restore func()) {
	testBeforeRelease = fn
	return func() { testBeforeRelease = nil }
}

// CacheHeld is the number of f's snapshot writers waiting for their call's
// end, and the size of f's cache data file.
func CacheHeld(f *File) (held int, dataSize int64) {
	f.cache.mu.Lock()
	defer f.cache.mu.Unlock()
	st, err := f.cache.data.Stat()
	if err != nil {
		return len(f.cache.held), -1
	}
	return len(f.cache.held), st.Size()
}

// SetTestAgree makes fn run as a rank enters any agreement (op names the
// operation).
func SetTestAgree(fn func(op string, rank int)) (restore func()) {
	testAgree = fn
	return func() { testAgree = nil }
}

// SetTestSyncFail makes the cache's fsync of the shared file fail with err
// (the file system reporting a lost write-back), or succeed again (nil).
func SetTestSyncFail(err error) (restore func()) {
	syncTarget = func(f *os.File) error {
		if err != nil {
			return err
		}
		return f.Sync()
	}
	return func() { syncTarget = (*os.File).Sync }
}

// SetTestBeforeReset makes fn run in SetView just before the shared file
// pointer is reset.
func SetTestBeforeReset(fn func(rank int)) (restore func()) {
	testBeforeReset = fn
	return func() { testBeforeReset = nil }
}

// SharedServing reports whether f's shared file pointer service (rank 0)
// is still running.
func SharedServing(f *File) bool {
	if f.shared.done == nil {
		return false
	}
	select {
	case <-f.shared.done:
		return false
	default:
		return true
	}
}

// SetTestBlockSize makes rank r's file system block size (statfs's)
// size(r), so that one process can play hosts that see different ones.
func SetTestBlockSize(size func(rank int) int64) (restore func()) {
	testBlockSize = size
	return func() { testBlockSize = nil }
}
