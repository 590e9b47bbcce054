// Command naive is what a program does when it shares a file between hosts
// without MPI-IO's rules: each host maps the file (or writes it) and changes
// its own bytes, trusting the file system to merge them. test/cluster's
// sshfs tests run it on different hosts of a shared mount to show how that
// goes wrong on a file system whose clients cache.
//
//	naive create FILE SIZE      a file of SIZE zero bytes (fsynced)
//	naive mmap FILE OFF LEN     map FILE shared, store pattern bytes at
//	                            [OFF, OFF+LEN), msync, unmap
//	naive write FILE OFF LEN    the same with pwrite and fsync
//	naive check FILE SIZE       read FILE; exit 1 naming the first wrong
//	                            offset and how many bytes are wrong
//
// The byte at file offset o is Want(o) once both halves are written.
package main

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// Want is the pattern byte of file offset o (never zero, so unwritten
// bytes show).
func Want(o int64) byte { return byte(o*7+o>>12) | 1 }

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "naive:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	usage := fmt.Errorf("usage: naive create|check FILE SIZE | naive mmap|write FILE OFF LEN")
	if len(args) < 3 {
		return usage
	}
	nums := make([]int64, len(args)-2)
	for i, s := range args[2:] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("%q: want a non-negative integer", s)
		}
		nums[i] = n
	}
	path := args[1]
	switch {
	case args[0] == "create" && len(nums) == 1:
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		if _, err := f.Write(make([]byte, nums[0])); err != nil {
			f.Close()
			return err
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	case args[0] == "check" && len(nums) == 1:
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if int64(len(b)) != nums[0] {
			return fmt.Errorf("%s: %d bytes, want %d", path, len(b), nums[0])
		}
		first, wrong := int64(-1), 0
		for o, c := range b {
			if c != Want(int64(o)) {
				if first < 0 {
					first = int64(o)
				}
				wrong++
			}
		}
		if wrong > 0 {
			return fmt.Errorf("%s: %d of %d bytes wrong, the first at offset %d (%d, want %d)", path, wrong, len(b), first, b[first], Want(first))
		}
		fmt.Printf("naive: %s: all %d bytes right\n", path, len(b))
		return nil
	case (args[0] == "mmap" || args[0] == "write") && len(nums) == 2:
		off, n := nums[0], nums[1]
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		buf := make([]byte, n)
		for i := range buf {
			buf[i] = Want(off + int64(i))
		}
		if args[0] == "write" {
			if _, err := f.WriteAt(buf, off); err != nil {
				return err
			}
			return f.Sync()
		}
		st, err := f.Stat()
		if err != nil {
			return err
		}
		if off+n > st.Size() {
			return fmt.Errorf("%s: [%d, %d) is past the end (%d bytes)", path, off, off+n, st.Size())
		}
		m, err := syscall.Mmap(int(f.Fd()), 0, int(st.Size()), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
		if err != nil {
			return fmt.Errorf("mmap %s: %w", path, err)
		}
		copy(m[off:], buf)
		const msSync = 4 // MS_SYNC
		if _, _, e := syscall.Syscall(syscall.SYS_MSYNC, uintptr(unsafePointer(m)), uintptr(len(m)), msSync); e != 0 {
			syscall.Munmap(m)
			return fmt.Errorf("msync %s: %w", path, e)
		}
		return syscall.Munmap(m)
	}
	return usage
}
