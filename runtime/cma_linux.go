//go:build linux

package mpi

import (
	"errors"
	"io"
	"unsafe"

	"golang.org/x/sys/unix"
)

// cmaSupported: Linux has process_vm_readv (cross-memory attach).
const cmaSupported = true

// cmaChunk bounds one process_vm_readv call, so a huge message is read in
// steps (the kernel may also return short counts on its own).
const cmaChunk = 256 << 20

// cmaRead copies len(dst) bytes at addr in process pid straight into dst:
// the one copy of a same-host rendezvous.
func cmaRead(pid int, addr uint64, dst []byte) error {
	return cmaCopy(pid, addr, dst, unix.ProcessVMReadv)
}

// cmaWrite copies src into process pid at addr: the sender's half of a
// split rendezvous (see splitRecv).
func cmaWrite(pid int, addr uint64, src []byte) error {
	return cmaCopy(pid, addr, src, unix.ProcessVMWritev)
}

func cmaCopy(pid int, addr uint64, b []byte, op func(int, []unix.Iovec, []unix.RemoteIovec, uint) (int, error)) error {
	for off := 0; off < len(b); {
		k := min(len(b)-off, cmaChunk)
		local := []unix.Iovec{{Base: &b[off]}}
		local[0].SetLen(k)
		remote := []unix.RemoteIovec{{Base: uintptr(addr) + uintptr(off), Len: k}}
		n, err := op(pid, local, remote, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if n <= 0 {
			return io.ErrUnexpectedEOF
		}
		off += n
	}
	return nil
}

// bufAddr is the address of b's first byte, for a peer's process_vm_readv.
// Go's heap does not move objects, and the sender keeps b referenced (in
// peer.sends) until the receiver's FIN, so the address stays valid.
func bufAddr(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

// allowPeerRead lets same-user processes read this one's memory even under
// Yama ptrace_scope 1 (where only ancestors may): the ranks of a job are
// siblings. Failure only means CMA may fall back to streaming.
func allowPeerRead() { _ = unix.Prctl(unix.PR_SET_PTRACER, ^uintptr(0), 0, 0, 0) }
