package cow

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestDetachedWriterOutlivesProcess: a detached writer (Options.Detach)
// finishes its regions and then its commit write after its process and
// that process's whole group were killed (SIGKILL to the group, as a
// launcher ends a job), from Go heap memory; also a writer still held
// (Options.Hold, never released): the kill releases it.
func TestDetachedWriterOutlivesProcess(t *testing.T) {
	if dir := os.Getenv("COW_TEST_DETACH"); dir != "" {
		detachHelper(dir, os.Getenv("COW_TEST_HOLD") == "1")
		return
	}
	for _, hold := range []bool{false, true} {
		t.Run(map[bool]string{false: "free", true: "held"}[hold], func(t *testing.T) {
			testDetached(t, hold)
		})
	}
}

func testDetached(t *testing.T, hold bool) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestDetachedWriterOutlivesProcess$")
	cmd.Env = append(os.Environ(), "COW_TEST_DETACH="+dir, "COW_TEST_HOLD="+map[bool]string{false: "0", true: "1"}[hold])
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	var pid int
	for deadline := time.Now().Add(30 * time.Second); pid == 0; time.Sleep(5 * time.Millisecond) {
		if b, err := os.ReadFile(filepath.Join(dir, "pid")); err == nil && bytes.HasSuffix(b, []byte("\n")) {
			pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		if time.Now().After(deadline) {
			syscall.Kill(-pgid, syscall.SIGKILL)
			cmd.Wait()
			t.Fatalf("helper named no writer:\n%s", out.String())
		}
	}
	// The writer is stopped (by the helper): kill the helper's group.
	syscall.Kill(-pgid, syscall.SIGKILL)
	cmd.Wait()
	defer syscall.Kill(pid, syscall.SIGKILL) // on failure only: it exits by itself
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil || strings.Contains(string(st), ") Z ") {
		t.Fatalf("detached writer %d died with its process's group: %v %s", pid, err, st)
	}
	if g, _ := unix.Getpgid(pid); g == pgid {
		t.Fatalf("detached writer %d still in the group %d", pid, pgid)
	}
	// In the session it was started in (the helper's, which is this
	// test's): a session of its own is an autogroup of its own, which
	// the scheduler gives as much CPU as the job's whole session.
	if s, me := sid(pid), sid(0); s != me {
		t.Fatalf("detached writer %d in session %d, want its parent's %d", pid, s, me)
	}
	syscall.Kill(pid, syscall.SIGCONT)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil || strings.Contains(string(st), ") Z ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("writer %d did not finish", pid)
		}
	}
	got, _ := os.ReadFile(filepath.Join(dir, "data"))
	if !bytes.Equal(got, detachPattern()) {
		t.Fatalf("data file has %d bytes, not the snapshot's %d", len(got), len(detachPattern()))
	}
	if c, _ := os.ReadFile(filepath.Join(dir, "commit")); string(c) != "..C." {
		t.Fatalf("commit file %q, want the commit byte written after the data", c)
	}
}

func detachPattern() []byte {
	b := make([]byte, 32<<20)
	for i := range b {
		b[i] = byte(i*7 + i>>12)
	}
	return b
}

func detachHelper(dir string, hold bool) {
	buf := detachPattern() // Go heap
	f, err := os.Create(filepath.Join(dir, "data"))
	if err != nil {
		panic(err)
	}
	c, err := os.Create(filepath.Join(dir, "commit"))
	if err != nil {
		panic(err)
	}
	// Stop the writer once it is set up (its two descriptors left, and
	// a held one its gate), so that it is surely running when the group
	// is killed.
	fds := 2
	if hold {
		fds = 3
	}
	s := caught(fds, func() (*Snap, error) {
		// A try whose writer finished wrote the commit: start clean.
		f.Truncate(0)
		c.WriteAt([]byte("...."), 0)
		return SnapshotWith(f, []Region{{Mem: buf}}, Options{Detach: true, CommitFile: c, Commit: Region{Mem: []byte("C"), Off: 2}, Hold: hold})
	})
	clear(buf) // the snapshot is of the memory at the call
	os.WriteFile(filepath.Join(dir, "pid"), []byte(strconv.Itoa(s.pid)+"\n"), 0o600)
	select {}
}

// A region that fails leaves the commit unwritten.
func TestCommitOnlyAfterRegions(t *testing.T) {
	dir := t.TempDir()
	ro, err := os.Create(filepath.Join(dir, "ro"))
	if err != nil {
		t.Fatal(err)
	}
	ro.Close()
	ro, _ = os.Open(ro.Name())
	defer ro.Close()
	c, _ := os.Create(filepath.Join(dir, "commit"))
	defer c.Close()
	c.WriteString("..")
	s, err := SnapshotWith(ro, []Region{{Mem: make([]byte, 100)}}, Options{Detach: true, CommitFile: c, Commit: Region{Mem: []byte("C"), Off: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Wait(); err == nil {
		t.Fatal("snapshot into a read-only file succeeded")
	}
	if b, _ := os.ReadFile(c.Name()); string(b) != ".." {
		t.Fatalf("commit file %q after a failed region", b)
	}
	if _, err := SnapshotWith(ro, nil, Options{Commit: Region{Mem: []byte("C")}}); err == nil {
		t.Fatal("a commit without a file accepted")
	}
}

func TestPrivate(t *testing.T) {
	heap := make([]byte, 1<<20)
	a, err := Make[byte](1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	defer Free(a)
	shared, err := unix.Mmap(-1, 0, 1<<16, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(shared)
	fm, err := os.Create(filepath.Join(t.TempDir(), "m"))
	if err != nil {
		t.Fatal(err)
	}
	fm.Truncate(1 << 16)
	filePriv, err := unix.Mmap(int(fm.Fd()), 0, 1<<16, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(filePriv)
	for _, tc := range []struct {
		name string
		b    []byte
		want bool
	}{
		{"heap", heap, true},
		{"Make", a, true},
		{"shared anonymous", shared, false},
		{"private file mapping", filePriv, false},
		{"empty", nil, false},
	} {
		if got := Private(tc.b); got != tc.want {
			t.Errorf("Private(%s) = %v, want %v", tc.name, got, tc.want)
		}
	}
	maps := "1000-2000 rw-p 00000000 00:00 0\n2000-3000 rw-p 00000000 00:00 0 [heap]\n4000-5000 rw-p 00000000 00:00 0\n5000-6000 rw-s 00000000 00:01 7 /dev/zero\n"
	for _, tc := range []struct {
		lo, hi uintptr
		want   bool
	}{
		{0x1800, 0x2800, true},  // across two private anonymous mappings
		{0x2800, 0x4100, false}, // a hole
		{0x4000, 0x5001, false}, // into a shared one
		{0x0800, 0x1100, false}, // before the first
		{0x4000, 0x5000, true},  // exactly one
		{0x6000, 0x6001, false}, // past the end
	} {
		if got := privateIn(maps, tc.lo, tc.hi); got != tc.want {
			t.Errorf("privateIn(%#x, %#x) = %v, want %v", tc.lo, tc.hi, got, tc.want)
		}
	}
}

// Make's large allocations may use huge pages (what keeps the fork of a
// process holding them short): the kernel counts them THP-eligible.
func TestMakeHugePages(t *testing.T) {
	// THP off is a configuration, not a missing prerequisite: Make then
	// uses 4 KiB pages and only forks are slower.
	if b, _ := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled"); !bytes.Contains(b, []byte("[madvise]")) && !bytes.Contains(b, []byte("[always]")) {
		t.Skipf("transparent huge pages off here: %s", b)
	}
	a, err := Make[byte](64 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer Free(a)
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	p := uint64(uintptr(unsafe.Pointer(&a[0])))
	var in bool
	for _, l := range strings.Split(string(smaps), "\n") {
		if f := strings.Fields(l); len(f) > 0 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":") {
			lo, hi, _ := strings.Cut(f[0], "-")
			l0, err1 := strconv.ParseUint(lo, 16, 64)
			h0, err2 := strconv.ParseUint(hi, 16, 64)
			in = err1 == nil && err2 == nil && l0 <= p && p < h0
			continue
		}
		if in && strings.HasPrefix(l, "THPeligible:") {
			if strings.TrimSpace(strings.TrimPrefix(l, "THPeligible:")) != "1" {
				t.Fatalf("Make's 64 MiB not eligible for huge pages: %s", l)
			}
			return
		}
	}
	t.Fatal("Make's mapping not found in /proc/self/smaps")
}

// BenchmarkForkMapped: what a snapshot's caller blocks for (the fork:
// copying page tables) against the memory the process has mapped and
// touched. The writer's own work (one page here) is waited for outside
// the timer.
func BenchmarkForkMapped(b *testing.B) {
	for _, mib := range []int{0, 64, 256, 1024, -256} {
		name := strconv.Itoa(mib) + "MiB"
		if mib < 0 {
			mib, name = -mib, "Make"+strconv.Itoa(-mib)+"MiB" // cow.Make: huge pages
		}
		b.Run(name, func(b *testing.B) {
			debug.FreeOSMemory() // the previous case's pages
			var ballast []byte
			if !strings.HasPrefix(name, "Make") {
				ballast = make([]byte, mib<<20)
			} else {
				var err error
				if ballast, err = Make[byte](mib << 20); err != nil {
					b.Fatal(err)
				}
				defer Free(ballast)
			}
			for i := 0; i < len(ballast); i += 4096 {
				ballast[i] = 1
			}
			f, err := os.Create(filepath.Join(b.TempDir(), "snap"))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			page := make([]byte, 4096)
			for b.Loop() {
				s, err := SnapshotWith(f, []Region{{Mem: page}}, Options{Detach: true})
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				s.Wait()
				b.StartTimer()
			}
			runtime.KeepAlive(ballast)
		})
	}
}

// FuzzPrivateIn: the /proc/self/maps parser never panics, and a range it
// accepts is accepted in every part (coverage by private anonymous
// mappings holds for sub-ranges).
func FuzzPrivateIn(f *testing.F) {
	f.Add("1000-2000 rw-p 00000000 00:00 0\n2000-3000 rw-p 00000000 00:00 0 [heap]\n", uint32(0x1800), uint32(0x1000))
	f.Add("1000-2000 rw-s 00000000 00:01 7 /dev/zero\n", uint32(0x1000), uint32(1))
	f.Add("zz-1 rw-p 0 0 0\n", uint32(1), uint32(1))
	f.Fuzz(func(t *testing.T, maps string, lo, n uint32) {
		l, h := uintptr(lo), uintptr(lo)+uintptr(n)
		if !privateIn(maps, l, h) || n < 2 {
			return
		}
		if !privateIn(maps, l, l+uintptr(n/2)) || !privateIn(maps, l+uintptr(n/2), h) {
			t.Fatalf("[%#x, %#x) accepted, a half of it not", l, h)
		}
	})
}

func sid(pid int) int {
	s, err := unix.Getsid(pid)
	if err != nil {
		return -1
	}
	return s
}
