package control

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"testing"

	"github.com/gompi/gompi/pmi"
)

// bufConn records what Send writes.
type bufConn struct{ bytes.Buffer }

func (*bufConn) Read([]byte) (int, error) { return 0, io.EOF }
func (*bufConn) Close() error             { return nil }

func directMsgs() []Msg {
	env := []string{"PATH=/usr/bin:/bin", "A=<b>&c", "BIN=\xff\xfe", "EMPTY="}
	for i := 0; i < 40; i++ {
		env = append(env, fmt.Sprintf("VAR_%d=value number %d with some text", i, i))
	}
	return []Msg{
		{T: MsgJob, Job: &Job{Version: Version, JobID: "j<1>", Size: 2, Apps: []App{{Argv: []string{"/bin/true", "a&b"}}},
			Ranks: []RankSpec{{Rank: 1, LocalRank: 0}}, KVSName: "kvs_j", Env: env, ProxyPath: "/p\xffq"}},
		{T: MsgExit, Rank: 3, Code: 7, Error: "exited <early> & \xff"},
		{T: MsgFence, KVS: []pmi.KV{{Key: "k", Value: "v=1"}, {Key: "bin\x00", Value: "\xff\x80"}}},
		{T: MsgStarted, Pids: []int{1, 2, 3}},
		{},
	}
}

// Send and Recv call Msg's own coder rather than going through
// json.Marshal/Unmarshal (one scan of the frame less): the bytes on the
// wire and what is decoded must be exactly what the json package gives.
func TestDirectCoderMatchesJSON(t *testing.T) {
	for _, m := range directMsgs() {
		var w bufConn
		if err := NewConn(&w).Send(m); err != nil {
			t.Fatalf("send %s: %v", m.T, err)
		}
		frame := w.Bytes()
		want, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if len(frame) < 5 || frame[0] != FrameMsg || int(binary.BigEndian.Uint32(frame[1:])) != len(frame)-5 {
			t.Fatalf("%s: bad frame header % x", m.T, frame[:min(len(frame), 5)])
		}
		if got := frame[5:]; !bytes.Equal(got, want) {
			t.Errorf("%s: wire\n%s\nwant json.Marshal's\n%s", m.T, got, want)
		}
		f, err := NewConn(nopCloser{bytes.NewReader(frame)}).Recv()
		if err != nil {
			t.Fatalf("recv %s: %v", m.T, err)
		}
		var viaJSON Msg
		if err := json.Unmarshal(want, &viaJSON); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(f.Msg, viaJSON) {
			t.Errorf("%s: decoded %+v, json.Unmarshal gives %+v", m.T, f.Msg, viaJSON)
		}
	}
	// What json.Unmarshal refuses, Recv refuses.
	for _, bad := range []string{`{"t":`, `{"t":"x"} {}`, `[1]`, `{"job":{"env":[1]}}`, `{"kvs":[{"Key":3}]}`, "\xff"} {
		frame := append([]byte{FrameMsg, 0, 0, 0, 0}, bad...)
		binary.BigEndian.PutUint32(frame[1:], uint32(len(bad)))
		var m Msg
		jerr := json.Unmarshal([]byte(bad), &m)
		_, rerr := NewConn(nopCloser{bytes.NewReader(frame)}).Recv()
		if (jerr == nil) != (rerr == nil) {
			t.Errorf("%q: json.Unmarshal %v, Recv %v", bad, jerr, rerr)
		}
	}
}

// BenchmarkSendRecvJob is one job message (the largest, with its
// environment) through Send and Recv.
func BenchmarkSendRecvJob(b *testing.B) {
	m := directMsgs()[0]
	c := NewConn(&loopConn{})
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Send(m); err != nil {
			b.Fatal(err)
		}
		if _, err := c.Recv(); err != nil {
			b.Fatal(err)
		}
	}
}

// loopConn reads back what was written to it.
type loopConn struct{ bytes.Buffer }

func (*loopConn) Close() error { return nil }
