//go:build !linux

package shm

import (
	"context"
	"time"
)

// Chan is one end of a channel; on this platform none can be made.
type Chan struct{}

// Connect returns ErrUnsupported: the channels need Linux futexes.
func Connect(ctx context.Context, jobID string, self, peer int, opt *Options) (*Chan, error) {
	return nil, ErrUnsupported
}

// Send returns ErrUnsupported.
func (c *Chan) Send(ctx context.Context, hdr, payload []byte) error { return ErrUnsupported }

// SendMany returns ErrUnsupported.
func (c *Chan) SendMany(ctx context.Context, n int, frame func(i int) (hdr, payload []byte)) (int, error) {
	return 0, ErrUnsupported
}

// TrySend returns ErrUnsupported.
func (c *Chan) TrySend(hdr, payload []byte) (bool, error) { return false, ErrUnsupported }

// Recv returns ErrUnsupported.
func (c *Chan) Recv(ctx context.Context, dst func(n int) []byte) (int, error) {
	return 0, ErrUnsupported
}

// RecvSplit returns ErrUnsupported.
func (c *Chan) RecvSplit(ctx context.Context, hdr []byte, dst func(n int) []byte) (int, error) {
	return 0, ErrUnsupported
}

// RecvSplitIdle returns ErrUnsupported.
func (c *Chan) RecvSplitIdle(ctx, idle context.Context, spin time.Duration, hdr []byte, dst func(n int) []byte) (int, error) {
	return 0, ErrUnsupported
}

// RecvBytes returns ErrUnsupported.
func (c *Chan) RecvBytes(ctx context.Context) ([]byte, error) { return nil, ErrUnsupported }

// Close does nothing.
func (c *Chan) Close() error { return nil }

// RecvSplitIdleExclusive is not supported on this platform.
func (c *Chan) RecvSplitIdleExclusive(ctx, idle context.Context, spin time.Duration, hdr []byte, dst func(n int) []byte) (int, error) {
	return 0, ErrUnsupported
}

// Shutdown does nothing on this platform.
func (c *Chan) Shutdown() {}

// SetWord does nothing.
func (c *Chan) SetWord(v uint64) {}

// PeerWord returns 0.
func (c *Chan) PeerWord() uint64 { return 0 }

// Pending returns false.
func (c *Chan) Pending() bool { return false }

// PendingExclusive reports false: there is no shared memory here.
func (c *Chan) PendingExclusive() bool { return false }
