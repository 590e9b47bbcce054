//go:build linux

package shm

import (
	"context"
	"sync"
	"testing"
)

// sendOnErr is an ended context whose first Err publishes a frame: the
// peer sends its last message (and dies) in the instant between a
// receive's wait ending and the receive asking its context why.
type sendOnErr struct {
	context.Context
	once sync.Once
	send func()
}

func (c *sendOnErr) Err() error {
	c.once.Do(c.send)
	return c.Context.Err()
}

// A frame published just as a wait ends is not lost: the receive reports
// ErrIdle (its turn ended, nothing consumed) instead of failing, and the
// next receive takes the frame. Before, it failed with the context's error,
// which the runtime takes for the ring's end, dropping the last message
// of a peer that sent it and died.
func TestFrameArrivingAsWaitEnds(t *testing.T) {
	for _, tc := range []struct {
		name string
		recv func(c *Chan, ctx, idle context.Context, dst func(int) []byte) (int, error)
	}{
		{"locked", func(c *Chan, ctx, idle context.Context, dst func(int) []byte) (int, error) {
			return c.RecvSplitIdle(ctx, idle, 0, nil, dst)
		}},
		{"exclusive", func(c *Chan, ctx, idle context.Context, dst func(int) []byte) (int, error) {
			return c.RecvSplitIdleExclusive(ctx, idle, 0, nil, dst)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := pair(t, &Options{RingSize: 4096})
			ended, cancel := context.WithCancel(context.Background())
			cancel()
			ctx := &sendOnErr{Context: ended, send: func() {
				if err := a.Send(context.Background(), nil, []byte("last")); err != nil {
					t.Error(err)
				}
			}}
			var got []byte
			dst := func(n int) []byte { got = make([]byte, n); return got }
			if _, err := tc.recv(b, ctx, ended, dst); err != ErrIdle {
				t.Fatalf("receive whose wait ended as the frame came: %v, want ErrIdle", err)
			}
			if _, err := tc.recv(b, ended, ended, dst); err != nil || string(got) != "last" {
				t.Fatalf("next receive: %q, %v", got, err)
			}
		})
	}
}
