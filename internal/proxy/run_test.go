package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gompi/gompi/internal/control"
	"github.com/hashicorp/yamux"
)

// A launcher may close a proxy's session the moment it has read MsgDone
// (gompiexec releases each proxy as soon as its hosts are done). The job
// went well on this host: Run returns nil, not ErrLauncherLost, whose exit
// status 1 srun reports as a failed task ("srun: error: n1: task 0: Exited
// with exit code 1") and answers by terminating the step. Before the fix a
// session closed while the proxy's write of MsgDone was still completing
// made Run fail about one time in two.
func TestRunDoneThenClosedIsSuccess(t *testing.T) {
	for i := 0; i < 30; i++ {
		a, b := net.Pipe()
		errc := make(chan error, 1)
		go func() { errc <- Run(context.Background(), a, Config{}) }()
		ycfg := yamux.DefaultConfig()
		ycfg.LogOutput = io.Discard
		ycfg.EnableKeepAlive = false
		sess, err := yamux.Client(b, ycfg)
		if err != nil {
			t.Fatal(err)
		}
		st, err := sess.Open()
		if err == nil {
			_, err = st.Write([]byte{control.StreamControl})
		}
		if err != nil {
			t.Fatal(err)
		}
		conn := control.NewConn(st)
		job := &control.Job{Version: control.Version, JobID: fmt.Sprintf("done%d", i), Host: "h", Size: 1,
			Apps: []control.App{{Argv: []string{"/bin/true"}, Wdir: "/"}}, Ranks: []control.RankSpec{{Rank: 0}}, KVSName: "kvs"}
		if err := conn.Send(control.Msg{T: control.MsgJob, Job: job}); err != nil {
			t.Fatal(err)
		}
		for {
			f, err := conn.Recv()
			if err != nil {
				t.Fatalf("run %d: before MsgDone: %v", i, err)
			}
			if f.Type == control.FrameMsg && f.Msg.T == control.MsgDone {
				break
			}
		}
		sess.Close()
		select {
		case err := <-errc:
			if err != nil {
				t.Fatalf("run %d: Run after MsgDone and close: %v", i, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("run %d: Run did not return after the launcher closed", i)
		}
	}
}

// A proxy with no proxies below it exits once it has sent MsgDone, without
// waiting for the launcher to close the session (before, it waited for the
// close, or 10 s): its node's share of an srun step ends with its own
// ranks, as Hydra's proxies do. Everything it sent arrives before the end
// of the stream.
func TestRunLeafExitsAfterDone(t *testing.T) {
	a, b := net.Pipe()
	errc := make(chan error, 1)
	go func() { errc <- Run(context.Background(), a, Config{}) }()
	ycfg := yamux.DefaultConfig()
	ycfg.LogOutput = io.Discard
	ycfg.EnableKeepAlive = false
	sess, err := yamux.Client(b, ycfg)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	st, err := sess.Open()
	if err == nil {
		_, err = st.Write([]byte{control.StreamControl})
	}
	if err != nil {
		t.Fatal(err)
	}
	conn := control.NewConn(st)
	job := &control.Job{Version: control.Version, JobID: "leafdone", Host: "h", Size: 2,
		Apps:  []control.App{{Argv: []string{"/bin/sh", "-c", "echo out$PMI_RANK"}, Wdir: "/"}},
		Ranks: []control.RankSpec{{Rank: 0}, {Rank: 1, LocalRank: 1}}, KVSName: "kvs"}
	if err := conn.Send(control.Msg{T: control.MsgJob, Job: job}); err != nil {
		t.Fatal(err)
	}
	var out string
	exits := 0
	for done := false; !done; {
		f, err := conn.Recv()
		if err != nil {
			t.Fatalf("before MsgDone: %v", err)
		}
		switch {
		case f.Type == control.FrameOutput:
			out += string(f.Data)
		case f.Msg.T == control.MsgExit:
			exits++
		case f.Msg.T == control.MsgDone:
			done = true
		}
	}
	if exits != 2 || !strings.Contains(out, "out0") || !strings.Contains(out, "out1") {
		t.Fatalf("before MsgDone: %d exits, output %q", exits, out)
	}
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run still waits for the launcher to close after MsgDone")
	}
}
