package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/gompi/gompi/internal/control"
	"github.com/gompi/gompi/internal/sockowner"
	"github.com/gompi/gompi/pmi"
)

// uplink carries the node's PMI traffic to the launcher over the control
// stream. Only one fence is ever in flight: the node calls Fence once all
// local ranks are in the barrier.
type uplink struct {
	send    func(control.Msg) error
	fence   func([]pmi.KV) error // joins the tree's fence round (sends up when complete)
	fenceCh chan control.Msg

	mu    sync.Mutex
	seq   int
	names map[int]chan control.Msg
	done  control.KVSJoin // fence_done being reassembled (control.SplitKVS)
}

func newUplink(send func(control.Msg) error, fence func([]pmi.KV) error) *uplink {
	return &uplink{send: send, fence: fence, fenceCh: make(chan control.Msg, 1), names: map[int]chan control.Msg{}}
}

func (u *uplink) Fence(ctx context.Context, puts []pmi.KV) (map[string]string, error) {
	if err := u.fence(puts); err != nil {
		return nil, err
	}
	select {
	case m := <-u.fenceCh:
		if m.Error != "" {
			return nil, errors.New(m.Error)
		}
		kvs := make(map[string]string, len(m.KVS))
		for _, kv := range m.KVS {
			kvs[kv.Key] = kv.Value
		}
		return kvs, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (u *uplink) Abort(rank, code int, msg string) error {
	return u.send(control.Msg{T: control.MsgAbort, Rank: rank, Code: code, Error: msg, At: time.Now().UnixNano()})
}

func (u *uplink) name(ctx context.Context, op, service, port string) (string, error) {
	u.mu.Lock()
	u.seq++
	id := u.seq
	ch := make(chan control.Msg, 1)
	u.names[id] = ch
	u.mu.Unlock()
	defer func() {
		u.mu.Lock()
		delete(u.names, id)
		u.mu.Unlock()
	}()
	if err := u.send(control.Msg{T: control.MsgName, ReqID: id, Op: op, Service: service, Port: port}); err != nil {
		return "", err
	}
	select {
	case m := <-ch:
		if m.Error != "" {
			return "", errors.New(m.Error)
		}
		return m.Port, nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

func (u *uplink) Publish(ctx context.Context, service, port string) error {
	_, err := u.name(ctx, "publish", service, port)
	return err
}

func (u *uplink) Unpublish(ctx context.Context, service string) error {
	_, err := u.name(ctx, "unpublish", service, "")
	return err
}

func (u *uplink) Lookup(ctx context.Context, service string) (string, error) {
	return u.name(ctx, "lookup", service, "")
}

// deliver routes a launcher reply to the waiting PMI call.
func (u *uplink) deliver(m control.Msg) {
	switch m.T {
	case control.MsgFenceDone:
		u.mu.Lock()
		m, whole := u.done.Add(m)
		u.mu.Unlock()
		if !whole {
			return
		}
		select {
		case u.fenceCh <- m:
		default:
		}
	case control.MsgNameReply:
		u.mu.Lock()
		ch := u.names[m.ReqID]
		u.mu.Unlock()
		if ch != nil {
			ch <- m
		}
	}
}

// setupPMI creates the node's PMI server and, in PMI_PORT mode, its
// listener. Ranks are attached by pmiForRank.
func (p *proxy) setupPMI(ctx context.Context) error {
	appOf := map[int]int{}
	var ranks []int
	for _, r := range p.job.Ranks {
		appOf[r.Rank] = r.AppNum
		ranks = append(ranks, r.Rank)
	}
	cfg := pmi.NodeConfig{
		KVSName: p.job.KVSName, Size: p.job.Size, Ranks: ranks,
		AppNum:         func(r int) int { return appOf[r] },
		UniverseSize:   p.job.UniverseSize,
		ProcessMapping: p.job.ProcessMapping,
		Uplink:         p.up,
	}
	if p.job.PMITrace {
		cfg.Trace = os.Stderr
	}
	node, err := pmi.NewNode(cfg)
	if err != nil {
		return err
	}
	p.node = node
	if !p.job.PMIPort {
		return nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("PMI_PORT listener: %w", err)
	}
	p.pmiListener = ln
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	uid := os.Getuid()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			// Any local user can connect to a loopback port: only the
			// job's user's sockets may speak PMI (docs/pmi.md).
			if owner, err := sockowner.PeerUID(c); err != nil || owner != uid {
				p.refusePMI(c, fmt.Sprintf("owner uid %d, not the job's %d (%v)", owner, uid, err))
				continue
			}
			go p.servePMI(ctx, -1, c)
		}
	}()
	return nil
}

// pmiForRank returns the env and the inherited descriptor that connect a
// rank to the node's PMI server.
func (p *proxy) pmiForRank(ctx context.Context, rank int) (env []string, child *os.File, err error) {
	if p.job.PMIPort {
		return []string{"PMI_PORT=" + p.pmiListener.Addr().String(), "PMI_ID=" + strconv.Itoa(rank)}, nil, nil
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("PMI socketpair: %w", err)
	}
	parent := os.NewFile(uintptr(fds[0]), "pmi")
	child = os.NewFile(uintptr(fds[1]), "pmi-child")
	conn, err := net.FileConn(parent)
	parent.Close()
	if err != nil {
		child.Close()
		return nil, nil, err
	}
	go p.servePMI(ctx, rank, conn)
	// ExtraFiles[0] becomes descriptor 3 in the rank.
	return []string{"PMI_FD=3"}, child, nil
}

// refusePMI closes a PMI_PORT connection that is not the job's and says so
// on the proxy's stderr; the job goes on.
func (p *proxy) refusePMI(c net.Conn, why string) {
	fmt.Fprintf(p.cfg.Stderr, "refused a PMI connection from %s: %s\n", c.RemoteAddr(), why)
	c.Close()
}

func (p *proxy) servePMI(ctx context.Context, rank int, conn net.Conn) {
	defer conn.Close()
	err := p.node.Serve(ctx, rank, conn)
	if re := (*pmi.RankError)(nil); rank < 0 && errors.As(err, &re) && re.Rank >= 0 {
		rank = re.Rank // PMI_PORT: the connection named its rank
	}
	switch {
	case err == nil, errors.Is(err, pmi.ErrAborted), ctx.Err() != nil:
	case errors.Is(err, pmi.ErrRefused):
		// Not one of the job's ranks speaking (a second claim of a rank
		// over PMI_PORT): refuse it without ending the job.
		fmt.Fprintf(p.cfg.Stderr, "refused a PMI connection from %s: %v\n", conn.RemoteAddr(), err)
	case errors.Is(err, pmi.ErrNoFinalize):
		p.mu.Lock()
		p.noFinalize[rank] = true
		p.mu.Unlock()
	case errors.Is(err, pmi.ErrProtocol):
		p.send(control.Msg{T: control.MsgError, Rank: rank, Error: fmt.Sprintf("PMI: %v", err), At: time.Now().UnixNano()})
	case errors.Is(err, pmi.ErrBarrierBroken):
		// Every waiter of the round gets it; one report names the cause.
		p.mu.Lock()
		first := !p.barrierBroken
		p.barrierBroken = true
		p.mu.Unlock()
		if first {
			p.send(control.Msg{T: control.MsgError, Rank: rank, Code: 1, Error: fmt.Sprintf("PMI: %v", err), At: time.Now().UnixNano()})
		}
	}
}
