package mpiexec

import (
	"encoding/json"
	"sync"

	"github.com/gompi/gompi/hostfile"
	"github.com/gompi/gompi/internal/control"
	"github.com/gompi/gompi/internal/launcher"
)

// plannedTop is a proxy gompiexec starts itself, with the subtree it
// starts in turn and the recipe it uses for that.
type plannedTop struct {
	sub    control.Subtree
	recipe launcher.Recipe
}

// planTree arranges hosts into launch trees of the given fanout. Hosts
// that share a re-creatable backend recipe form one tree; a host whose
// backend is a fork for this machine among remote hosts (or that cannot be
// described) is started by gompiexec itself. Host 0 (rank 0, stdin) is
// always a top. At most fanout tops per tree; each proxy starts at most
// fanout children.
func planTree(hosts []hostfile.Host, backend func(hostfile.Host) launcher.Backend, fanout int,
	ranks func(host int) []control.RankSpec) []plannedTop {
	type group struct {
		recipe launcher.Recipe
		hosts  []int
	}
	recipes := make([]*launcher.Recipe, len(hosts))
	allFork := true
	for i, h := range hosts {
		if d, ok := backend(h).(launcher.Describer); ok {
			r := d.Recipe()
			recipes[i] = &r
			allFork = allFork && r.Name == "fork"
		} else {
			allFork = false
		}
	}
	var tops []plannedTop
	var groups []*group
	byKey := map[string]*group{}
	for i := range hosts {
		r := recipes[i]
		// A fork means "this machine" only as seen from gompiexec, unless
		// every host is forked (-launcher fork: all hosts are this one).
		if r == nil || (r.Name == "fork" && !allFork) {
			tops = append(tops, plannedTop{sub: control.Subtree{Index: i, Host: hosts[i].Name, User: hosts[i].User,
				BindTo: hosts[i].Binding, Ranks: ranks(i)}})
			continue
		}
		kb, _ := json.Marshal(r)
		g := byKey[string(kb)]
		if g == nil {
			g = &group{recipe: *r}
			byKey[string(kb)] = g
			groups = append(groups, g)
		}
		g.hosts = append(g.hosts, i)
	}
	var build func(idx []int) []control.Subtree
	build = func(idx []int) []control.Subtree {
		if len(idx) == 0 {
			return nil
		}
		k := min(fanout, len(idx))
		out := make([]control.Subtree, 0, k)
		// k contiguous chunks of near-equal size; each chunk's first host
		// starts the rest of its chunk.
		for c := 0; c < k; c++ {
			lo, hi := c*len(idx)/k, (c+1)*len(idx)/k
			h := idx[lo]
			out = append(out, control.Subtree{Index: h, Host: hosts[h].Name, User: hosts[h].User,
				BindTo: hosts[h].Binding, Ranks: ranks(h), Children: build(idx[lo+1 : hi])})
		}
		return out
	}
	for _, g := range groups {
		for _, st := range build(g.hosts) {
			tops = append(tops, plannedTop{sub: st, recipe: g.recipe})
		}
	}
	// Keep host order among tops so host 0 comes first.
	for i := 1; i < len(tops); i++ {
		for k := i; k > 0 && tops[k].sub.Index < tops[k-1].sub.Index; k-- {
			tops[k], tops[k-1] = tops[k-1], tops[k]
		}
	}
	return tops
}

// outbox queues one top-level proxy's control messages and sends them in
// order from a single goroutine, so the supervision loop never blocks on a
// slow proxy and a signal queued before a kill arrives before it.
type outbox struct {
	mu   sync.Mutex
	q    []control.Msg
	wake chan struct{}
}

func (o *outbox) init() { o.wake = make(chan struct{}, 1) }

func (o *outbox) push(m control.Msg) {
	o.mu.Lock()
	o.q = append(o.q, m)
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// run sends queued messages until stop is closed or a send fails (the
// reader then reports the proxy lost).
func (o *outbox) run(conn *control.Conn, stop <-chan struct{}) {
	for {
		select {
		case <-o.wake:
		case <-stop:
			return
		}
		o.mu.Lock()
		q := o.q
		o.q = nil
		o.mu.Unlock()
		for _, m := range q {
			if conn.Send(m) != nil {
				return
			}
		}
	}
}
