package layout

import "golang.org/x/sys/unix"

// startWriteback asks the kernel to start writing [off, off+n) of f's
// dirty pages to the device now, without waiting. A checkpoint is
// gigabytes written and then synced: left alone, the kernel starts
// writeback only when the dirty data passes its background threshold
// (10% of memory by default), so the final fsync would write it all while
// the rank waits. Started early, the device writes while the rank is
// still copying, and the fsync waits only for the tail. Advisory: an
// error (a file system without support) changes nothing.
func startWriteback(fd uintptr, off, n int64) {
	_ = unix.SyncFileRange(int(fd), off, n, unix.SYNC_FILE_RANGE_WRITE)
}
