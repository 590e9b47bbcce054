package testkit

import (
	"fmt"
	"os"
	"syscall"
	"testing"
)

// SmallTmpfs mounts a tmpfs of size bytes for the test, to fill a file
// system on purpose. Root only: CI runs as root, where failing to mount is
// a failure, not a skip.
func SmallTmpfs(t *testing.T, size int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("a full file system needs a tmpfs mount, which needs root")
		}
		t.Skip("needs root to mount a small tmpfs")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		t.Fatalf("mount a %d-byte tmpfs on %s: %v", size, dir, err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}
