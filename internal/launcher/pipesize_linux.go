package launcher

import (
	"os"

	"golang.org/x/sys/unix"
)

// GrowPipe asks for a pipe of size bytes (best effort: a user past
// fs.pipe-user-pages-soft, or a size above fs.pipe-max-size, keeps the
// pipe as it is) and returns the pipe's size.
func GrowPipe(f *os.File, size int) int {
	sc, err := f.SyscallConn()
	if err != nil {
		return 0
	}
	got := 0
	sc.Control(func(fd uintptr) {
		n, err := unix.FcntlInt(fd, unix.F_SETPIPE_SZ, size)
		if err != nil {
			n, _ = unix.FcntlInt(fd, unix.F_GETPIPE_SZ, 0)
		}
		got = n
	})
	return got
}
