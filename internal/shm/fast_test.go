//go:build linux

package shm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
)

// TestFastPathBoundaries sends frames around the sizes and ring positions
// where send and receive switch between their loop-free path (a short
// frame, all there, not wrapping) and put/take: every size at every
// 8-aligned ring offset, received by Recv, RecvSplit and the exclusive
// receive, whole and truncated.
func TestFastPathBoundaries(t *testing.T) {
	const ring = 16 << 10
	sizes := []int{0, 1, 7, 8, 9, 31, 32, 33, 40, fastFrame - 16, fastFrame - 9, fastFrame - 8, fastFrame - 7, fastFrame, fastFrame + 1, 3 * fastFrame}
	recvs := []struct {
		name  string
		hdr   int  // envelope length
		trunc bool // receive into a buffer one byte short
	}{
		{"Recv", 0, false},
		{"RecvTrunc", 0, true},
		{"Split", 32, false},
		{"SplitTrunc", 32, true},
		{"Exclusive", 32, false},
	}
	for _, rc := range recvs {
		t.Run(rc.name, func(t *testing.T) {
			a, b := pair(t, &Options{RingSize: ring})
			ctx := context.Background()
			seq := byte(0)
			for _, size := range sizes {
				// Shift the ring position by 8 bytes per round, so the
				// frame starts at every offset and wraps every way.
				for round := 0; round < ring/8+2; round += max(1, size/64) {
					seq++
					msg := bytes.Repeat([]byte{seq}, size)
					for i := range msg {
						msg[i] += byte(i)
					}
					hdrPart := msg[:min(size, rc.hdr)]
					if err := a.Send(ctx, hdrPart, msg[len(hdrPart):]); err != nil {
						t.Fatal(err)
					}
					if err := checkRecv(ctx, b, rc.name == "Exclusive", rc.hdr, rc.trunc, msg); err != nil {
						t.Fatalf("size %d round %d: %v", size, round, err)
					}
					// A filler frame moves the next one 8 bytes on.
					if err := a.Send(ctx, nil, nil); err != nil {
						t.Fatal(err)
					}
					if n, err := b.Recv(ctx, nil); n != 0 || err != nil {
						t.Fatalf("filler: %d, %v", n, err)
					}
				}
			}
		})
	}
}

// checkRecv receives one message sent as msg and checks it.
func checkRecv(ctx context.Context, c *Chan, exclusive bool, hdrLen int, trunc bool, msg []byte) error {
	var hdr []byte
	if hdrLen > 0 {
		hdr = make([]byte, hdrLen)
	}
	var got []byte
	dst := func(n int) []byte {
		if trunc && n > 0 {
			n--
		}
		got = make([]byte, n)
		return got
	}
	var n int
	var err error
	switch {
	case exclusive:
		n, err = c.RecvSplitIdleExclusive(ctx, nil, 0, hdr, dst)
	case hdr != nil:
		n, err = c.RecvSplit(ctx, hdr, dst)
	default:
		n, err = c.Recv(ctx, dst)
	}
	if len(msg) < hdrLen {
		if !errors.Is(err, ErrCorrupt) || n != len(msg) {
			return fmt.Errorf("message shorter than its envelope: %d, %v", n, err)
		}
		return nil
	}
	body := msg[hdrLen:]
	if trunc && len(body) > 0 {
		if !errors.Is(err, ErrTruncated) {
			return fmt.Errorf("got %v, want ErrTruncated", err)
		}
	} else if err != nil {
		return err
	}
	if n != len(body) {
		return fmt.Errorf("length %d, want %d", n, len(body))
	}
	if !bytes.Equal(hdr, msg[:hdrLen]) {
		return fmt.Errorf("envelope differs")
	}
	if !bytes.Equal(got, body[:len(got)]) {
		return fmt.Errorf("body differs")
	}
	return nil
}
