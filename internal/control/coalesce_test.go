package control

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
)

// writeLog records every Write as one entry.
type writeLog struct {
	io.ReadWriteCloser
	mu     sync.Mutex
	writes [][]byte
}

func (w *writeLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.writes = append(w.writes, append([]byte(nil), p...))
	w.mu.Unlock()
	if w.ReadWriteCloser == nil {
		return len(p), nil
	}
	return w.ReadWriteCloser.Write(p)
}

func (w *writeLog) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.writes)
}

func yamuxHeader(typ byte, length uint32) []byte {
	h := make([]byte, yamuxHeaderSize)
	h[0], h[1] = yamuxVersion, typ
	binary.BigEndian.PutUint32(h[4:8], 1)
	binary.BigEndian.PutUint32(h[8:], length)
	return h
}

func TestCoalesceWrites(t *testing.T) {
	const typeWindowUpdate, typePing = 1, 2
	body := []byte("hello")
	tests := []struct {
		name   string
		writes [][]byte
		want   [][]byte
	}{
		{"data header waits for its body", [][]byte{yamuxHeader(yamuxTypeData, 5), body},
			[][]byte{append(yamuxHeader(yamuxTypeData, 5), body...)}},
		{"window update passes at once", [][]byte{yamuxHeader(typeWindowUpdate, 5)},
			[][]byte{yamuxHeader(typeWindowUpdate, 5)}},
		{"ping passes at once", [][]byte{yamuxHeader(typePing, 7)}, [][]byte{yamuxHeader(typePing, 7)}},
		{"empty data frame passes at once", [][]byte{yamuxHeader(yamuxTypeData, 0)},
			[][]byte{yamuxHeader(yamuxTypeData, 0)}},
		{"other writes pass", [][]byte{[]byte("0123456789ab0"), body}, [][]byte{[]byte("0123456789ab0"), body}},
		{"two frames", [][]byte{yamuxHeader(yamuxTypeData, 5), body, yamuxHeader(typeWindowUpdate, 9), yamuxHeader(yamuxTypeData, 5), body},
			[][]byte{append(yamuxHeader(yamuxTypeData, 5), body...), yamuxHeader(typeWindowUpdate, 9), append(yamuxHeader(yamuxTypeData, 5), body...)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			log := &writeLog{}
			c := Coalesce(log)
			for _, w := range tc.writes {
				if n, err := c.Write(w); n != len(w) || err != nil {
					t.Fatalf("Write(%d bytes) = %d, %v", len(w), n, err)
				}
			}
			if len(log.writes) != len(tc.want) {
				t.Fatalf("%d writes %q, want %d %q", len(log.writes), log.writes, len(tc.want), tc.want)
			}
			for i := range tc.want {
				if !bytes.Equal(log.writes[i], tc.want[i]) {
					t.Fatalf("write %d = %q, want %q", i, log.writes[i], tc.want[i])
				}
			}
		})
	}
}

// The launcher's session start (stream open, kind byte, job) is two writes
// on the wire, and each message after it one: the proxy wakes once per
// frame, not once for a header and again for its body. (Five and two
// before.)
func TestSessionWritesPerFrame(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	log := &writeLog{ReadWriteCloser: a}
	srv, err := yamux.Server(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	got := make(chan Frame, 2)
	go func() {
		st, err := srv.Accept()
		if err != nil {
			return
		}
		var kind [1]byte
		if _, err := io.ReadFull(st, kind[:]); err != nil || kind[0] != StreamControl {
			return
		}
		c := NewConn(st)
		for {
			f, err := c.Recv()
			if err != nil {
				return
			}
			got <- f
		}
	}()
	sess, conn, err := openSession(log, &Job{Version: Version, JobID: "j", Size: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if f := <-got; f.Msg.T != MsgJob || f.Msg.Job.JobID != "j" {
		t.Fatalf("first frame %+v", f)
	}
	if n := log.count(); n != 2 {
		t.Fatalf("session start took %d writes, want 2 (stream open, kind byte and job)", n)
	}
	if err := conn.Send(Msg{T: MsgKill}); err != nil {
		t.Fatal(err)
	}
	if f := <-got; f.Msg.T != MsgKill {
		t.Fatalf("second frame %+v", f)
	}
	if n := log.count(); n != 3 {
		t.Fatalf("a message took %d writes, want 1", n-2)
	}
}

// Messages sent at the same moment leave in one write: a sender that finds
// another waiting behind it leaves the flush to that one, and the last
// flushes everything.
func TestSendLeavesFlushToQueued(t *testing.T) {
	log := &writeLog{}
	c := NewConn(struct {
		io.Reader
		io.WriteCloser
	}{nil, nopWriteCloser{log}})
	c.mu.Lock() // a write in progress
	const n = 3
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() { errs <- c.Send(Msg{T: MsgExit, Rank: 1}) }()
	}
	go func() { errs <- c.SendOutput(2, 1, []byte("x"), true) }()
	for c.queued.Load() != n+1 {
		time.Sleep(time.Millisecond)
	}
	c.mu.Unlock()
	for i := 0; i < n+1; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if len(log.writes) != 1 {
		t.Fatalf("%d writes, want the %d frames in one", len(log.writes), n+1)
	}
	r := NewConn(struct {
		io.Reader
		io.WriteCloser
	}{bytes.NewReader(log.writes[0]), nopWriteCloser{io.Discard}})
	for i := 0; i < n+1; i++ {
		if _, err := r.Recv(); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
	}
	// Alone, a message is flushed at once.
	if err := c.Send(Msg{T: MsgDone}); err != nil || len(log.writes) != 2 {
		t.Fatalf("lone Send: %v, %d writes, want 2", err, len(log.writes))
	}
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// A proxy's output may run LauncherWindow ahead of the launcher's reading
// before it waits for a window update: at yamux's 256 KiB the launcher sent
// an update (a write, and a wake-up of the proxy's sender) every 128 KiB.
func TestLauncherWindow(t *testing.T) {
	for _, tc := range []struct {
		name string
		size int
	}{
		{"a full chunk", 64 << 10},
		{"three quarters of the window", LauncherWindow * 3 / 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := net.Pipe()
			defer a.Close()
			defer b.Close()
			srv, err := yamux.Server(b, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			wrote := make(chan error, 1)
			go func() {
				st, err := srv.Accept()
				if err != nil {
					wrote <- err
					return
				}
				// Not a timing assertion: the write either fits the window
				// (at once) or waits for a read that never comes.
				st.SetWriteDeadline(time.Now().Add(10 * time.Second))
				_, err = st.Write(make([]byte, tc.size))
				wrote <- err
			}()
			sess, _, err := openSession(a, &Job{Version: Version, JobID: "j", Size: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer sess.Close()
			if err := <-wrote; err != nil {
				t.Fatalf("proxy's write of %d bytes nobody reads yet: %v", tc.size, err)
			}
		})
	}
}
