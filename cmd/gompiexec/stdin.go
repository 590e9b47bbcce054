package main

import (
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// jobStdin is what rank 0's stdin is read from. A terminal is read only
// while gompiexec's process group is the terminal's foreground one: a
// background job (`gompiexec ... &` at a prompt) that read it would be
// stopped by SIGTTIN until `fg`, where mpiexec.hydra's runs to its end.
// Brought to the foreground, it reads as usual.
func jobStdin() io.Reader {
	if isTerminal(os.Stdin) {
		return foregroundReader{os.Stdin}
	}
	return os.Stdin
}

type foregroundReader struct{ f *os.File }

func (r foregroundReader) Read(b []byte) (int, error) {
	for !foreground(r.f) {
		time.Sleep(200 * time.Millisecond)
	}
	return r.f.Read(b)
}

// foreground: f is not a terminal, or this process group is its
// foreground group.
func foreground(f *os.File) bool {
	pg, err := unix.IoctlGetInt(int(f.Fd()), unix.TIOCGPGRP)
	return err != nil || pg == unix.Getpgrp()
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
