package mpi

import (
	"errors"
	"fmt"
	"testing"
)

// Sendrecv with overlapping buffers is an error (it corrupted data);
// SendrecvReplace shifts a ring in place, eager and rendezvous.
func TestSendrecvAliasingAndReplace(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			transports(t, n, func(c *Config) { c.EagerLimit = 1024 }, func(t *testing.T, comms []*Comm) {
				each(t, comms, func(c *Comm) error {
					r, n := c.Rank(), c.Size()
					right, left := (r+1)%n, (r+n-1)%n
					buf := make([]int64, 16)
					for name, rb := range map[string][]int64{"same": buf, "inside": buf[4:8], "tail": buf[15:], "head": buf[:1]} {
						if _, err := Sendrecv(c, buf, right, 1, rb, left, 1); !errors.Is(err, ErrArg) {
							return fmt.Errorf("Sendrecv %s slice: %v, want ErrArg", name, err)
						}
					}
					// Disjoint halves of one array are fine.
					for i := range buf {
						buf[i] = int64(r*100 + i)
					}
					if _, err := Sendrecv(c, buf[:8], right, 2, buf[8:], left, 2); err != nil {
						return fmt.Errorf("Sendrecv disjoint halves: %w", err)
					}
					if buf[8] != int64(left*100) || buf[15] != int64(left*100+7) {
						return fmt.Errorf("Sendrecv disjoint halves: got %v", buf[8:])
					}
					for _, size := range []int{0, 1, 100, 1000} { // 1000 int64s: rendezvous
						b := make([]int64, size)
						for i := range b {
							b[i] = int64(r*1_000_000 + i)
						}
						st, err := SendrecvReplace(c, b, right, 3, left, 3)
						if err != nil {
							return fmt.Errorf("SendrecvReplace %d: %w", size, err)
						}
						if st.Source != left || st.Count != size {
							return fmt.Errorf("SendrecvReplace %d: status %+v", size, st)
						}
						for i := range b {
							if b[i] != int64(left*1_000_000+i) {
								return fmt.Errorf("SendrecvReplace %d: b[%d] = %d", size, i, b[i])
							}
						}
					}
					return nil
				})
			})
		})
	}
}
