//go:build linux

package shm

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"
)

// TestSealDecidesVisibility: a frame is the consumer's once its seal (its
// position XOR the file's key) is in place, whatever else the slot holds
// and whatever head says; bytes that look like a frame but carry the seal
// of an earlier lap, a seal of a key drawn by another file, or none, are not
// taken, and the channel goes on once the real frame comes.
func TestSealDecidesVisibility(t *testing.T) {
	const ring = MinRingSize
	for _, tc := range []struct {
		name string
		seal func(pos, key uint64) uint64
	}{
		{"unsealed", func(pos, key uint64) uint64 { return 0 }},
		{"earlier lap", func(pos, key uint64) uint64 { return (pos - ring) ^ key }},
		{"other file", func(pos, key uint64) uint64 { return pos ^ (key ^ 1<<40) }},
		{"unkeyed", func(pos, key uint64) uint64 { return pos }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := pair(t, &Options{RingSize: ring, Spin: time.Microsecond, Poll: 10 * time.Millisecond})
			ctx := context.Background()
			// Move the position into the second lap, where stale frames
			// of the first lie.
			for range ring/32 + 3 {
				if err := a.Send(ctx, nil, []byte("lap one")); err != nil {
					t.Fatal(err)
				}
				if _, err := b.RecvBytes(ctx); err != nil {
					t.Fatal(err)
				}
			}
			// Forge a whole frame at the consumer's position, with the
			// case's seal, and a head that says it is there.
			r := &a.tx
			pos, off := r.pos, r.pos&r.mask
			f := r.data[off : off+frameSize(5)]
			binary.LittleEndian.PutUint64(f, frameTag<<48|5)
			copy(f[frameBytes:], "forge")
			binary.LittleEndian.PutUint64(f[8:], tc.seal(pos, r.key))
			r.head.Store(pos + uint64(len(f)))
			if b.Pending() || b.PendingExclusive() {
				t.Fatal("a frame without its seal is pending")
			}
			wctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
			_, err := b.RecvBytes(wctx)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("receive of an unsealed frame: %v", err)
			}
			// The real frame overwrites it and is received whole.
			if err := a.Send(ctx, []byte("re"), []byte("al")); err != nil {
				t.Fatal(err)
			}
			if m, err := b.RecvBytes(ctx); err != nil || string(m) != "real" {
				t.Fatalf("got %q, %v", m, err)
			}
		})
	}
}

// TestSealLast: the producer's frame becomes visible only by its seal,
// written after the header and body; a consumer waiting on it (asleep:
// no spin) is woken by the seal's store alone, head untouched.
func TestSealLast(t *testing.T) {
	a, b := pair(t, &Options{RingSize: MinRingSize, Spin: -1, Poll: 10 * time.Second})
	ctx := context.Background()
	got := make(chan string, 1)
	go func() {
		m, err := b.RecvBytes(ctx)
		if err != nil {
			got <- err.Error()
			return
		}
		got <- string(m)
	}()
	time.Sleep(20 * time.Millisecond) // let it sleep on the futex
	head := a.tx.head.Load()
	if err := a.Send(ctx, nil, []byte("sealed")); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		if m != "sealed" {
			t.Fatalf("got %q", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the seal did not wake the sleeping consumer")
	}
	if h := a.tx.head.Load(); h != head {
		t.Fatalf("a short frame moved head %d -> %d", head, h)
	}
}

// TestLongFrameFollowsHead: a frame longer than fastFrame is sealed at its
// first publication and its body follows head, chunk by chunk, between
// short frames that never store head (head lags behind them, which the
// consumer must not take for corruption).
func TestLongFrameFollowsHead(t *testing.T) {
	a, b := pair(t, &Options{RingSize: 64 << 10})
	ctx := context.Background()
	long := make([]byte, 3*publishChunk+5)
	for i := range long {
		long[i] = byte(i * 7)
	}
	done := make(chan error, 1)
	go func() {
		for i := range 20 {
			if err := a.Send(ctx, nil, []byte{byte(i)}); err != nil {
				done <- err
				return
			}
			if err := a.Send(ctx, []byte{byte(i)}, long); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	buf := make([]byte, len(long)+1)
	for i := range 20 {
		if m, err := b.RecvBytes(ctx); err != nil || len(m) != 1 || m[0] != byte(i) {
			t.Fatalf("short %d: %v, %v", i, m, err)
		}
		n, err := b.Recv(ctx, func(n int) []byte { return buf[:n] })
		if err != nil || n != len(buf) || buf[0] != byte(i) || string(buf[1:]) != string(long) {
			t.Fatalf("long %d: %d, %v", i, n, err)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
