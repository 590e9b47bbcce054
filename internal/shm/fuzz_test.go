//go:build linux

package shm

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"unsafe"
)

const fuzzRing = MinRingSize

// image returns an initialised, 8-aligned file image (in ordinary memory:
// the parsing code does not care) in the state the creator leaves it.
func image() []byte {
	words := make([]uint64, (hdrSize+2*fuzzRing)/8)
	mem := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(words)*8)
	binary.NativeEndian.PutUint64(mem[offMagic:], fileMagic)
	binary.NativeEndian.PutUint32(mem[offVersion:], fileVersion)
	binary.NativeEndian.PutUint32(mem[offState:], stateReady)
	binary.NativeEndian.PutUint64(mem[offRingSize:], fuzzRing)
	return mem
}

// frames encodes messages into a ring's data area from position 0.
func frames(msgs ...string) (data []byte, head uint64) {
	data = make([]byte, fuzzRing)
	for _, m := range msgs {
		binary.LittleEndian.PutUint64(data[head%fuzzRing:], frameTag<<48|uint64(len(m)))
		head += 8
		for i := range len(m) {
			data[(head+uint64(i))%fuzzRing] = m[i]
		}
		head += uint64(len(m)+7) &^ 7
	}
	return data, head
}

// exercise receives and sends on an attached channel without ever blocking
// (the context is already cancelled: calls only finish what needs no wait).
func exercise(t *testing.T, c *Chan) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ok := func(err error) {
		if err != nil && !errors.Is(err, ErrCorrupt) && !errors.Is(err, context.Canceled) &&
			!errors.Is(err, ErrTruncated) && !errors.Is(err, ErrClosed) {
			t.Fatalf("unexpected error %v", err)
		}
	}
	for range 64 {
		n, err := c.Recv(ctx, func(n int) []byte {
			if n < 0 {
				t.Fatalf("negative length %d", n)
			}
			return make([]byte, min(n, 3*fuzzRing))
		})
		ok(err)
		if n < 0 || uint64(n) > MaxMessage {
			t.Fatalf("length %d", n)
		}
		if err != nil && !errors.Is(err, ErrTruncated) {
			break
		}
	}
	for _, size := range []int{0, 5, 100, fuzzRing} {
		err := c.Send(ctx, []byte("hdr"), make([]byte, size))
		ok(err)
		if err != nil {
			break
		}
	}
	c.markClosed() // no munmap: the image is ordinary memory
}

// FuzzHeader: the opener must reject or accept any header page without
// panicking, and a channel it accepts must not misbehave.
func FuzzHeader(f *testing.F) {
	f.Add(image()[:64])
	bad := image()[:64]
	bad[offRingSize] = 1
	f.Add(bad)
	abandoned := image()[:64]
	abandoned[offState] = stateAbandoned
	f.Add(abandoned)
	f.Fuzz(func(t *testing.T, hdr []byte) {
		mem := image()
		copy(mem, hdr[:min(len(hdr), hdrSize)])
		c, err := attach(mem, Options{Spin: -1, Poll: DefaultPoll})
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrClosed) {
				t.Fatalf("error %v wraps neither ErrCorrupt nor ErrClosed", err)
			}
			return
		}
		exercise(t, c)
	})
}

// FuzzRing: arbitrary counters and ring contents (the peer's side of the
// file) must never make a receive or send panic or touch memory outside the
// ring; they may only fail with ErrCorrupt (or wait).
func FuzzRing(f *testing.F) {
	data, head := frames("hello", "", "a message of some length", string(make([]byte, 3000)))
	f.Add(head, uint64(0), uint64(0), uint64(0), data)
	data, _ = frames("x", "wrapped around the end of the ring")
	f.Add(uint64(fuzzRing+48), uint64(fuzzRing), uint64(8), uint64(8), data)
	data, head = frames(string(make([]byte, 2*fuzzRing)))
	f.Add(head, uint64(0), uint64(1<<40), uint64(1<<40-100), data)
	f.Fuzz(func(t *testing.T, rxHead, rxTail, txHead, txTail uint64, data []byte) {
		mem := image()
		// The opener (side 1) receives on ring 0 and sends on ring 1.
		rx0, tx1 := offRings, offRings+ringStride
		binary.NativeEndian.PutUint64(mem[rx0+rcHead:], rxHead)
		binary.NativeEndian.PutUint64(mem[rx0+rcTail:], rxTail)
		binary.NativeEndian.PutUint64(mem[tx1+rcHead:], txHead)
		binary.NativeEndian.PutUint64(mem[tx1+rcTail:], txTail)
		copy(mem[hdrSize:hdrSize+fuzzRing], data)
		c, err := attach(mem, Options{Spin: -1, Poll: DefaultPoll})
		if err != nil {
			t.Fatal(err)
		}
		exercise(t, c)
	})
}

func TestDecodeFrame(t *testing.T) {
	if n, err := decodeFrame(frameTag<<48 | 12345); n != 12345 || err != nil {
		t.Fatalf("%d, %v", n, err)
	}
	if _, err := decodeFrame(12345); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("untagged frame: %v", err)
	}
}
