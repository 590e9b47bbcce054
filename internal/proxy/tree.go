package proxy

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/gompi/gompi/internal/control"
	"github.com/gompi/gompi/internal/launcher"
	"github.com/gompi/gompi/pmi"
	"github.com/hashicorp/yamux"
)

// tree is this proxy's part of a launch tree: the proxies it started
// itself. It relays their frames up, routes the launcher's messages down,
// and folds their PMI fences into this node's, so the launcher sees one
// fence per top-level proxy however many hosts lie below.
type tree struct {
	p        *proxy
	children []*child
	route    map[int]*child // host index → the child whose subtree holds it

	mu      sync.Mutex
	closed  bool
	pending map[int]bool  // hosts below that have not reported done or been lost
	allDone chan struct{} // closed when pending is empty

	fmu     sync.Mutex
	arrived int // fence arrivals this round: this node and each child
	puts    []pmi.KV
}

type child struct {
	t    control.Subtree
	proc *launcher.Recording
	sess *yamux.Session
	conn *control.Conn
	// fence reassembles the child's fence message (control.SplitKVS).
	fence control.KVSJoin
}

func newTree(p *proxy) *tree {
	t := &tree{p: p, route: map[int]*child{}, pending: map[int]bool{}, allDone: make(chan struct{})}
	for _, st := range p.job.Children {
		c := &child{t: st}
		t.children = append(t.children, c)
		for _, h := range st.Hosts() {
			t.route[h] = c
			t.pending[h] = true
		}
	}
	if len(t.pending) == 0 {
		close(t.allDone)
	}
	return t
}

// start launches every child concurrently and relays each one's frames
// until its session ends. A child that cannot start is reported lost, with
// every host below it.
func (t *tree) start(ctx context.Context) {
	if len(t.children) == 0 {
		return
	}
	var be launcher.Backend
	var err error
	if t.p.job.Launch == nil {
		err = fmt.Errorf("no launch recipe for the proxies below %s", t.p.job.Host)
	} else {
		be, err = launcher.FromRecipe(*t.p.job.Launch)
	}
	for _, c := range t.children {
		if err != nil {
			t.lost(c, err)
			continue
		}
		go func(c *child) {
			if err := t.startChild(ctx, be, c); err != nil {
				t.lost(c, fmt.Errorf("start gompi-proxy on %s from %s: %w", c.t.Host, t.p.job.Host, err))
				return
			}
			t.relay(c)
		}(c)
	}
}

func (t *tree) startChild(ctx context.Context, be launcher.Backend, c *child) error {
	proxyPath := t.p.job.ProxyPath
	if proxyPath == "" {
		return fmt.Errorf("no gompi-proxy path in the job")
	}
	started, err := be.Start(ctx, launcher.Spec{Host: c.t.Host, User: c.t.User, Argv: []string{proxyPath},
		Env: launcher.ProxyEnv(be), Stderr: t.p.cfg.Stderr})
	if err != nil {
		return err
	}
	proc, sess, conn, err := control.Attach(started, t.p.job.ForChild(c.t))
	if err != nil {
		return err
	}
	t.mu.Lock()
	closed := t.closed
	if !closed {
		c.proc, c.sess, c.conn = proc, sess, conn
	}
	t.mu.Unlock()
	if closed { // this proxy is shutting down: the child must not outlive it
		sess.Close()
		proc.Close()
		proc.Wait()
		return fmt.Errorf("proxy on %s is shutting down", t.p.job.Host)
	}
	return nil
}

// relay forwards a child's frames up until its session ends.
func (t *tree) relay(c *child) {
	up := t.p.conn
	for {
		f, err := c.conn.Recv()
		if err != nil {
			t.lost(c, fmt.Errorf("lost connection to gompi-proxy on %s (%v)", c.t.Host, c.proc.Reason(err)))
			return
		}
		if f.Type == control.FrameOutput {
			up.SendOutput(f.Rank, f.FD, f.Data, true)
			continue
		}
		if f.Msg.T == control.MsgFence {
			if m, whole := c.fence.Add(f.Msg); whole {
				t.fence(m.KVS)
			}
			continue
		}
		// Sent before the host counts as ended: this proxy exits once
		// every host below has, and the last `done` must have gone up.
		up.Send(f.Msg)
		if f.Msg.T == control.MsgDone || f.Msg.T == control.MsgLost {
			t.hostEnded(f.Msg.Host)
		}
	}
}

// lost reports every host of c's subtree that had not finished.
func (t *tree) lost(c *child, err error) {
	for _, h := range c.t.Hosts() {
		t.mu.Lock()
		was := t.pending[h]
		t.mu.Unlock()
		if was {
			t.p.conn.Send(control.Msg{T: control.MsgLost, Host: h, Error: err.Error()})
			t.hostEnded(h)
		}
	}
}

func (t *tree) hostEnded(h int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.pending[h] {
		return
	}
	delete(t.pending, h)
	if len(t.pending) == 0 {
		close(t.allDone)
	}
}

// fence records one arrival (this node's or a child's) and, when this node
// and every child have arrived, sends one fence up with all their puts.
func (t *tree) fence(puts []pmi.KV) error {
	t.fmu.Lock()
	t.arrived++
	t.puts = append(t.puts, puts...)
	if t.arrived < 1+len(t.children) {
		t.fmu.Unlock()
		return nil
	}
	all := t.puts
	t.arrived, t.puts = 0, nil
	t.fmu.Unlock()
	for _, m := range control.SplitKVS(control.Msg{T: control.MsgFence, KVS: all}) {
		if err := t.p.send(m); err != nil {
			return err
		}
	}
	return nil
}

// down forwards a launcher message: to the one child whose subtree holds
// m.Host, or to every child when broadcast is set.
func (t *tree) down(m control.Msg, broadcast bool) {
	t.mu.Lock()
	var to []*child
	if broadcast {
		for _, c := range t.children {
			if c.conn != nil {
				to = append(to, c)
			}
		}
	} else if c := t.route[m.Host]; c != nil && c.conn != nil {
		to = append(to, c)
	}
	t.mu.Unlock()
	for _, c := range to {
		c.conn.Send(m)
	}
}

// close ends every child's session (each then kills its ranks and its own
// children) and reaps the child proxies, killing any that linger.
func (t *tree) close() {
	t.mu.Lock()
	t.closed = true
	children := append([]*child(nil), t.children...)
	t.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range children {
		t.mu.Lock()
		proc, sess := c.proc, c.sess
		t.mu.Unlock()
		if proc == nil {
			continue
		}
		sess.Close()
		proc.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			done := make(chan struct{})
			go func() { proc.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				proc.Kill()
				<-done
			}
		}()
	}
	wg.Wait()
}
