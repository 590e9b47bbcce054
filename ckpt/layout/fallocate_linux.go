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
