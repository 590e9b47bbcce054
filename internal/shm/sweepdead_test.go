//go:build linux

package shm

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// A rendezvous file whose creator died is swept; one whose creator lives,
// or another user's, is not.
func TestSweepDead(t *testing.T) {
	dir := t.TempDir()
	// Live: this process waits as the creator in the background.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go Connect(ctx, "live.k", 0, 1, &Options{Dir: dir})
	live := filepath.Join(dir, Name("live.k", 0, 1))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if fi, err := os.Stat(live); err == nil && fi.Size() > hdrSize {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("live file never appeared")
		}
	}
	// Dead: a copy of the header naming a process that has exited.
	cmd := exec.Command("/bin/true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // let the live creator finish its header
	hdr := make([]byte, hdrSize)
	f, _ := os.Open(live)
	f.ReadAt(hdr, 0)
	f.Close()
	u32(hdr, offPid).Store(uint32(cmd.Process.Pid))
	u64(hdr, offStart).Store(0)
	dead := filepath.Join(dir, Name("dead.k", 0, 1))
	os.WriteFile(dead, hdr, 0o600)
	// Unfinished: empty, new and old.
	fresh := filepath.Join(dir, Name("fresh.k", 0, 1))
	os.WriteFile(fresh, nil, 0o600)
	stale := filepath.Join(dir, Name("stale.k", 0, 1))
	os.WriteFile(stale, nil, 0o600)
	long := time.Now().Add(-time.Hour)
	os.Chtimes(stale, long, long)
	other := filepath.Join(dir, "unrelated")
	os.WriteFile(other, nil, 0o600)

	n, err := SweepDead(dir, time.Minute)
	if err != nil || n != 2 {
		t.Fatalf("swept %d, %v; want 2", n, err)
	}
	for _, p := range []string{live, fresh, other} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s removed", filepath.Base(p))
		}
	}
	for _, p := range []string{dead, stale} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s kept", filepath.Base(p))
		}
	}
	if os.Getuid() == 0 {
		os.WriteFile(dead, hdr, 0o600)
		os.Chown(dead, 65534, 65534)
		if n, _ := SweepDead(dir, time.Minute); n != 0 {
			t.Error("another user's file was swept")
		}
	}
}

// Only regular files are swept: a FIFO, a directory or a symlink named like
// a rendezvous file (old enough to count as unfinished) stays, and the
// FIFO's open does not block the sweep.
func TestSweepDeadSkipsNonRegular(t *testing.T) {
	dir := t.TempDir()
	long := time.Now().Add(-time.Hour)
	stale := filepath.Join(dir, Name("stale.k", 0, 1))
	os.WriteFile(stale, nil, 0o600)
	target := filepath.Join(dir, "target")
	os.WriteFile(target, nil, 0o600)
	fifo := filepath.Join(dir, Name("fifo.k", 0, 1))
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, Name("dir.k", 0, 1))
	os.Mkdir(sub, 0o700)
	link := filepath.Join(dir, Name("link.k", 0, 1))
	os.Symlink(target, link)
	for _, p := range []string{stale, target, fifo, sub} {
		os.Chtimes(p, long, long)
	}
	done := make(chan struct{})
	var n int
	var err error
	go func() { n, err = SweepDead(dir, time.Minute); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("SweepDead blocked")
	}
	if err != nil || n != 1 {
		t.Fatalf("swept %d, %v; want 1 (the stale regular file)", n, err)
	}
	if _, err := os.Stat(stale); err == nil {
		t.Error("stale file kept")
	}
	for _, p := range []string{fifo, sub, link, target} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s removed", filepath.Base(p))
		}
	}
}

// BenchmarkSweeps is a proxy's two sweeps (SweepDead at a job's start,
// SweepJob at its end) over a directory of 300 other files, as a shared
// host's /dev/shm may hold.
func BenchmarkSweeps(b *testing.B) {
	dir := b.TempDir()
	for i := 0; i < 300; i++ {
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("other-%d", i)), nil, 0o600)
	}
	for b.Loop() {
		SweepDead(dir, time.Minute)
		SweepJob(dir, "job")
	}
}
