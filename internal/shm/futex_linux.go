//go:build linux

package shm

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Shared (not FUTEX_PRIVATE_FLAG) operations: the waiter and the waker are
// different processes mapping the same file.
const (
	futexWaitOp = 0 // FUTEX_WAIT
	futexWakeOp = 1 // FUTEX_WAKE
)

// futexWait sleeps while *addr == val, for at most d. Spurious and early
// returns (EINTR, EAGAIN, timeout) are fine: callers recheck their condition.
func futexWait(addr unsafe.Pointer, val uint32, d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	unix.Syscall6(unix.SYS_FUTEX, uintptr(addr), futexWaitOp, uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// futexWake wakes every waiter on addr, in any process.
func futexWake(addr unsafe.Pointer) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(addr), futexWakeOp, uintptr(1<<31-1), 0, 0, 0)
}

// procStat returns the state letter and start time (field 22, clock ticks
// after boot) of a process from /proc/<pid>/stat.
func procStat(pid int) (state byte, start uint64, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	// The command name may contain spaces and parentheses: fields start
	// after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, os.ErrInvalid
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 || len(f[0]) != 1 {
		return 0, 0, os.ErrInvalid
	}
	start, err = strconv.ParseUint(f[19], 10, 64)
	return f[0][0], start, err
}

func procStart(pid int) (uint64, error) {
	_, s, err := procStat(pid)
	return s, err
}

// pidAlive reports whether the process recorded as (pid, start) still runs.
// A zombie counts as dead: its parent may be the very process waiting on it.
// A different start time means the pid was reused.
func pidAlive(pid int, start uint64) bool {
	st, s, err := procStat(pid)
	if err != nil {
		// No /proc entry: gone. Any other error: do not guess.
		return !os.IsNotExist(err) && unix.Kill(pid, 0) != unix.ESRCH
	}
	if st == 'Z' || st == 'X' || st == 'x' {
		return false
	}
	return start == 0 || s == start
}

// pidNS identifies this process's pid namespace (0 if unknown), so that
// pids are only compared within one namespace.
func pidNS() uint64 {
	var st unix.Stat_t
	if unix.Stat("/proc/self/ns/pid", &st) != nil {
		return 0
	}
	return st.Ino
}
