package pmi

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// ErrJobClosed is returned to fence waiters when the job ends.
var ErrJobClosed = errors.New("pmi: job is ending")

// Job is the launcher's side of PMI: the job-wide key-value space, fences
// completed once every node has arrived, and the name service. Its work per
// fence grows with nodes, not ranks.
type Job struct {
	nodes int

	mu     sync.Mutex
	kvs    map[string]string
	cur    *round
	closed error
	names  map[string]string
}

// round is one fence; waiters keep a pointer to theirs, so a late waker
// never sees the next round's result.
type round struct {
	puts    map[string]string
	arrived map[int]bool
	done    chan struct{}
	err     error
}

func newRound() *round {
	return &round{puts: map[string]string{}, arrived: map[int]bool{}, done: make(chan struct{})}
}

// NewJob returns the key-value space for a job spread over nodes nodes.
func NewJob(nodes int) *Job {
	return &Job{nodes: nodes, kvs: map[string]string{}, cur: newRound(), names: map[string]string{}}
}

// Fence records node's puts for the current round and blocks until every
// node has fenced; it returns every pair put in the round. The map is
// shared by all callers of the round and must not be modified.
func (j *Job) Fence(ctx context.Context, node int, puts []KV) (map[string]string, error) {
	f, err := j.Arrive(node, puts)
	if err != nil {
		return nil, err
	}
	return f.Wait(ctx)
}

// Arrival is one node's entry in a fence round, to wait on.
type Arrival struct{ r *round }

// Arrive is Fence's first half: it records node's puts for the current
// round at once, so a caller can know (Pending) which nodes the round
// still waits for before anyone waits on it.
func (j *Job) Arrive(node int, puts []KV) (Arrival, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed != nil {
		return Arrival{}, j.closed
	}
	r := j.cur
	if node < 0 || node >= j.nodes {
		return Arrival{}, fmt.Errorf("pmi: fence from unknown node %d", node)
	}
	if r.arrived[node] {
		return Arrival{}, fmt.Errorf("pmi: node %d fenced twice in one round", node)
	}
	r.arrived[node] = true
	for _, kv := range puts {
		j.kvs[kv.Key] = kv.Value
		r.puts[kv.Key] = kv.Value
	}
	if len(r.arrived) == j.nodes {
		j.cur = newRound()
		close(r.done)
	}
	return Arrival{r}, nil
}

// Wait blocks until the arrival's round is complete and returns its pairs.
func (a Arrival) Wait(ctx context.Context) (map[string]string, error) {
	select {
	case <-a.r.done:
		return a.r.puts, a.r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Pending reports whether a fence round is under way (some node has
// arrived) that node has not arrived in yet.
func (j *Job) Pending(node int) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.closed == nil && len(j.cur.arrived) > 0 && !j.cur.arrived[node]
}

// Get returns a value put anywhere in the job (after its fence).
func (j *Job) Get(key string) (string, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	v, ok := j.kvs[key]
	return v, ok
}

// Close fails every waiting and future fence with err (the job is ending).
func (j *Job) Close(err error) {
	if err == nil {
		err = ErrJobClosed
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed != nil {
		return
	}
	j.closed = err
	j.cur.err = err
	j.cur.puts = nil
	close(j.cur.done)
}

// Publish registers service at port.
func (j *Job) Publish(service, port string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, ok := j.names[service]; ok {
		return fmt.Errorf("publish %q: %w", service, ErrExists)
	}
	j.names[service] = port
	return nil
}

// Unpublish removes service.
func (j *Job) Unpublish(service string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, ok := j.names[service]; !ok {
		return fmt.Errorf("unpublish %q: %w", service, ErrNotFound)
	}
	delete(j.names, service)
	return nil
}

// Lookup finds a published service.
func (j *Job) Lookup(service string) (string, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	p, ok := j.names[service]
	if !ok {
		return "", fmt.Errorf("lookup %q: %w", service, ErrNotFound)
	}
	return p, nil
}
