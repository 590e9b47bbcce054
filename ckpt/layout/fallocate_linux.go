//go:build linux

package layout

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// fallocate allocates size bytes of storage for f. On tmpfs the pages are
// allocated but not zeroed until read, and a write of whole pages skips
// the zeroing: the next checkpoint only copies its bytes.
func fallocate(f *os.File, size int64) error {
	if size <= 0 {
		return nil
	}
	err := unix.Fallocate(int(f.Fd()), 0, 0, size)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		return errNoFallocate
	}
	return err
}

// roomy: free space beyond which reserve does not allocate: eight times
// the range and 1 GiB more (several ranks of a node snapshot at once).
func roomy(n int64) int64 { return 8*n + 1<<30 }

// reserve allocates storage for f's bytes [off, off+n) without changing
// its size, unless the file has as many blocks already (a spare file,
// allocated whole) or, unless always, the file system has room to spare
// (roomy): allocating new tmpfs pages costs about 0.1 s per 256 MiB, which
// the snapshot writer pays anyway but which reserving moves into the
// checkpoint's blocking time. Without fallocate it does nothing.
func reserve(f *os.File, off, n int64, always bool) error {
	if n <= 0 {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err == nil && st.Blocks*512 >= off+n {
		return nil
	}
	var fs unix.Statfs_t
	if !always && unix.Fstatfs(int(f.Fd()), &fs) == nil && int64(fs.Bavail)*fs.Bsize >= roomy(n) {
		return nil
	}
	err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, off, n)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		return nil
	}
	return err
}
