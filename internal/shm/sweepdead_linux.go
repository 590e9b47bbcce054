//go:build linux

package shm

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// SweepDead removes the rendezvous files in dir ("" means DefaultDir())
// that belong to this user and whose creator process is gone: the header
// names it (pid, start time, pid namespace), so a file is removed only when
// that process no longer runs in this pid namespace. A live job's files
// always have a live creator (it unlinks the file itself before it exits
// normally), so they are never touched. A file whose header was never
// written (its creator died between creating and initialising it) is
// removed once it is older than unfinished. Files of another pid namespace
// are left alone. gompi-proxy calls it when a job starts, so segments of
// jobs that were SIGKILLed during connection set-up go at the latest when
// the next job starts on the host.
func SweepDead(dir string, unfinished time.Duration) (int, error) {
	if dir == "" {
		dir = DefaultDir()
	}
	// Names only, unsorted: every proxy start lists the directory, which
	// on a shared host holds many files; deadFile checks the type.
	names, err := readNames(dir)
	if err != nil {
		return 0, err
	}
	ns, uid := pidNS(), uint32(os.Getuid())
	n := 0
	var first error
	for _, name := range names {
		if !strings.HasPrefix(name, filePrefix) {
			continue
		}
		path := filepath.Join(dir, name)
		if !deadFile(path, uid, ns, unfinished) {
			continue
		}
		if err := os.Remove(path); err == nil {
			n++
		} else if !errors.Is(err, os.ErrNotExist) && first == nil {
			first = err
		}
	}
	return n, first
}

// deadFile reads path's header and reports whether its creator is gone.
func deadFile(path string, uid uint32, ns uint64, unfinished time.Duration) bool {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Uid != uid || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return false
	}
	old := time.Since(time.Unix(st.Mtim.Sec, st.Mtim.Nsec)) > unfinished
	hdr := make([]byte, offPidNS+8)
	if k, err := unix.Pread(fd, hdr, 0); err != nil || k < len(hdr) {
		return old // not even sized yet
	}
	if u64(hdr, offMagic).Load() != fileMagic {
		return old
	}
	pid := int(u32(hdr, offPid).Load())
	start := u64(hdr, offStart).Load()
	fileNS := u64(hdr, offPidNS).Load()
	if pid <= 0 {
		return old
	}
	if fileNS != 0 && ns != 0 && fileNS != ns {
		return false
	}
	return !pidAlive(pid, start)
}
