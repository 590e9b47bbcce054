package proxy

import (
	"bytes"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// A rank that keeps its output pipe full gets a larger pipe and larger
// reads (fewer frames, each with the same fixed cost); everything it wrote
// arrives, in order.
func TestRelayGrowsBusyPipe(t *testing.T) {
	for _, tc := range []struct {
		name     string
		size     int
		wantPipe int // pipe size at the end, at least
	}{
		{"a few bytes", 10, relayChunk},
		{"half a pipe", relayChunk / 2, relayBulk},
		{"a pipe's worth", relayChunk, relayBulk},
		{"megabytes", 3 << 20, relayBulk},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rd, wr, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer rd.Close()
			in := make([]byte, tc.size)
			for i := range in {
				in[i] = byte(i*7 + i/251)
			}
			// The first pipe's worth is there before the first read (so
			// that read finds the pipe full, whatever the scheduling).
			first := min(len(in), relayChunk)
			if _, err := wr.Write(in[:first]); err != nil {
				t.Fatal(err)
			}
			go func() { wr.Write(in[first:]); wr.Close() }()
			var got []byte
			relayPipe(rd, func(b []byte) error { got = append(got, b...); return nil })
			if !bytes.Equal(got, in) {
				t.Fatalf("relayed %d bytes, not the %d written", len(got), len(in))
			}
			sc, err := rd.SyscallConn()
			if err != nil {
				t.Fatal(err)
			}
			var n int
			sc.Control(func(fd uintptr) { n, err = unix.FcntlInt(fd, unix.F_GETPIPE_SZ, 0) })
			if err != nil || n < tc.wantPipe {
				t.Fatalf("pipe holds %d bytes (%v), want at least %d", n, err, tc.wantPipe)
			}
		})
	}
}
