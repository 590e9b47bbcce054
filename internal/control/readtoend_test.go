package control

import (
	"io"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
)

// gatedProc is the launcher's end of a proxy's two pipes. Once gateAt
// bytes have been read, its next read waits until a write has failed, and
// a write from then on waits until the proxy has exited: a launcher's write (a
// window update, a control message) then meets the closed pipe while the
// proxy's last frames are still in it, the order that lost a `done` when
// it came by chance. (Whether yamux's window update comes before or after
// the gate depends on scheduling; the test makes a write of its own after
// the proxy's exit, so that a failed write always comes before the reader
// goes on.)
type gatedProc struct {
	in          *os.File // to the proxy's stdin
	out         *os.File // from its stdout
	gateAt      int
	read        int // by the one reader
	gated       atomic.Bool
	wrote       chan struct{}
	wroteOnce   sync.Once
	proxyExited <-chan struct{}
}

func (p *gatedProc) Read(b []byte) (int, error) {
	if p.read >= p.gateAt {
		p.gated.Store(true)
		<-p.wrote
	}
	n, err := p.out.Read(b)
	p.read += n
	return n, err
}

func (p *gatedProc) Write(b []byte) (int, error) {
	if p.gated.Load() {
		<-p.proxyExited
	}
	n, err := p.in.Write(b)
	if err != nil {
		// The write that met the exited proxy: only now may the reader
		// go on to the frames still in the pipe.
		p.wroteOnce.Do(func() { close(p.wrote) })
	}
	return n, err
}

func (p *gatedProc) Close() error {
	p.wroteOnce.Do(func() { close(p.wrote) })
	p.in.Close()
	return p.out.Close()
}
func (p *gatedProc) Wait() error { return nil }
func (p *gatedProc) Kill() error { return p.Close() }

type pipeRW struct{ r, w *os.File }

func (p pipeRW) Read(b []byte) (int, error)  { return p.r.Read(b) }
func (p pipeRW) Write(b []byte) (int, error) { return p.w.Write(b) }
func (p pipeRW) Close() error                { p.r.Close(); return p.w.Close() }

// A proxy that exits right after its `done` (with more than yamux's
// half-window of output before it) is read to its end: the launcher's
// window update fails against the exited proxy, and Attach's
// launcher.ReadToEnd lets the reader go on rather than the session close
// with the last frames unread. Without it Recv fails before `done`.
func TestAttachReadsExitedProxyToEnd(t *testing.T) {
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	const chunk, chunks = 10000, 20 // 200 kB: past the half-window of 128 kB
	go func() {
		// The proxy: take the job, send the output and `done`, exit.
		defer close(exited)
		defer inR.Close()
		defer outW.Close()
		c, err := fakeProxy(inR, outW)
		if err != nil {
			return
		}
		data := make([]byte, chunk)
		for i := 0; i < chunks; i++ {
			if c.SendOutput(0, 1, data, true) != nil {
				return
			}
		}
		c.Send(Msg{T: MsgDone})
	}()
	proc := &gatedProc{in: inW, out: outR, gateAt: 150000, wrote: make(chan struct{}), proxyExited: exited}
	_, sess, conn, err := Attach(proc, &Job{Version: Version, JobID: "j"})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	// A launcher's message after the proxy has gone (a kill, rank 0's
	// stdin): it meets the closed pipe whatever yamux's window did.
	go func() {
		<-exited
		conn.Send(Msg{T: MsgKill})
	}()
	got := 0
	deadline := time.AfterFunc(20*time.Second, func() { proc.Close() })
	defer deadline.Stop()
	for {
		f, err := conn.Recv()
		if err != nil {
			t.Fatalf("after %d of %d bytes of output: %v (the proxy's `done` was lost)", got, chunk*chunks, err)
		}
		if f.Type == FrameOutput {
			got += len(f.Data)
			continue
		}
		if f.Msg.T == MsgDone {
			break
		}
	}
	if got != chunk*chunks {
		t.Fatalf("read %d bytes of output, want %d", got, chunk*chunks)
	}
}

// eofFirstProc is the launcher's end of a proxy's pipes whose job write
// returns only after the proxy has run its job and exited, and the stream's
// end has been read: the order of a launch whose sending goroutine was not
// scheduled while a proxy on another core did it all.
type eofFirstProc struct {
	in, out *os.File
	eof     chan struct{}
	eofOnce sync.Once
}

func (p *eofFirstProc) Read(b []byte) (int, error) {
	n, err := p.out.Read(b)
	if err != nil {
		p.eofOnce.Do(func() { close(p.eof) })
	}
	return n, err
}

func (p *eofFirstProc) Write(b []byte) (int, error) {
	n, err := p.in.Write(b)
	if len(b) > 12 { // the job's frame, not yamux's stream opening
		select {
		case <-p.eof:
			time.Sleep(5 * time.Millisecond) // let yamux act on the end
		case <-time.After(10 * time.Second):
		}
	}
	return n, err
}

func (p *eofFirstProc) Close() error { p.in.Close(); return p.out.Close() }
func (p *eofFirstProc) Wait() error  { return nil }
func (p *eofFirstProc) Kill() error  { return p.Close() }

// A proxy may take its job, run it and exit before the launcher's goroutine
// that sent the job is scheduled again. Attach must still succeed and the
// proxy's frames be read: launcher.ReadToEnd holds the stream's end back
// until the job has been sent (without it yamux ended the session at the
// end and the send failed in about half of the attempts, ErrSessionShutdown:
// "send job: session shutdown" inside Slurm).
func TestAttachProxyDoneBeforeJobSendReturns(t *testing.T) {
	for i := 0; i < 20; i++ {
		inR, inW, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		outR, outW, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			defer inR.Close()
			defer outW.Close()
			c, err := fakeProxy(inR, outW)
			if err != nil {
				return
			}
			c.Send(Msg{T: MsgDone})
		}()
		proc := &eofFirstProc{in: inW, out: outR, eof: make(chan struct{})}
		_, sess, conn, err := Attach(proc, &Job{Version: Version, JobID: "j"})
		if err != nil {
			t.Fatalf("attempt %d: %v", i, err)
		}
		f, err := conn.Recv()
		if err != nil || f.Type != FrameMsg || f.Msg.T != MsgDone {
			t.Fatalf("attempt %d: want the proxy's done, got %+v, %v", i, f, err)
		}
		sess.Close()
	}
}

// fakeProxy is a proxy's side of the session over the pipes: the session,
// its control stream, and the job taken.
func fakeProxy(in, out *os.File) (*Conn, error) {
	cfg := yamux.DefaultConfig()
	cfg.LogOutput = io.Discard
	cfg.EnableKeepAlive = false
	sess, err := yamux.Server(Coalesce(pipeRW{in, out}), cfg)
	if err != nil {
		return nil, err
	}
	st, err := sess.Accept()
	if err != nil {
		return nil, err
	}
	var kind [1]byte
	if _, err := io.ReadFull(st, kind[:]); err != nil {
		return nil, err
	}
	c := NewConn(st)
	if _, err := c.Recv(); err != nil {
		return nil, err
	}
	return c, nil
}
