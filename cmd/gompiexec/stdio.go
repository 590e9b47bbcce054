package main

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// closedStdio names gompiexec's stdout or stderr when it was closed by
// whoever started us. Go's runtime opens /dev/null read-write in place of
// a closed descriptor 0-2 at start-up, so the job's output would vanish
// without an error; a shell's `>/dev/null` opens it write-only, which is
// a choice and left alone. Hydra refuses to run without stdout too.
func closedStdio() error {
	for fd, name := range map[int]string{1: "stdout", 2: "stderr"} {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil {
			return fmt.Errorf("%s (descriptor %d) is not open", name, fd)
		}
		fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
		if err != nil {
			continue
		}
		null := st.Mode&unix.S_IFMT == unix.S_IFCHR && unix.Major(st.Rdev) == 1 && unix.Minor(st.Rdev) == 3
		if null && fl&unix.O_ACCMODE == unix.O_RDWR {
			return fmt.Errorf("%s (descriptor %d) was closed when gompiexec started: the job's output would be lost", name, fd)
		}
	}
	return nil
}
