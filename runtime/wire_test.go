package mpi

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"
	"time"
)

func TestHeaderRoundTrip(t *testing.T) {
	for _, h := range []header{
		{Type: frameEager, Ctx: 2, Src: 3, Tag: 4, Len: 100},
		{Type: frameRTS, Ctx: 1<<32 - 2, Src: 1<<31 - 1, Tag: 1<<31 - 1, Len: 1 << 30, ID: 1<<64 - 1},
		{Type: frameCTS, Ctx: 5, Src: 0, ID: 9},
		{Type: frameData, Len: 12345, ID: 9},
		{Type: frameBye},
	} {
		var b [headerSize]byte
		h.encode(b[:])
		got, err := decodeHeader(b[:], 1000)
		if err != nil || got != h {
			t.Errorf("%+v: got %+v, %v", h, got, err)
		}
	}
}

func TestHeaderRejects(t *testing.T) {
	enc := func(h header) []byte {
		b := make([]byte, headerSize)
		h.encode(b)
		return b
	}
	reserved := enc(header{Type: frameEager})
	reserved[2] = 1
	for name, b := range map[string][]byte{
		"short":          make([]byte, 10),
		"unknown type":   enc(header{Type: 9}),
		"zero type":      make([]byte, headerSize),
		"eager too long": enc(header{Type: frameEager, Len: 1001}),
		"negative tag":   enc(header{Type: frameEager, Tag: -1}),
		"negative src":   enc(header{Type: frameRTS, Src: -5}),
		"huge rts":       enc(header{Type: frameRTS, Len: maxFrameLen + 1}),
		"cts payload":    enc(header{Type: frameCTS, Len: 1}),
		"bye payload":    enc(header{Type: frameBye, Len: 1}),
		"reserved":       reserved,
	} {
		if _, err := decodeHeader(b, 1000); !errors.Is(err, errFrame) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// nullLink records frames instead of writing them.
type nullLink struct{ sent []header }

func (l *nullLink) send(f *outFrame) {
	l.sent = append(l.sent, f.h)
	if f.done != nil {
		f.done(nil)
	}
}
func (l *nullLink) shutdown(time.Time) {}
func (l *nullLink) close()             {}

// testProc is a runtime instance with no network, for feeding frames.
func testProc(size, eager int) *proc {
	p := &proc{cfg: Config{EagerLimit: eager}, rank: 0, size: size, eng: newEngine(), closing: make(chan struct{})}
	for i := 0; i < size; i++ {
		pe := newPeer(i)
		pe.started.Store(true) // no dialling: a receive naming a peer would dial it (nil ctx, no bootstrap)
		p.peers = append(p.peers, pe)
	}
	group := make([]int, size)
	for i := range group {
		group[i] = i
	}
	p.world = &Comm{p: p, group: group}
	return p
}

func frame(h header, payload []byte) []byte {
	b := make([]byte, headerSize)
	h.Len = uint64(len(payload))
	if h.Type == frameRTS {
		h.Len = uint64(cap(payload))
	}
	h.encode(b)
	if h.Type == frameEager || h.Type == frameData {
		b = append(b, payload...)
	}
	return b
}

func TestReadFramesRendezvous(t *testing.T) {
	p := testProc(2, 8)
	c := p.world
	buf := make([]byte, 20)
	req := c.irecv(0, buf, 1, 1, 5, false)
	l := &nullLink{}
	p.peers[1].ln = l
	var stream []byte
	stream = append(stream, frame(header{Type: frameEager, Src: 1, Tag: 6}, []byte("early"))...)
	stream = append(stream, frame(header{Type: frameRTS, Src: 1, Tag: 5, ID: 77}, make([]byte, 0, 12))...)
	stream = append(stream, frame(header{Type: frameData, ID: 77}, []byte("hello, world"))...)
	stream = append(stream, frame(header{Type: frameBye}, nil)...)
	bye, err := p.readFrames(p.peers[1], l, bufio.NewReader(bytes.NewReader(stream)))
	if !bye || err != io.EOF {
		t.Fatalf("bye=%v err=%v", bye, err)
	}
	if len(l.sent) != 1 || l.sent[0].Type != frameCTS || l.sent[0].ID != 77 {
		t.Fatalf("sent %+v", l.sent)
	}
	ok, st, err := req.Test()
	if !ok || err != nil || st.Bytes != 12 || string(buf[:12]) != "hello, world" {
		t.Fatalf("rendezvous receive: %v %+v %v %q", ok, st, err, buf)
	}
	st, err = Recv(c, buf[:3], 1, 6)
	if !errors.Is(err, ErrTruncate) || string(buf[:3]) != "ear" || st.Count != 3 {
		t.Fatalf("eager unexpected: %+v %v", st, err)
	}
	// A stray CTS or DATA is a protocol error.
	for _, f := range [][]byte{frame(header{Type: frameCTS, ID: 1}, nil), frame(header{Type: frameData, ID: 1}, []byte("x"))} {
		if _, err := p.readFrames(p.peers[1], l, bufio.NewReader(bytes.NewReader(f))); !errors.Is(err, errFrame) {
			t.Fatalf("stray frame: %v", err)
		}
	}
}

// FuzzFrames feeds arbitrary bytes to the frame parser and dispatcher of a
// runtime with a posted receive: it must never panic or hang.
func FuzzFrames(f *testing.F) {
	f.Add(frame(header{Type: frameEager, Src: 1, Tag: 5}, []byte("abc")))
	f.Add(append(frame(header{Type: frameRTS, Src: 1, Tag: 5, ID: 3}, make([]byte, 0, 40)),
		frame(header{Type: frameData, ID: 3}, bytes.Repeat([]byte("z"), 40))...))
	f.Add(frame(header{Type: frameBye}, nil))
	f.Add([]byte("GOMPI-RT1 garbage"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p := testProc(2, 64)
		l := &nullLink{}
		p.peers[1].ln = l
		req := p.world.irecv(0, make([]byte, 16), 1, AnySource, AnyTag, false)
		p.readFrames(p.peers[1], l, bufio.NewReader(bytes.NewReader(data)))
		req.Test()
		for i := 0; i < 3; i++ {
			Iprobe[byte](p.world, AnySource, AnyTag)
		}
	})
}
