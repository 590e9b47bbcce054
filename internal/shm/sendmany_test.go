//go:build linux

package shm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"
)

// SendMany delivers its messages in order, with Sends before and after
// it, through a small ring where windows wrap, fill it and include
// messages longer than the fast path's (and than the ring); on a closed
// channel it sends nothing and says so.
func TestSendMany(t *testing.T) {
	a, b := pair(t, &Options{RingSize: 4096})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const windows, W = 300, 37
	size := func(i int) int {
		switch i % 101 {
		case 50:
			return 5000 // longer than fastFrame and the ring: streams
		case 51:
			return 2000
		}
		return i % 61
	}
	errc := make(chan error, 1)
	go func() {
		var hs [W][8]byte
		ps := make([][]byte, W)
		seq := 0
		for range windows {
			base := seq
			for w := range W {
				binary.LittleEndian.PutUint64(hs[w][:], uint64(base+w))
				ps[w] = bytes.Repeat([]byte{byte(base + w)}, size(base+w))
			}
			n, err := a.SendMany(ctx, W, func(i int) ([]byte, []byte) { return hs[i][:], ps[i] })
			if err != nil || n != W {
				errc <- fmt.Errorf("SendMany: %d, %v", n, err)
				return
			}
			seq += W
			var h [8]byte // and one plain Send between windows
			binary.LittleEndian.PutUint64(h[:], uint64(seq))
			if err := a.Send(ctx, h[:], bytes.Repeat([]byte{byte(seq)}, size(seq))); err != nil {
				errc <- err
				return
			}
			seq++
		}
		errc <- nil
	}()
	buf := make([]byte, 8+5000)
	for i := range windows * (W + 1) {
		m, err := b.Recv(ctx, func(n int) []byte { return buf[:n] })
		if err != nil {
			t.Fatal(err)
		}
		if m != 8+size(i) || binary.LittleEndian.Uint64(buf) != uint64(i) {
			t.Fatalf("message %d: len %d seq %d", i, m, binary.LittleEndian.Uint64(buf))
		}
		for _, c := range buf[8:m] {
			if c != byte(i) {
				t.Fatalf("message %d: bad payload", i)
			}
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	b.Close()
	n, err := a.SendMany(ctx, 3, func(int) ([]byte, []byte) { return []byte("x"), nil })
	if n != 0 || !errors.Is(err, ErrClosed) {
		t.Fatalf("SendMany to a closed peer: %d, %v", n, err)
	}
}

// BenchmarkWindowMin times a window of 64 8-byte messages (32-byte
// envelopes) sent while the consumer, a goroutine of this process, spins
// on the ring taking them: Send by Send, or one SendMany. Reported is the
// fastest window per message (steady on a busy host, unlike the mean),
// the sender's side of gompi-bench mr and mrp.
func BenchmarkWindowMin(b *testing.B) {
	for _, many := range []bool{false, true} {
		name := "Send"
		if many {
			name = "SendMany"
		}
		b.Run(name, func(b *testing.B) {
			a, c := pair(b, &Options{RingSize: DefaultRingSize})
			ctx := context.Background()
			const W = 64
			done := make(chan error, 1)
			windows := max(1, b.N/W)
			go func() {
				buf := make([]byte, 64)
				into := func(n int) []byte { return buf[:n] }
				for range windows * W {
					if _, err := c.RecvSplitIdleExclusive(ctx, nil, time.Second, nil, into); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			var env [32]byte
			payload := make([]byte, 8)
			frame := func(int) ([]byte, []byte) { return env[:], payload }
			best := time.Hour
			for range windows {
				t0 := time.Now()
				if many {
					if _, err := a.SendMany(ctx, W, frame); err != nil {
						b.Fatal(err)
					}
				} else {
					for range W {
						if err := a.Send(ctx, env[:], payload); err != nil {
							b.Fatal(err)
						}
					}
				}
				best = min(best, time.Since(t0))
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(best.Nanoseconds())/W, "min-ns/msg")
		})
	}
}
