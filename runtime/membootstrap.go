package mpi

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
)

// MemJob is an in-memory process manager for running several runtime
// instances in one process (tests, simulations). MemJob.Rank(i) is the
// Bootstrap of rank i.
type MemJob struct {
	size    int
	mu      sync.Mutex
	kvs     map[string]string
	pending map[string]string
	arrived int
	round   chan struct{}
	aborted chan struct{}
	abort   sync.Once
	code    int
	name    string
}

var memJobs atomic.Int64

// NewMemJob returns an in-memory job of size ranks.
func NewMemJob(size int) *MemJob {
	return &MemJob{size: size, kvs: map[string]string{}, pending: map[string]string{},
		round: make(chan struct{}), aborted: make(chan struct{}),
		name: fmt.Sprintf("mem%d_%d", os.Getpid(), memJobs.Add(1))}
}

// KVSName names the job (unique within the machine), like a PMI kvsname.
func (b *memBoot) KVSName() string { return b.j.name }

// Rank returns rank i's Bootstrap.
func (j *MemJob) Rank(i int) Bootstrap { return &memBoot{j: j, rank: i} }

// Aborted is closed when a rank calls Abort; AbortCode is its code.
func (j *MemJob) Aborted() <-chan struct{} { return j.aborted }

// AbortCode is the code of the first Abort.
func (j *MemJob) AbortCode() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.code
}

type memBoot struct {
	j    *MemJob
	rank int
}

func (b *memBoot) Rank() int { return b.rank }
func (b *memBoot) Size() int { return b.j.size }

func (b *memBoot) Put(key, value string) error {
	b.j.mu.Lock()
	defer b.j.mu.Unlock()
	b.j.pending[key] = value
	return nil
}

func (b *memBoot) Fence(ctx context.Context) error {
	j := b.j
	j.mu.Lock()
	ch := j.round
	j.arrived++
	if j.arrived == j.size {
		for k, v := range j.pending {
			j.kvs[k] = v
		}
		j.pending = map[string]string{}
		j.arrived = 0
		j.round = make(chan struct{})
		close(ch)
	}
	j.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (b *memBoot) Get(ctx context.Context, key string) (string, error) {
	b.j.mu.Lock()
	defer b.j.mu.Unlock()
	v, ok := b.j.kvs[key]
	if !ok {
		return "", fmt.Errorf("mem kvs: key %q not found", key)
	}
	return v, nil
}

func (b *memBoot) Abort(code int, msg string) error {
	b.j.abort.Do(func() {
		b.j.mu.Lock()
		b.j.code = code
		b.j.mu.Unlock()
		close(b.j.aborted)
	})
	return nil
}

func (b *memBoot) Finalize() error { return nil }
