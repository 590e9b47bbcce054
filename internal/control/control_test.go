package control

import (
	"bytes"
	"errors"
	"io"
	"net"
	"reflect"
	"testing"

	"github.com/gompi/gompi/pmi"
)

func TestRoundTripOverPipe(t *testing.T) {
	a, b := net.Pipe()
	ca, cb := NewConn(a), NewConn(b)
	msgs := []Msg{
		{T: MsgJob, Job: &Job{Version: Version, JobID: "j", Size: 2, Apps: []App{{Argv: []string{"/bin/true"}}},
			Ranks: []RankSpec{{Rank: 1, LocalRank: 0}}, KVSName: "kvs_j"}},
		{T: MsgExit, Rank: 3, Code: 7},
		{T: MsgFence, KVS: []pmi.KV{{Key: "k", Value: "v=1"}}},
	}
	go func() {
		for _, m := range msgs {
			ca.Send(m)
		}
		ca.SendOutput(5, 2, []byte("line\n"), true)
	}()
	for _, want := range msgs {
		f, err := cb.Recv()
		if err != nil || f.Type != FrameMsg || !reflect.DeepEqual(f.Msg, want) {
			t.Fatalf("got %+v %v, want %+v", f.Msg, err, want)
		}
	}
	f, err := cb.Recv()
	if err != nil || f.Type != FrameOutput || f.Rank != 5 || f.FD != 2 || string(f.Data) != "line\n" {
		t.Fatalf("output frame %+v %v", f, err)
	}
	a.Close()
	if _, err := cb.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after close: %v", err)
	}
}

func TestBadFrames(t *testing.T) {
	for _, in := range [][]byte{
		{9, 0, 0, 0, 0},                // unknown type
		{1, 0xff, 0xff, 0xff, 0xff},    // too large
		{2, 0, 0, 0, 2, 1, 2},          // short output frame
		{1, 0, 0, 0, 3, '{', 'x', '}'}, // bad JSON
		{1, 0, 0, 0, 9, '{', '"', 't'}, // truncated
	} {
		c := NewConn(nopCloser{bytes.NewReader(in)})
		if _, err := c.Recv(); err == nil {
			t.Errorf("%v accepted", in)
		}
	}
}

type nopCloser struct{ io.Reader }

func (nopCloser) Write(p []byte) (int, error) { return len(p), nil }
func (nopCloser) Close() error                { return nil }

func FuzzRecv(f *testing.F) {
	f.Add([]byte{1, 0, 0, 0, 10, '{', '"', 't', '"', ':', '"', 'x', '"', '}', ' '})
	f.Add([]byte{2, 0, 0, 0, 6, 0, 0, 0, 1, 1, 'a'})
	f.Fuzz(func(t *testing.T, in []byte) {
		c := NewConn(nopCloser{bytes.NewReader(in)})
		for i := 0; i < 8; i++ {
			if _, err := c.Recv(); err != nil {
				return
			}
		}
	})
}

// A child's job carries its own host's binding= (none when its host file
// line has none), not the parent's.
func TestForChildHostBinding(t *testing.T) {
	parent := &Job{Host: "a", BindTo: "core", HostBindTo: "socket", MapBy: "numa", Membind: "bind:0", Iface: "ib0"}
	for _, tc := range []struct{ sub, want string }{{"", ""}, {"user:1,0", "user:1,0"}, {"none", "none"}} {
		c := parent.ForChild(Subtree{Host: "b", Index: 1, BindTo: tc.sub})
		if c.HostBindTo != tc.want || c.BindTo != "core" || c.MapBy != "numa" || c.Membind != "bind:0" || c.Iface != "ib0" || c.Host != "b" {
			t.Errorf("binding=%q: child job %+v", tc.sub, c)
		}
	}
	if parent.HostBindTo != "socket" {
		t.Errorf("parent changed: %+v", parent)
	}
}

// Hostname propagation names each host of a launch tree by its own entry
// in the host list; without it no child gets a name.
func TestForChildHostname(t *testing.T) {
	if c := (&Job{Host: "a", Hostname: "a"}).ForChild(Subtree{Host: "b.example", Index: 1}); c.Hostname != "b.example" {
		t.Errorf("with propagation: child Hostname %q, want b.example", c.Hostname)
	}
	if c := (&Job{Host: "a"}).ForChild(Subtree{Host: "b", Index: 1}); c.Hostname != "" {
		t.Errorf("without propagation: child Hostname %q, want none", c.Hostname)
	}
}

// streamLog records each Write on a stream (a yamux frame each).
type streamLog struct {
	bytes.Buffer
	writes []int
}

func (w *streamLog) Write(p []byte) (int, error) {
	w.writes = append(w.writes, len(p))
	return w.Buffer.Write(p)
}
func (w *streamLog) Close() error { return nil }

// An output chunk leaves in one write of the stream, however large, after
// what was buffered before it; a full 64 KiB chunk left in two (two yamux
// frames, two hand-offs, two wake-ups of gompiexec).
func TestOutputChunkIsOneWrite(t *testing.T) {
	for _, tc := range []struct {
		name     string
		buffered int // bytes of an unflushed chunk sent before
		size     int
		want     []int
	}{
		{"small", 0, 96, []int{106}},
		{"full relay chunk", 0, 64 << 10, []int{10 + 64<<10}},
		{"bulk relay chunk", 0, 256 << 10, []int{10 + 256<<10}},
		{"after a buffered chunk", 100, 64 << 10, []int{110, 10 + 64<<10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &streamLog{}
			c := NewConn(struct {
				io.Reader
				io.WriteCloser
			}{bytes.NewReader(nil), w})
			if tc.buffered > 0 {
				c.SendOutput(1, 1, make([]byte, tc.buffered), false)
			}
			data := bytes.Repeat([]byte("0123456789abcde\n"), tc.size/16)
			if err := c.SendOutput(2, 1, data, true); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(w.writes, tc.want) {
				t.Fatalf("writes %v, want %v", w.writes, tc.want)
			}
			r := NewConn(struct {
				io.Reader
				io.WriteCloser
			}{&w.Buffer, w})
			if tc.buffered > 0 {
				r.Recv()
			}
			f, err := r.Recv()
			if err != nil || f.Rank != 2 || !bytes.Equal(f.Data, data) {
				t.Fatalf("frame read back: rank %d, %d bytes, %v", f.Rank, len(f.Data), err)
			}
		})
	}
}
