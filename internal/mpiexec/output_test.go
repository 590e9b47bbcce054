package mpiexec

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestOutputReassemblesLines(t *testing.T) {
	var out, errw bytes.Buffer
	o := newOutput(&out, &errw, true)
	o.write(0, 1, []byte("hel"))
	o.write(1, 1, []byte("other line\nand a"))
	o.write(0, 1, []byte("lo\nwor"))
	o.write(0, 2, []byte("err\n"))
	o.flush(0)
	o.flush(1)
	want := "[1] other line\n[0] hello\n[0] wor\n[1] and a\n"
	if out.String() != want || errw.String() != "[0] err\n" {
		t.Fatalf("stdout %q stderr %q", out.String(), errw.String())
	}
}

func TestOutputWithoutPrefixIsByteExact(t *testing.T) {
	var out bytes.Buffer
	o := newOutput(&out, &out, false)
	in := []byte("a\x00b\nc\xff")
	o.write(3, 1, in[:4])
	o.write(3, 1, in[4:])
	o.flush(3)
	if !bytes.Equal(out.Bytes(), in) {
		t.Fatalf("got %q", out.Bytes())
	}
}

func TestOutputLongPartialLineFlows(t *testing.T) {
	var out bytes.Buffer
	o := newOutput(&out, &out, false)
	o.write(0, 1, []byte(strings.Repeat("x", maxPartial+10)))
	if out.Len() != maxPartial+10 {
		t.Fatalf("held back %d bytes", maxPartial+10-out.Len())
	}
}

type failWriter struct{ n int }

func (f *failWriter) Write(p []byte) (int, error) { f.n++; return 0, errors.New("disk full") }

func TestOutputWriteErrorReportedOnce(t *testing.T) {
	fw := &failWriter{}
	var errw bytes.Buffer
	o := newOutput(fw, &errw, false)
	var got []string
	o.onErr = func(fd byte, err error) { got = append(got, fmt.Sprint(fd, err)) }
	o.write(0, 1, []byte("a\n"))
	o.write(1, 1, []byte("b\n"))
	o.write(0, 2, []byte("fine\n"))
	o.flushAll()
	if len(got) != 1 || got[0] != "1 disk full" || fw.n != 1 || errw.String() != "fine\n" {
		t.Fatalf("reports %q, %d writes, stderr %q", got, fw.n, errw.String())
	}
}

// Without -l a partial line goes out at once and holds the stream: another
// rank's lines wait until it ends, or until it has kept them waiting for
// two ticks.
func TestOutputOpenLineHoldsStream(t *testing.T) {
	var out syncBuf
	o := newOutput(&out, &out, false)
	defer o.flushAll()
	o.write(0, 1, []byte("prompt> "))
	o.write(1, 1, []byte("other\n"))
	if out.String() != "prompt> " {
		t.Fatalf("got %q", out.String())
	}
	o.write(0, 1, []byte("answer\n"))
	if out.String() != "prompt> answer\nother\n" {
		t.Fatalf("got %q", out.String())
	}
	o.write(0, 1, []byte("slow"))
	o.write(1, 1, []byte("waits\n"))
	for deadline := time.Now().Add(10 * time.Second); out.String() != "prompt> answer\nother\nslowwaits\n"; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("an unfinished line held the stream forever: %q", out.String())
		}
	}
}

// An unfinished line that keeps coming holds the stream for many ticks (a
// long line on a loaded host); a stalled one is broken after two, and one
// that never ends after maxHeldTicks.
func TestOutputProgressingLineHoldsStream(t *testing.T) {
	for _, prepend := range []bool{false, true} {
		var out syncBuf
		o := newOutput(&out, &out, prepend)
		manual := func() { // the test ticks, not the timer
			o.mu.Lock()
			if o.timer != nil {
				o.timer.Stop()
			}
			o.timer = time.NewTimer(time.Hour)
			o.mu.Unlock()
		}
		o.write(0, 1, bytes.Repeat([]byte("a"), maxPartial))
		o.write(1, 1, []byte("other\n"))
		manual()
		for range 5 {
			o.tick()
			manual()
			o.write(0, 1, []byte("aaaa"))
			manual()
		}
		o.write(0, 1, []byte("\n"))
		o.flushAll()
		a := strings.Repeat("a", maxPartial+20)
		want := a + "\nother\n"
		if prepend {
			want = "[0] " + a + "\n[1] other\n"
		}
		if got := out.String(); got != want {
			t.Errorf("prepend %v: the line was split: got %q...%q", prepend, got[:min(len(got), 20)], got[max(0, len(got)-30):])
		}
		// A stalled line is still broken after two ticks.
		out = syncBuf{}
		o = newOutput(&out, &out, false)
		o.write(0, 1, []byte("stalled"))
		o.write(1, 1, []byte("other\n"))
		manual()
		o.tick()
		manual()
		o.tick()
		manual()
		if got := out.String(); got != "stalledother\n" {
			t.Errorf("a stalled line kept the stream: %q", got)
		}
		o.flushAll()
		// A line that keeps coming but never ends is broken after
		// maxHeldTicks.
		out = syncBuf{}
		o = newOutput(&out, &out, false)
		o.write(0, 1, []byte("bar"))
		o.write(1, 1, []byte("other\n"))
		manual()
		for range maxHeldTicks + 1 {
			o.tick()
			manual()
			o.write(0, 1, []byte("."))
			manual()
		}
		if got := out.String(); !strings.Contains(got, "other\n") {
			t.Errorf("a never-ending line kept the stream: %q", got)
		}
		o.flushAll()
	}
}

// With -l a partial line is written after a delay, prefixed, and the rest
// of it follows without a prefix.
func TestOutputPrefixedPartialAfterDelay(t *testing.T) {
	var out syncBuf
	o := newOutput(&out, &out, true)
	defer o.flushAll()
	o.write(2, 1, []byte("prompt> "))
	for deadline := time.Now().Add(10 * time.Second); out.String() != "[2] prompt> "; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("partial line not written: %q", out.String())
		}
	}
	o.write(2, 1, []byte("answer\nnext\n"))
	if out.String() != "[2] prompt> answer\n[2] next\n" {
		t.Fatalf("got %q", out.String())
	}
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A rank that exits while another rank's line is unfinished waits for that
// line to end: its exit is no reason to split the other's line.
func TestOutputExitDoesNotSplitAnotherLine(t *testing.T) {
	for _, prepend := range []bool{false, true} {
		var out bytes.Buffer
		o := newOutput(&out, &out, prepend)
		o.write(0, 1, bytes.Repeat([]byte("a"), maxPartial)) // forwarded at once, holds the stream
		o.write(1, 1, []byte("bbb\nbb"))
		o.flush(1)
		o.write(0, 1, []byte("aa\n"))
		o.flush(0)
		o.flushAll()
		a := strings.Repeat("a", maxPartial+2)
		want := a + "\nbbb\nbb"
		if prepend {
			want = "[0] " + a + "\n[1] bbb\n[1] bb\n"
		}
		if out.String() != want {
			got := out.String()
			t.Errorf("prepend %v: got %q...%q", prepend, got[:min(len(got), 20)], got[max(0, len(got)-20):])
		}
	}
}

// A rank printing a lot costs no allocation per chunk: a copy of every
// chunk made gompiexec's garbage collector run every few milliseconds
// (222 MB of output, 90 collections).
func TestOutputChunksDoNotAllocate(t *testing.T) {
	lines := bytes.Repeat([]byte("0123456789abcdef\n"), 240) // 4080 bytes, whole lines
	odd := bytes.Repeat([]byte("0123456789abcdef\n"), 241)[:4096]
	for _, tc := range []struct {
		name    string
		prepend bool
		ranks   int
		chunk   []byte
	}{
		{"one rank, whole lines", false, 1, lines},
		{"one rank, lines split across chunks", false, 1, odd},
		{"two ranks, whole lines", false, 2, lines},
		{"two ranks, lines split across chunks", false, 2, odd},
		{"-l, one rank, whole lines", true, 1, lines},
		{"-l, one rank, lines split across chunks", true, 1, odd},
		{"-l, two ranks, whole lines", true, 2, lines},
		{"-l, two ranks, lines split across chunks", true, 2, odd},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := newOutput(io.Discard, io.Discard, tc.prepend)
			o.closed = true // no tick: this test is about the write path alone
			send := func() {
				for r := 0; r < tc.ranks; r++ {
					o.write(r, 1, tc.chunk)
				}
			}
			for i := 0; i < 10; i++ {
				send() // buffers reach their steady size
			}
			if n := testing.AllocsPerRun(100, send); n > 0 {
				t.Fatalf("%.1f allocations per chunk round", n)
			}
		})
	}
}
