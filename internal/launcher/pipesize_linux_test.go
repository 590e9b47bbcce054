package launcher

import (
	"bytes"
	"context"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

func pipeSize(t *testing.T, f *os.File) int {
	t.Helper()
	sc, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	var ferr error
	sc.Control(func(fd uintptr) { n, ferr = unix.FcntlInt(fd, unix.F_GETPIPE_SZ, 0) })
	if ferr != nil {
		t.Fatal(ferr)
	}
	return n
}

// A local proxy's output pipe holds a whole output frame and more: at 64
// KiB every 64 KiB chunk of a rank's output went in two or three writes,
// with a wait for gompiexec between them.
func TestLocalProxyPipeHoldsFrames(t *testing.T) {
	for _, tc := range []struct {
		name string
		argv []string
	}{
		{"proxy that reads its stdin", []string{"/bin/cat"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := startLocal(context.Background(), tc.argv, Spec{})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { p.Close(); p.Kill(); p.Wait() }()
			limit, err := os.ReadFile("/proc/sys/fs/pipe-max-size")
			if err != nil {
				t.Fatal(err)
			}
			if got := pipeSize(t, p.(*forkProc).out); got < ProxyPipeSize {
				t.Fatalf("proxy's output pipe holds %d bytes, want %d (fs.pipe-max-size %s)", got, ProxyPipeSize, bytes.TrimSpace(limit))
			}
		})
	}
}
