package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
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
		errc, sess, st := runOverPipe(t, Config{})
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

// runOverPipe starts Run with cfg over a net.Pipe and opens the
// launcher's control stream to it; Run's error arrives on errc.
func runOverPipe(t *testing.T, cfg Config) (errc <-chan error, sess *yamux.Session, st net.Conn) {
	t.Helper()
	a, b := net.Pipe()
	ec := make(chan error, 1)
	go func() { ec <- Run(context.Background(), a, cfg) }()
	ycfg := yamux.DefaultConfig()
	ycfg.LogOutput = io.Discard
	ycfg.EnableKeepAlive = false
	sess, err := yamux.Client(b, ycfg)
	if err != nil {
		t.Fatal(err)
	}
	st, err = sess.Open()
	if err == nil {
		_, err = st.Write([]byte{control.StreamControl})
	}
	if err != nil {
		sess.Close()
		t.Fatal(err)
	}
	return ec, sess, st
}
