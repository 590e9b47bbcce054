package mpiio

import (
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

func TestCoherentFS(t *testing.T) {
	for _, tc := range []struct {
		name string
		typ  int64
		want bool
	}{
		{"ext4", unix.EXT4_SUPER_MAGIC, true},
		{"xfs", unix.XFS_SUPER_MAGIC, true},
		{"tmpfs", unix.TMPFS_MAGIC, true},
		{"overlay", unix.OVERLAYFS_SUPER_MAGIC, true},
		{"fuse", fuseMagic, false},
		{"nfs", unix.NFS_SUPER_MAGIC, false},
		{"cifs", unix.CIFS_SUPER_MAGIC, false},
		{"unknown", 0x12345678, false},
	} {
		if got := coherentFS(tc.typ); got != tc.want {
			t.Errorf("%s: coherent %v, want %v", tc.name, got, tc.want)
		}
	}
}

// On a local file system, dropCache keeps the file's pages (later reads
// come from memory, as any local reader's); elsewhere it drops them.
func TestDropCacheKeepsLocalPages(t *testing.T) {
	fd, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	const n = 1 << 20
	if _, err := fd.Write(make([]byte, n)); err != nil {
		t.Fatal(err)
	}
	if err := fd.Sync(); err != nil { // clean pages: droppable
		t.Fatal(err)
	}
	dropCache(fd)
	m, err := unix.Mmap(int(fd.Fd()), 0, n, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	vec := make([]byte, n/os.Getpagesize())
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), n, uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatal(e)
	}
	resident := 0
	for _, v := range vec {
		resident += int(v & 1)
	}
	var st unix.Statfs_t
	unix.Fstatfs(int(fd.Fd()), &st)
	if coherentFS(int64(st.Type)) && resident != len(vec) {
		t.Fatalf("local file system %#x: %d of %d pages left in the page cache", st.Type, resident, len(vec))
	}
	if !coherentFS(int64(st.Type)) && resident == len(vec) {
		t.Fatalf("file system %#x: pages not dropped", st.Type)
	}
}
