//go:build !linux

package layout

// startWriteback is a no-op where sync_file_range does not exist.
func startWriteback(fd uintptr, off, n int64) {}
