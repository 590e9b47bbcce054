// Package cow gives numeric slices whose state can be saved to a file
// without stopping the program while the bytes are written: a
// copy-on-write snapshot.
//
// Make allocates a slice in anonymous memory mapped outside the Go heap
// (the garbage collector never scans or moves it; element types hold no
// pointers), Free unmaps it. Snapshot(f, regions) captures the regions'
// bytes as they are at the call and writes them to f at the given
// offsets in the background; the program keeps writing to the memory at
// once. Wait (or Done) reports when the file holds the snapshot.
//
// The model is fork(2)'s, as Redis's background save: Snapshot forks a
// child process that shares every page with this one copy-on-write; the
// child writes the regions to f with pwrite(2) and exits. The kernel copies
// a page the first time either process writes it, so the child sees the
// memory as it was at the fork whatever writes it afterwards: the
// program's own stores, read(2) or recv(2) into the buffer, another
// process's process_vm_writev (the shared-memory transport's CMA path),
// from any number of goroutines. Nothing in this process handles the
// faults, so nothing depends on the Go scheduler: a stop-the-world
// garbage collection while a goroutine is writing a snapshotted page is
// an ordinary page fault. (A userfaultfd write-protect handler, as
// QEMU's background snapshot uses, cannot be a goroutine: a goroutine
// faulting inside an assembly routine such as memmove cannot be
// preempted, so a stop-the-world pause that stopped the handler first
// would never finish. It also needs privileges fork does not.)
//
// What the application pays: the fork (copying this process's page
// tables: one entry per 4 KiB page touched, about 20 ms per 256 MiB of Go
// heap here, and per 2 MiB for Make's memory, which is advised to use
// huge pages: about 1 ms per 256 MiB) and, while the child lives,
// one page copy per page first written (the Go heap's pages included).
// The child writes a MiB at a time and then gives those pages back
// (MADV_DONTNEED in the child), so a page written after the child passed
// it is reused, not copied. The snapshot's memory cost is the pages
// written ahead of the child.
//
// The child closes every other file descriptor, blocks all signals and
// dies with this process (PR_SET_PDEATHSIG): a crash or os.Exit during a
// snapshot leaves no process behind and no bytes written after it.
// Freeing or re-snapshotting a region while a snapshot is in progress is
// safe: the child owns its copy of the address space.
//
// SnapshotWith's options make a writer for bytes already acknowledged:
// Detach (it outlives this process and leaves its process group), a
// commit write after the regions (package mpiio's cache commits its
// journal record so), and Hold (it starts writing at Release, so that it
// takes no core from its caller before then).
//
// Snapshot returns an error wrapping ErrUnavailable when it cannot fork
// (not Linux, a process limit, memory) or when the environment sets
// GOMPI_COW=off; callers then write the bytes themselves.
package cow

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"unsafe"
)

// Elem is the element types Make allocates: fixed-size numbers, no
// pointers.
type Elem interface {
	~int | ~int8 | ~int16 | ~int32 | ~int64 |
		~uint | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~uintptr |
		~float32 | ~float64 | ~complex64 | ~complex128
}

// EnvDisable, set to "off" (or "0"), makes Snapshot return ErrUnavailable:
// the copy path, for comparison and for tests.
const EnvDisable = "GOMPI_COW"

// Disabled reports whether the environment turns snapshots off
// (EnvDisable).
func Disabled() bool {
	v := os.Getenv(EnvDisable)
	return v == "off" || v == "0"
}

// Errors callers test with errors.Is.
var (
	// ErrUnavailable: no copy-on-write snapshot here; write the bytes
	// directly.
	ErrUnavailable = errors.New("cow: copy-on-write snapshot unavailable")
	// ErrNotArena: Free of a slice Make did not return.
	ErrNotArena = errors.New("cow: not a slice allocated by cow.Make")
)

// arenas maps each mapping's start address to its memory.
var (
	arenaMu sync.Mutex
	arenas  = map[uintptr][]byte{}
	starts  []uintptr // sorted keys of arenas
)

// Make returns a zeroed slice of n elements in memory outside the Go heap.
// Free it with Free; memory not freed stays mapped until the process
// exits.
func Make[T Elem](n int) ([]T, error) {
	var zero T
	size := uintptr(n) * unsafe.Sizeof(zero)
	if n < 0 || (n > 0 && size/uintptr(n) != unsafe.Sizeof(zero)) {
		return nil, fmt.Errorf("cow: Make of %d elements: bad length", n)
	}
	if n == 0 {
		return []T{}, nil
	}
	b, err := mapAnon(size)
	if err != nil {
		return nil, fmt.Errorf("cow: Make of %d bytes: %w", size, err)
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	arenaMu.Lock()
	arenas[p] = b
	i := sort.Search(len(starts), func(i int) bool { return starts[i] >= p })
	starts = append(starts, 0)
	copy(starts[i+1:], starts[i:])
	starts[i] = p
	arenaMu.Unlock()
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), n), nil
}

// Free unmaps s, which must be a slice Make returned (its first element
// at the start of the allocation). s must not be used afterwards. A
// snapshot in progress keeps its own copy.
func Free[T Elem](s []T) error {
	if cap(s) == 0 {
		return nil
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(s)))
	arenaMu.Lock()
	b, ok := arenas[p]
	if ok {
		delete(arenas, p)
		i := sort.Search(len(starts), func(i int) bool { return starts[i] >= p })
		starts = append(starts[:i], starts[i+1:]...)
	}
	arenaMu.Unlock()
	if !ok {
		return ErrNotArena
	}
	if err := unmap(b); err != nil {
		return fmt.Errorf("cow: Free: %w", err)
	}
	return nil
}

// Contains reports whether the n bytes at p lie in one allocation of Make.
func Contains(p unsafe.Pointer, n uintptr) bool {
	a := uintptr(p)
	arenaMu.Lock()
	defer arenaMu.Unlock()
	i := sort.Search(len(starts), func(i int) bool { return starts[i] > a }) - 1
	if i < 0 {
		return false
	}
	s := starts[i]
	return a+n >= a && a+n <= s+uintptr(len(arenas[s]))
}

// Owns reports whether s's elements lie in an allocation of Make.
func Owns[T Elem](s []T) bool {
	if len(s) == 0 {
		return false
	}
	var zero T
	return Contains(unsafe.Pointer(unsafe.SliceData(s)), uintptr(len(s))*unsafe.Sizeof(zero))
}

// Bytes is s's memory as bytes (no copy), for a Region.
func Bytes[T Elem](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	var zero T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), uintptr(len(s))*unsafe.Sizeof(zero))
}

// Region is memory to save and where in the file it goes.
type Region struct {
	Mem []byte
	Off int64
}

// Snap is a snapshot being written.
type Snap struct {
	done chan struct{}
	err  error
	pid  int
	// gate: the write end of a held writer's pipe (Options.Hold), closed
	// once by Release.
	gate        *os.File
	releaseOnce sync.Once
}

// Done is closed once the snapshot is written (or failed). A held
// snapshot (Options.Hold) is not done before Release.
func (s *Snap) Done() <-chan struct{} { return s.done }

// Wait releases the writer (if held) and waits for the snapshot, and
// returns its error. Durability is the caller's: Wait returns once the
// bytes are written, not synced.
func (s *Snap) Wait() error {
	s.Release()
	<-s.done
	return s.err
}

// Release lets a held writer (Options.Hold) start writing. It does nothing
// for a writer not held, or after the first call.
func (s *Snap) Release() {
	s.releaseOnce.Do(func() {
		if s.gate != nil {
			s.gate.Close()
		}
	})
}

// Options changes what a snapshot's writer does (SnapshotWith).
type Options struct {
	// Detach: the writer finishes even if this process dies first: it
	// does not die with it (no PR_SET_PDEATHSIG) and leaves its process
	// group (setpgid: a group of its own), so that a launcher's SIGKILL
	// to the group does not reach it either. For bytes the caller has
	// already acknowledged. It stays in this process's session: with
	// autogroup scheduling (Linux's default for desktops and many
	// servers) a session of its own (setsid) would be scheduled as a
	// group of its own, with as large a CPU share as this whole session,
	// and a few writers then starved ranks still in a collective call for
	// 0.1-0.3 s. Its signals are blocked, so a hangup of the session's
	// terminal does not stop it. It still dies with the machine, with its
	// cgroup, or with a signal sent to its own pid.
	Detach bool
	// CommitFile and Commit: once every region is written, the writer
	// writes Commit.Mem at Commit.Off of CommitFile (one pwrite; its own
	// mark that the regions are in place). A write that does not cross a
	// page boundary of the file (a single byte never does) is atomic
	// against the writer's death. After a failed region nothing is
	// committed.
	CommitFile *os.File
	Commit     Region
	// Hold: the writer, once forked, waits for Release (or Wait, or the
	// death of this process) before it writes anything. It still sees
	// the memory as it was at the call. For a caller with more to do
	// before it returns (package mpiio's collective write agrees with
	// the other ranks afterwards): the writer's copying, a core's worth
	// of work, then does not compete with it, nor with the other ranks
	// of the host forking their own writers, for the cores. The writer
	// waits on a pipe whose only write end this process holds, so a
	// kill of this process releases it too: with Detach, the bytes are
	// still written.
	Hold bool
}

// Snapshot captures the regions' bytes now and writes each to f at its
// offset in the background. The regions may be any memory of this
// process, Make's or not, but must not overlap. The writer holds its own copy of f's
// descriptor: closing f before Wait does not disturb it.
func Snapshot(f *os.File, regions []Region) (*Snap, error) {
	return SnapshotWith(f, regions, Options{})
}

// SnapshotWith is Snapshot with options.
func SnapshotWith(f *os.File, regions []Region, o Options) (*Snap, error) {
	if Disabled() {
		return nil, fmt.Errorf("%w (%s=%s)", ErrUnavailable, EnvDisable, os.Getenv(EnvDisable))
	}
	type span struct{ lo, hi uintptr }
	var mem []span
	for _, r := range regions {
		if r.Off < 0 {
			return nil, fmt.Errorf("cow: Snapshot: negative offset %d", r.Off)
		}
		if len(r.Mem) > 0 {
			p := uintptr(unsafe.Pointer(unsafe.SliceData(r.Mem)))
			mem = append(mem, span{p, p + uintptr(len(r.Mem))})
		}
	}
	// The writer gives back each region's pages once written: regions
	// must not share bytes.
	sort.Slice(mem, func(i, j int) bool { return mem[i].lo < mem[j].lo })
	for i := 1; i < len(mem); i++ {
		if mem[i].lo < mem[i-1].hi {
			return nil, fmt.Errorf("%w: regions overlap in memory", ErrUnavailable)
		}
	}
	if len(o.Commit.Mem) > 0 && (o.CommitFile == nil || o.Commit.Off < 0) {
		return nil, fmt.Errorf("cow: Snapshot: commit needs a file and a non-negative offset")
	}
	return snapshot(f, regions, o)
}
