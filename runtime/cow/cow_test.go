package cow

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func fill(s []uint64, seed uint64) {
	x := seed | 1
	for i := range s {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		s[i] = x
	}
}

func TestMakeFree(t *testing.T) {
	s, err := Make[float64](1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(s) != 1000 || !Owns(s) || !Owns(s[10:20]) || !Contains(unsafe.Pointer(&s[999]), 8) {
		t.Fatalf("Make's slice not owned: len %d", len(s))
	}
	if Contains(unsafe.Pointer(&s[999]), 9) {
		t.Fatal("Contains past the end")
	}
	heap := make([]float64, 1000)
	if Owns(heap) {
		t.Fatal("a heap slice counted as an arena's")
	}
	if err := Free(heap); !errors.Is(err, ErrNotArena) {
		t.Fatalf("Free(heap) = %v, want ErrNotArena", err)
	}
	for i := range s {
		if s[i] != 0 {
			t.Fatalf("s[%d] = %v, want 0", i, s[i])
		}
		s[i] = float64(i)
	}
	if err := Free(s); err != nil {
		t.Fatal(err)
	}
	if Owns(s) {
		t.Fatal("freed slice still owned")
	}
	if err := Free(s); !errors.Is(err, ErrNotArena) {
		t.Fatalf("double Free = %v, want ErrNotArena", err)
	}
	if _, err := Make[int32](-1); err == nil {
		t.Fatal("Make(-1) succeeded")
	}
}

// snapFile is a file to snapshot into.
func snapFile(t *testing.T) *os.File {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "snap"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// checkFile compares f's bytes at off with want.
func checkFile(t *testing.T, f *os.File, off int64, want []byte) {
	t.Helper()
	got := make([]byte, len(want))
	if _, err := f.ReadAt(got, off); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		i := 0
		for got[i] == want[i] {
			i++
		}
		t.Fatalf("snapshot differs from the state at Snapshot at byte %d of %d", i, len(want))
	}
}

// TestSnapshotWhileWriting: the file holds the state at the call while
// the memory is overwritten at once by user-mode stores from many
// goroutines (copy: memmove, not preemptible), by the kernel (read(2)
// from a file, recv(2) from TCP, process_vm_writev as CMA does), with a
// garbage collection running all the time (GOGC=1 and runtime.GC in a
// loop).
func TestSnapshotWhileWriting(t *testing.T) {
	const n = 16 << 20 / 8 // 16 MiB per region
	cases := []struct {
		name  string
		write func(t *testing.T, mem []byte) error
	}{
		{"stores", func(t *testing.T, mem []byte) error {
			var wg sync.WaitGroup
			src := bytes.Repeat([]byte{0xee}, 1<<16)
			for g := 0; g < 8; g++ {
				wg.Add(1)
				go func(g int) {
					defer wg.Done()
					part := mem[g*len(mem)/8 : (g+1)*len(mem)/8]
					for len(part) > 0 {
						part = part[copy(part, src):]
					}
				}(g)
			}
			wg.Wait()
			return nil
		}},
		{"read(2)", func(t *testing.T, mem []byte) error {
			src := filepath.Join(t.TempDir(), "src")
			if err := os.WriteFile(src, bytes.Repeat([]byte{0xdd}, len(mem)), 0o644); err != nil {
				return err
			}
			fd, err := unix.Open(src, unix.O_RDONLY, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			for p := mem; len(p) > 0; {
				k, err := unix.Read(fd, p)
				if err != nil || k == 0 {
					return fmt.Errorf("read: %d, %v", k, err)
				}
				p = p[k:]
			}
			return nil
		}},
		{"tcp recv", func(t *testing.T, mem []byte) error {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return err
			}
			defer ln.Close()
			go func() {
				c, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					return
				}
				defer c.Close()
				c.Write(bytes.Repeat([]byte{0xcc}, len(mem)))
			}()
			c, err := ln.Accept()
			if err != nil {
				return err
			}
			defer c.Close()
			_, err = io.ReadFull(c, mem)
			return err
		}},
		{"process_vm_writev", func(t *testing.T, mem []byte) error {
			src := bytes.Repeat([]byte{0xbb}, 1<<20)
			for off := 0; off < len(mem); off += len(src) {
				local := []unix.Iovec{{Base: &src[0], Len: uint64(len(src))}}
				remote := []unix.RemoteIovec{{Base: uintptr(unsafe.Pointer(&mem[off])), Len: len(src)}}
				if _, err := unix.ProcessVMWritev(os.Getpid(), local, remote, 0); err != nil {
					if errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENOSYS) {
						t.Skipf("process_vm_writev: %v", err)
					}
					return err
				}
			}
			return nil
		}},
	}
	defer debug.SetGCPercent(debug.SetGCPercent(1))
	stop := make(chan struct{})
	var gcs sync.WaitGroup
	gcs.Add(1)
	go func() {
		defer gcs.Done()
		var junk [][]byte
		for {
			select {
			case <-stop:
				return
			default:
			}
			junk = append(junk[:0], make([]byte, 1<<16))
			runtime.GC()
		}
	}()
	defer func() { close(stop); gcs.Wait() }()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, err := Make[uint64](n)
			if err != nil {
				t.Fatal(err)
			}
			defer Free(a)
			heap := make([]uint64, n) // any memory, not only Make's
			fill(a, 7)
			fill(heap, 9)
			want := bytes.Clone(Bytes(a))
			wantHeap := bytes.Clone(Bytes(heap))
			f := snapFile(t)
			s, err := Snapshot(f, []Region{{Mem: Bytes(a), Off: 4096}, {Mem: Bytes(heap), Off: 4096 + int64(len(want))}})
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.write(t, Bytes(a)); err != nil {
				t.Fatal(err)
			}
			copy(heap, a)
			if err := s.Wait(); err != nil {
				t.Fatal(err)
			}
			if bytes.Equal(Bytes(a), want) {
				t.Fatal("the writer changed nothing")
			}
			checkFile(t, f, 4096, want)
			checkFile(t, f, 4096+int64(len(want)), wantHeap)
		})
	}
}

// TestFreeAndResnapshot: Free right after Snapshot, and a second
// Snapshot of changed memory while the first runs: each file holds the
// state at its own call.
func TestFreeAndResnapshot(t *testing.T) {
	a, err := Make[uint64](8 << 20 / 8)
	if err != nil {
		t.Fatal(err)
	}
	fill(a, 3)
	want1 := bytes.Clone(Bytes(a))
	f1, f2 := snapFile(t), snapFile(t)
	s1, err := Snapshot(f1, []Region{{Mem: Bytes(a)}})
	if err != nil {
		t.Fatal(err)
	}
	fill(a, 5)
	want2 := bytes.Clone(Bytes(a))
	s2, err := Snapshot(f2, []Region{{Mem: Bytes(a)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := Free(a); err != nil {
		t.Fatal(err)
	}
	// Reuse the address range, most likely: the snapshots must not see it.
	b, err := Make[uint64](8 << 20 / 8)
	if err != nil {
		t.Fatal(err)
	}
	defer Free(b)
	fill(b, 11)
	for _, s := range []*Snap{s1, s2} {
		if err := s.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	checkFile(t, f1, 0, want1)
	checkFile(t, f2, 0, want2)
}

func TestSnapshotErrors(t *testing.T) {
	a, err := Make[byte](1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	defer Free(a)
	t.Run("disabled", func(t *testing.T) {
		t.Setenv(EnvDisable, "off")
		if _, err := Snapshot(snapFile(t), []Region{{Mem: a}}); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Snapshot with %s=off: %v, want ErrUnavailable", EnvDisable, err)
		}
	})
	t.Run("read-only file", func(t *testing.T) {
		f := snapFile(t)
		ro, err := os.Open(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		defer ro.Close()
		s, err := Snapshot(ro, []Region{{Mem: a}})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Wait(); !errors.Is(err, syscall.EBADF) || !strings.Contains(err.Error(), f.Name()) {
			t.Fatalf("snapshot into a read-only file: %v, want EBADF naming %s", err, f.Name())
		}
	})
	t.Run("negative offset", func(t *testing.T) {
		if _, err := Snapshot(snapFile(t), []Region{{Mem: a, Off: -1}}); err == nil {
			t.Fatal("negative offset accepted")
		}
	})
}

// TestExitDuringSnapshot: a process that exits while its snapshot writer
// is still running (here: stopped) leaves no writer behind.
func TestExitDuringSnapshot(t *testing.T) {
	if os.Getenv("COW_TEST_EXIT") != "" {
		exitHelper()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestExitDuringSnapshot$")
	cmd.Env = append(os.Environ(), "COW_TEST_EXIT="+filepath.Join(t.TempDir(), "snap"))
	// A writer left behind would hold the output pipe: do not wait for
	// it forever.
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	var pid int
	for _, l := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(l, "writer "); ok {
			pid, _ = strconv.Atoi(v)
		}
	}
	if pid == 0 {
		t.Fatalf("helper printed no writer pid:\n%s", out)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		// Gone, or a zombie waiting for its new parent to reap it.
		if err != nil || strings.Contains(string(st), ") Z ") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("snapshot writer %d outlived its process: %s", pid, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func exitHelper() {
	a, err := Make[uint64](4 << 20)
	if err != nil {
		panic(err)
	}
	fill(a, 1)
	f, err := os.Create(os.Getenv("COW_TEST_EXIT"))
	if err != nil {
		panic(err)
	}
	// Stopped, the writer cannot finish before this process exits. Not
	// before it is set up (PR_SET_PDEATHSIG, then its descriptors closed:
	// one left): stopped before it, it would outlive this process
	// stopped, holding the test's output pipe.
	s := caught(1, func() (*Snap, error) { return Snapshot(f, []Region{{Mem: Bytes(a)}}) })
	fmt.Printf("writer %d\n", s.pid)
	os.Exit(0)
}

// stopWhenSetUp stops writer pid (SIGSTOP) once it has closed all but
// fds descriptors, that is, once it is set up (helper processes: panics).
// It reports false when the writer finished first (on a busy machine this
// process may not run for the tens of ms a writer needs): callers snapshot
// again.
func stopWhenSetUp(pid, fds int) bool {
	for {
		ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err != nil {
			return false
		}
		if len(ents) == fds {
			break
		}
		time.Sleep(time.Millisecond)
	}
	syscall.Kill(pid, syscall.SIGSTOP)
	return true
}

// caught runs snap until stopWhenSetUp catches its writer set up (fds
// descriptors left), a few times at most (helper processes: panics).
func caught(fds int, snap func() (*Snap, error)) *Snap {
	for try := 0; try < 20; try++ {
		s, err := snap()
		if err != nil {
			panic(err)
		}
		if stopWhenSetUp(s.pid, fds) {
			return s
		}
		s.Wait()
	}
	panic("no snapshot writer caught set up in 20 tries")
}

func BenchmarkSnapshot(b *testing.B) {
	a, err := Make[uint64](64 << 20 / 8)
	if err != nil {
		b.Fatal(err)
	}
	defer Free(a)
	fill(a, 1)
	f, err := os.Create(filepath.Join(b.TempDir(), "snap"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	b.SetBytes(int64(len(a) * 8))
	for b.Loop() {
		s, err := Snapshot(f, []Region{{Mem: Bytes(a)}})
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Wait(); err != nil {
			b.Fatal(err)
		}
	}
}

func TestSnapshotOverlapRefused(t *testing.T) {
	a, err := Make[byte](1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	defer Free(a)
	if _, err := Snapshot(snapFile(t), []Region{{Mem: a[:100]}, {Mem: a[50:200], Off: 100}}); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "overlap") {
		t.Fatalf("overlapping regions: %v, want refused", err)
	}
}

// TestWriterHoldsOnlyItsFile: the writer closes every descriptor but the
// file's, so that a pipe or socket this process closes is closed for
// its peer at once, not when the writer exits.
func TestWriterHoldsOnlyItsFile(t *testing.T) {
	a, err := Make[uint64](256 << 20 / 8)
	if err != nil {
		t.Fatal(err)
	}
	defer Free(a)
	fill(a, 1)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	f := snapFile(t)
	s, err := Snapshot(f, []Region{{Mem: Bytes(a)}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Wait()
	// Keep the writer from finishing while it is looked at.
	syscall.Kill(s.pid, syscall.SIGSTOP)
	defer syscall.Kill(s.pid, syscall.SIGCONT)
	w.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", s.pid))
		if err != nil {
			t.Fatalf("writer %d ended before it was seen holding only its file: %v", s.pid, err)
		}
		var fds []string
		for _, e := range ents {
			fds = append(fds, e.Name())
		}
		if len(fds) == 1 && fds[0] == strconv.Itoa(int(f.Fd())) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("writer holds descriptors %v, want only %d", fds, f.Fd())
		}
		// Stopped right after the fork, before it closed them: let it
		// run a little.
		syscall.Kill(s.pid, syscall.SIGCONT)
		time.Sleep(time.Millisecond)
		syscall.Kill(s.pid, syscall.SIGSTOP)
	}
	r.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := r.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("read from a pipe whose write end this process closed: %d, %v; want EOF while the writer lives", n, err)
	}
}

// A held writer (Options.Hold) writes nothing before Release, and then
// the memory as it was at the call; Wait releases a held writer itself.
func TestHeldWriter(t *testing.T) {
	buf := make([]byte, 3<<20+5) // Go heap
	for i := range buf {
		buf[i] = byte(i*13 + i>>12)
	}
	want := bytes.Clone(buf)
	f := snapFile(t)
	c := snapFile(t)
	c.WriteString("..")
	s, err := SnapshotWith(f, []Region{{Mem: buf, Off: 7}}, Options{Hold: true, CommitFile: c, Commit: Region{Mem: []byte("C"), Off: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Wait()
	// Set up: its file, the commit file and the gate, and nothing else.
	awaitHeldSetUp(t, s, 3, "file, commit file, gate")
	time.Sleep(20 * time.Millisecond)
	select {
	case <-s.Done():
		t.Fatalf("held writer done before Release: %v", s.Wait())
	default:
	}
	if st, _ := f.Stat(); st.Size() != 0 {
		t.Fatalf("held writer wrote %d bytes before Release", st.Size())
	}
	clear(buf)
	s.Release()
	s.Release() // idempotent
	<-s.Done()
	if err := s.Wait(); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(f.Name())
	if len(got) != 7+len(want) || !bytes.Equal(got[7:], want) {
		t.Fatalf("file has %d bytes, not the %d of the memory at the call", len(got), 7+len(want))
	}
	if b, _ := os.ReadFile(c.Name()); string(b) != ".C" {
		t.Fatalf("commit file %q", b)
	}

	// Wait without Release does not wait forever.
	s2, err := SnapshotWith(f, []Region{{Mem: want[:4096]}}, Options{Hold: true})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s2.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Wait of a held writer never returned")
	}
}

// awaitHeldSetUp waits until held writer s has closed all but fds
// descriptors (named by what), failing if it ends first: a held writer
// must not end before Release.
func awaitHeldSetUp(t *testing.T, s *Snap, fds int, what string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", s.pid))
		if err != nil {
			t.Fatalf("held writer %d ended before Release: %v", s.pid, err)
		}
		if len(ents) == fds {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("writer %d holds %d descriptors, want %d (%s)", s.pid, len(ents), fds, what)
		}
		time.Sleep(time.Millisecond)
	}
}

// A held writer waits even when its gate is descriptor 0 (this process
// has no standard input: the pipe takes the lowest free descriptor).
func TestHeldWriterGateOnFdZero(t *testing.T) {
	saved, err := unix.Dup(0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		unix.Dup2(saved, 0)
		unix.Close(saved)
	}()
	f := snapFile(t) // before 0 is free, so that the gate gets it
	unix.Close(0)
	s, err := SnapshotWith(f, []Region{{Mem: make([]byte, 4096)}}, Options{Hold: true})
	unix.Dup2(saved, 0) // before any check can fail
	if err != nil {
		t.Fatal(err)
	}
	defer s.Wait()
	awaitHeldSetUp(t, s, 2, "file, gate")
	if st, _ := f.Stat(); st.Size() != 0 {
		t.Fatalf("held writer wrote %d bytes before Release", st.Size())
	}
	if err := s.Wait(); err != nil {
		t.Fatal(err)
	}
	if st, _ := f.Stat(); st.Size() != 4096 {
		t.Fatalf("file has %d bytes after Wait, want 4096", st.Size())
	}
}
