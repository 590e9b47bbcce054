package proxy

import (
	"bytes"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/gompi/gompi/internal/control"
	"github.com/gompi/gompi/internal/launcher"
)

// A proxy exits once its `done` has left (here: the launcher has read it
// off the synchronous pipe), without waiting for the launcher to close the
// session: the launcher reads a stream to its end (launcher.ReadToEnd).
// Before, Run waited for the close or up to 10 s.
func TestRunReturnsAfterDoneWithoutClose(t *testing.T) {
	errc, sess, st := runOverPipe(t, Config{})
	defer sess.Close()
	conn := control.NewConn(st)
	job := &control.Job{Version: control.Version, JobID: "nowait", Host: "h", Size: 1,
		Apps: []control.App{{Argv: []string{"/bin/true"}, Wdir: "/"}}, Ranks: []control.RankSpec{{Rank: 0}}, KVSName: "kvs"}
	if err := conn.Send(control.Msg{T: control.MsgJob, Job: job}); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := conn.Recv()
		if err != nil {
			t.Fatalf("before MsgDone: %v", err)
		}
		if f.Type == control.FrameMsg && f.Msg.T == control.MsgDone {
			break
		}
	}
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("Run after MsgDone: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run still waits for the launcher's close after MsgDone")
	}
}

// gateWriter blocks every write until release is closed.
type gateWriter struct {
	release chan struct{}
	mu      sync.Mutex
	buf     bytes.Buffer
}

func (w *gateWriter) Read([]byte) (int, error) { return 0, io.EOF }
func (w *gateWriter) Write(b []byte) (int, error) {
	<-w.release
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(b)
}
func (w *gateWriter) Close() error { return nil }

type nopProc struct{ io.Reader }

func (nopProc) Write(b []byte) (int, error) { return len(b), nil }
func (nopProc) Close() error                { return nil }
func (nopProc) Wait() error                 { return nil }
func (nopProc) Kill() error                 { return nil }

// A proxy in a launch tree exits once every host below it is done: a
// child's `done` must have gone up before the host counts as ended, or the
// proxy could exit with it unsent and the launcher lose that host.
func TestTreeRelaysDoneBeforeHostEnds(t *testing.T) {
	up := &gateWriter{release: make(chan struct{})}
	p := &proxy{job: &control.Job{Index: 0, Children: []control.Subtree{{Index: 1, Host: "c"}}}, conn: control.NewConn(up)}
	tr := newTree(p)
	var frame bytes.Buffer
	if err := control.NewConn(struct {
		io.Reader
		io.Writer
		io.Closer
	}{nil, &frame, nil}).Send(control.Msg{T: control.MsgDone, Host: 1}); err != nil {
		t.Fatal(err)
	}
	c := tr.children[0]
	c.conn = control.NewConn(nopProc{bytes.NewReader(frame.Bytes())})
	c.proc = &launcher.Recording{Proc: nopProc{bytes.NewReader(nil)}}
	go tr.relay(c)
	select {
	case <-tr.allDone:
		t.Fatal("the child's host counted as ended before its done was sent up")
	case <-time.After(200 * time.Millisecond):
	}
	close(up.release)
	select {
	case <-tr.allDone:
	case <-time.After(5 * time.Second):
		t.Fatal("the child's done was relayed but its host never ended")
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	if !bytes.Contains(up.buf.Bytes(), []byte(fmt.Sprintf(`"t":%q`, control.MsgDone))) {
		t.Fatalf("no done went up: %q", up.buf.Bytes())
	}
}
