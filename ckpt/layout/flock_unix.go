//go:build unix

package layout

import (
	"os"

	"golang.org/x/sys/unix"
)

// flock takes f's exclusive lock without waiting.
func flock(f *os.File) error {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err != unix.EINTR {
			return err
		}
	}
}
