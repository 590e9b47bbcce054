package mpiexec

import (
	"bytes"
	"strings"
	"testing"
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
