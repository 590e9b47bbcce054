package cow

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mapAnon maps private anonymous memory: private, so that a fork shares
// it copy-on-write (a shared mapping would show the child later writes).
//
// A mapping of at least a huge page is advised to use huge pages: a fork
// then copies one page-table entry per 2 MiB instead of 512, which is
// most of what a snapshot's caller waits for (BenchmarkForkMapped: 256
// MiB of 4 KiB pages 17.5 ms, of huge pages 0.84 ms, under load). A write
// to a page shared with a writer still copies 4 KiB: since Linux 5.8 a
// copy-on-write fault splits the huge page instead of copying it.
func mapAnon(size uintptr) ([]byte, error) {
	b, err := unix.Mmap(-1, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err == nil && size >= hugePage {
		unix.Madvise(b, unix.MADV_HUGEPAGE) // a hint: without THP, 4 KiB pages
	}
	return b, err
}

const hugePage = 2 << 20

func unmap(b []byte) error { return unix.Munmap(b) }

// span is one pwrite the child does: addresses only, so the child touches
// no Go pointer (it must not run anything of the Go runtime).
type span struct {
	addr, n uintptr
	off     int64
}

// childArgs is everything the child needs, computed before the fork.
type childArgs struct {
	fd    uintptr
	ppid  uintptr
	spans []span
	mask  uint64 // all signals
	// detach: no PDEATHSIG, a process group of its own (Options.Detach).
	detach bool
	// The commit write (Options.Commit); cn 0: none. keep: the
	// descriptors the child keeps open, ascending (fd, cfd and gate).
	cfd, caddr, cn uintptr
	coff           int64
	keep           [3]uintptr
	// hold: the child waits for the end of file on gate, the read end of
	// a pipe, before it writes (Options.Hold).
	hold bool
	gate uintptr
}

// The child writes releaseChunk bytes at a time, then drops its reference
// to those pages.
const (
	releaseChunk = 1 << 20
	pageMask     = 4095
)

// Exit codes of the child besides an errno.
const (
	exitShort  = 255 // pwrite wrote nothing
	exitOrphan = 254 // the parent died before the child set PDEATHSIG
)

func snapshot(f *os.File, regions []Region, o Options) (*Snap, error) {
	a := &childArgs{fd: f.Fd(), ppid: uintptr(os.Getpid()), mask: ^uint64(0), detach: o.Detach}
	a.keep = [3]uintptr{a.fd, a.fd, a.fd}
	if len(o.Commit.Mem) > 0 {
		a.cfd, a.caddr, a.cn, a.coff = o.CommitFile.Fd(), uintptr(unsafe.Pointer(unsafe.SliceData(o.Commit.Mem))), uintptr(len(o.Commit.Mem)), o.Commit.Off
		a.keep[1], a.keep[2] = a.cfd, a.cfd
	}
	var gate [2]int
	if o.Hold {
		// Close-on-exec: no program another goroutine starts holds the
		// write end (the writers forked here close it themselves).
		if err := unix.Pipe2(gate[:], unix.O_CLOEXEC); err != nil {
			return nil, fmt.Errorf("%w: pipe: %v", ErrUnavailable, err)
		}
		a.hold, a.gate = true, uintptr(gate[0])
		a.keep[2] = a.gate
	}
	slices.Sort(a.keep[:])
	for _, r := range regions {
		// Large regions go in pieces: Linux writes at most 2 GiB - 4 KiB
		// per call.
		mem, off := r.Mem, r.Off
		for len(mem) > 0 {
			n := min(len(mem), 1<<30)
			a.spans = append(a.spans, span{addr: uintptr(unsafe.Pointer(unsafe.SliceData(mem))), n: uintptr(n), off: off})
			mem, off = mem[n:], off+int64(n)
		}
	}
	// The child inherits this thread's signal mask: block every signal
	// around the fork so that none reaches the child before it blocks
	// them itself (a Go signal handler must not run there).
	runtime.LockOSThread()
	var old uint64
	unix.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&a.mask)), uintptr(unsafe.Pointer(&old)), 8, 0, 0)
	pid, errno := forkWriter(a)
	unix.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&old)), 0, 8, 0, 0)
	runtime.UnlockOSThread()
	runtime.KeepAlive(regions)
	runtime.KeepAlive(f)
	runtime.KeepAlive(o.CommitFile)
	runtime.KeepAlive(o.Commit.Mem)
	var w *os.File
	if o.Hold {
		unix.Close(gate[0])
		w = os.NewFile(uintptr(gate[1]), "cow-gate")
		if errno != 0 {
			w.Close()
		}
	}
	if errno != 0 {
		return nil, fmt.Errorf("%w: fork: %v", ErrUnavailable, errno)
	}
	s := &Snap{done: make(chan struct{}), pid: pid, gate: w}
	go func() {
		defer close(s.done)
		var ws unix.WaitStatus
		for {
			_, err := unix.Wait4(pid, &ws, 0, nil)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				s.err = fmt.Errorf("cow: snapshot writer %d: wait: %w", pid, err)
				return
			}
			break
		}
		switch {
		case ws.Signaled():
			s.err = fmt.Errorf("cow: snapshot writer %d killed by %v", pid, ws.Signal())
		case ws.ExitStatus() == exitShort:
			s.err = fmt.Errorf("cow: snapshot to %s: pwrite wrote 0 bytes", f.Name())
		case ws.ExitStatus() == exitOrphan:
			s.err = fmt.Errorf("cow: snapshot writer %d: parent gone", pid)
		case ws.ExitStatus() != 0:
			s.err = fmt.Errorf("cow: snapshot to %s: pwrite: %w", f.Name(), syscall.Errno(ws.ExitStatus()))
		}
	}()
	return s, nil
}

// forkWriter forks. In the child it writes a.spans and exits; it never
// returns there. Between the fork and the exit the child runs only this
// function and raw system calls: it has one thread, and the Go runtime's
// state (locks other threads held, the scheduler) is not usable in it,
// so nothing may allocate, grow the stack or be instrumented.
//
//go:nosplit
//go:norace
//go:nocheckptr
func forkWriter(a *childArgs) (int, syscall.Errno) {
	r, _, e := syscall.RawSyscall6(syscall.SYS_CLONE, uintptr(syscall.SIGCHLD), 0, 0, 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	if r != 0 {
		return int(r), 0
	}
	childWrite(a)
	return 0, 0 // not reached
}

//go:nosplit
//go:norace
//go:nocheckptr
func childWrite(a *childArgs) {
	syscall.RawSyscall6(syscall.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&a.mask)), 0, 8, 0, 0)
	if a.detach {
		// Out of the parent's process group: a launcher ending the job
		// with kill(-pgid) must not stop an acknowledged write. Not
		// setsid: a new session is a new autogroup (Options.Detach).
		syscall.RawSyscall(syscall.SYS_SETPGID, 0, 0, 0)
	} else {
		syscall.RawSyscall6(syscall.SYS_PRCTL, unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0, 0, 0, 0)
		if p, _, _ := syscall.RawSyscall(syscall.SYS_GETPPID, 0, 0, 0); p != a.ppid {
			childExit(exitOrphan)
		}
	}
	// Hold nothing of the parent's open: a socket or pipe kept open here
	// would hide its closing from the peer.
	next := uintptr(0) // the lowest descriptor not yet kept or closed
	for i := 0; i < len(a.keep); i++ {
		if k := a.keep[i]; k >= next {
			if k > next {
				syscall.RawSyscall(unix.SYS_CLOSE_RANGE, next, k-1, 0)
			}
			next = k + 1
		}
	}
	syscall.RawSyscall(unix.SYS_CLOSE_RANGE, next, ^uintptr(0), 0)
	if a.hold {
		// Held: wait until the parent closes the write end (Release, or
		// its death); the end of file is the signal.
		var b [1]byte
		for {
			_, _, e := syscall.RawSyscall(syscall.SYS_READ, a.gate, uintptr(unsafe.Pointer(&b[0])), 1)
			if e != syscall.EINTR {
				break
			}
		}
		syscall.RawSyscall(syscall.SYS_CLOSE, a.gate, 0, 0)
	}
	for i := 0; i < len(a.spans); i++ {
		s := &a.spans[i]
		addr, n, off := s.addr, s.n, s.off
		for n > 0 {
			k := n
			if k > releaseChunk {
				k = releaseChunk
			}
			w := childPwrite(a.fd, addr, k, off)
			// Give back the whole pages written (regions do not overlap:
			// none is read again): the parent's next write to one then
			// reuses it instead of copying it. An application that
			// rewrites its state at once ends up trailing the writer, at
			// its speed, instead of copying every page (measured: a pass
			// over 256 MiB during a snapshot 0.35 s instead of 0.6-0.8 s,
			// 0.07 s alone, under load).
			lo, hi := (addr+pageMask)&^pageMask, (addr+w)&^pageMask
			if hi > lo {
				syscall.RawSyscall(syscall.SYS_MADVISE, lo, hi-lo, unix.MADV_DONTNEED)
			}
			addr, n, off = addr+w, n-w, off+int64(w)
		}
	}
	for n := a.cn; n > 0; {
		n -= childPwrite(a.cfd, a.caddr+a.cn-n, n, a.coff+int64(a.cn-n))
	}
	childExit(0)
}

// childPwrite writes up to n bytes at addr to fd at off and returns how
// many; a failure ends the child with the errno as its status (a zero
// write with exitShort).
//
//go:nosplit
//go:norace
func childPwrite(fd, addr, n uintptr, off int64) uintptr {
	for {
		w, _, e := syscall.RawSyscall6(syscall.SYS_PWRITE64, fd, addr, n, uintptr(off), 0, 0)
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			childExit(uintptr(e) & 0xff)
		}
		if w == 0 {
			childExit(exitShort)
		}
		return w
	}
}

//go:nosplit
//go:norace
func childExit(code uintptr) {
	for {
		syscall.RawSyscall(syscall.SYS_EXIT_GROUP, code, 0, 0)
	}
}

// Private reports whether b lies in private anonymous memory (the Go
// heap, a goroutine stack, Make's arenas, an anonymous MAP_PRIVATE
// mapping): memory a fork captures as it is at the fork. A shared mapping
// or a file's would show the writer later changes. It reads
// /proc/self/maps unless b is Make's.
func Private(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	p := unsafe.Pointer(unsafe.SliceData(b))
	if Contains(p, uintptr(len(b))) {
		return true
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return false
	}
	return privateIn(string(maps), uintptr(p), uintptr(p)+uintptr(len(b)))
}

// privateIn reports whether [lo, hi) is covered by consecutive private
// anonymous mappings of maps (the text of /proc/self/maps).
func privateIn(maps string, lo, hi uintptr) bool {
	for len(maps) > 0 && lo < hi {
		line := maps
		if i := strings.IndexByte(maps, '\n'); i >= 0 {
			line, maps = maps[:i], maps[i+1:]
		} else {
			maps = ""
		}
		// start-end perms offset dev inode [path]
		fs := strings.Fields(line)
		if len(fs) < 5 {
			return false
		}
		a, b, ok := strings.Cut(fs[0], "-")
		start, err1 := strconv.ParseUint(a, 16, 64)
		end, err2 := strconv.ParseUint(b, 16, 64)
		if !ok || err1 != nil || err2 != nil {
			return false
		}
		if uintptr(end) <= lo {
			continue
		}
		if uintptr(start) > lo {
			return false // a hole
		}
		anon := fs[4] == "0" && (len(fs) == 5 || fs[5] == "[heap]" || fs[5] == "[stack]" || strings.HasPrefix(fs[5], "[anon:"))
		if len(fs[1]) < 4 || fs[1][3] != 'p' || !anon {
			return false
		}
		lo = uintptr(end)
	}
	return lo >= hi
}
