//go:build linux

package shm

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
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
