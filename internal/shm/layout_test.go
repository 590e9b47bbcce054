//go:build linux

package shm

import (
	"testing"
	"unsafe"
)

// TestChanLayout checks that the sender's and the receiver's state in a
// Chan are at least 128 bytes (two cache lines, as the adjacent-line
// prefetcher fetches them) from each other and from the fields before and
// after them: a rank sends on one thread while its reader spins on the
// other ring on another, and a shared line cost the sender a cache miss
// per message.
func TestChanLayout(t *testing.T) {
	var c Chan
	type span struct {
		name       string
		start, end uintptr
	}
	field := func(name string, off, size uintptr) span { return span{name, off, off + size} }
	send := span{"send", unsafe.Offsetof(c.sendMu), unsafe.Offsetof(c.txErr) + unsafe.Sizeof(c.txErr)}
	recv := span{"recv", unsafe.Offsetof(c.recvMu), unsafe.Offsetof(c.rxSpin) + unsafe.Sizeof(c.rxSpin)}
	shared := field("closing", unsafe.Offsetof(c.closing), unsafe.Sizeof(c.closing))
	const gap = 128
	apart := func(a, b span) {
		t.Helper()
		if a.end+gap > b.start {
			t.Errorf("%s ends at %d, %s starts at %d: want %d bytes between them", a.name, a.end, b.name, b.start, gap)
		}
	}
	apart(shared, send)
	apart(send, recv)
	apart(recv, span{"end of Chan", unsafe.Sizeof(c), unsafe.Sizeof(c)})
	// The object before a Chan on the heap is at least gap bytes away
	// from send only if the fields before send take that much room.
	if send.start < gap {
		t.Errorf("send state starts at %d: the previous heap object may share its lines", send.start)
	}
}
