package mpi

import (
	"encoding/gob"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
)

type shape interface{ Area() float64 }

type circle struct{ R float64 }

func (c circle) Area() float64 { return math.Pi * c.R * c.R }

type square struct{ S float64 }

func (s *square) Area() float64 { return s.S * s.S }

type unregistered struct{ N int }

func (unregistered) Area() float64 { return 0 }

func init() {
	gob.Register(circle{})
	gob.Register(&square{})
}

// shapeOf gives each rank a different concrete type behind the interface.
func shapeOf(r int) shape {
	if r%2 == 0 {
		return circle{float64(r)}
	}
	return &square{float64(r)}
}

func sameShape(a, b shape) bool {
	switch x := a.(type) {
	case circle:
		y, ok := b.(circle)
		return ok && x == y
	case *square:
		y, ok := b.(*square)
		return ok && *x == *y
	}
	return false
}

// Interface-typed values (registered with gob) round-trip through the
// value API on every rank, not only on the root.
func TestValueInterfaces(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			transports(t, n, nil, func(t *testing.T, comms []*Comm) {
				each(t, comms, func(c *Comm) error {
					r, n := c.Rank(), c.Size()
					for root := 0; root < n; root++ {
						var v shape
						if r == root {
							v = shapeOf(root)
						}
						if err := BcastValue(c, &v, root); err != nil {
							return fmt.Errorf("bcast root %d: %w", root, err)
						}
						if !sameShape(v, shapeOf(root)) {
							return fmt.Errorf("bcast root %d: got %#v", root, v)
						}
						got, err := ScatterValue(c, []shape{shapeOf(0), shapeOf(1), shapeOf(2), shapeOf(3), shapeOf(4)}[:n], root)
						if err != nil || !sameShape(got, shapeOf(r)) {
							return fmt.Errorf("scatter root %d: %#v, %v", root, got, err)
						}
						all, err := GatherValue(c, shapeOf(r), root)
						if err != nil {
							return fmt.Errorf("gather root %d: %w", root, err)
						}
						for i := range all {
							if !sameShape(all[i], shapeOf(i)) {
								return fmt.Errorf("gather root %d: [%d] = %#v", root, i, all[i])
							}
						}
					}
					all, err := AllgatherValue(c, shapeOf(r))
					if err != nil {
						return fmt.Errorf("allgather: %w", err)
					}
					for i := range all {
						if !sameShape(all[i], shapeOf(i)) {
							return fmt.Errorf("allgather: [%d] = %#v", i, all[i])
						}
					}
					out := make([]shape, n)
					for i := range out {
						out[i] = shapeOf(r*10 + i)
					}
					in, err := AlltoallValue(c, out)
					if err != nil {
						return fmt.Errorf("alltoall: %w", err)
					}
					for i := range in {
						if !sameShape(in[i], shapeOf(i*10+r)) {
							return fmt.Errorf("alltoall: [%d] = %#v", i, in[i])
						}
					}
					// Point to point: an interface value sent as itself is
					// received into an interface or into its concrete type.
					if n > 1 {
						right, left := (r+1)%n, (r+n-1)%n
						if err := c.SendValue(shapeOf(r), right, 5); err != nil {
							return err
						}
						var s shape
						if _, err := c.RecvValue(&s, left, 5); err != nil || !sameShape(s, shapeOf(left)) {
							return fmt.Errorf("recv value into interface: %#v, %v", s, err)
						}
						if err := c.SendValue(circle{float64(r)}, right, 6); err != nil {
							return err
						}
						var ci circle
						if _, err := c.RecvValue(&ci, left, 6); err != nil || ci.R != float64(left) {
							return fmt.Errorf("recv value into concrete: %#v, %v", ci, err)
						}
						// gob's conversions still apply: an int into an int64.
						if err := c.SendValue(r, right, 7); err != nil {
							return err
						}
						var i64 int64
						if _, err := c.RecvValue(&i64, left, 7); err != nil || i64 != int64(left) {
							return fmt.Errorf("recv int into int64: %d, %v", i64, err)
						}
					}
					return nil
				})
			})
		})
	}
}

// A value the codec cannot encode is an error on every rank (never a
// panic, never ranks that disagree), and the communicator stays usable.
func TestValueCodecErrorsEveryRank(t *testing.T) {
	for _, n := range []int{1, 2, 4} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			transports(t, n, nil, func(t *testing.T, comms []*Comm) {
				each(t, comms, func(c *Comm) error {
					r, n := c.Rank(), c.Size()
					want := func(what string, err error) error {
						if !errors.Is(err, ErrCodec) {
							return fmt.Errorf("%s: %v, want ErrCodec", what, err)
						}
						return nil
					}
					for root := 0; root < n; root++ {
						// The root's value has a nil pointer (gob panics on it),
						// or an unregistered type behind an interface.
						var v *square
						if err := want("bcast nil pointer", BcastValue(c, &v, root)); err != nil {
							return err
						}
						var s shape = square{}.ptr()
						if r == root {
							s = unregistered{r}
						}
						if err := want("bcast unregistered", BcastValue(c, &s, root)); err != nil {
							return err
						}
						if n == 1 {
							continue // a rank's own value is never encoded
						}
						// One rank's contribution fails: all ranks hear of it.
						var g shape = circle{1}
						if r == (root+1)%n {
							g = unregistered{r}
						}
						_, err := GatherValue(c, g, root)
						if err := want("gather", err); err != nil {
							return err
						}
						vals := []shape{circle{}, circle{}, circle{}, circle{}}[:n]
						vals[(root+1)%n] = unregistered{}
						_, err = ScatterValue(c, vals, root)
						if err := want("scatter", err); err != nil {
							return err
						}
					}
					var g shape = circle{1}
					if r == n-1 {
						g = unregistered{r}
					}
					_, err := AllgatherValue(c, g)
					if err := want("allgather", err); err != nil {
						return err
					}
					_, err = AllreduceValue(c, g, func(a, b shape) shape { return a })
					if err := want("allreduce", err); err != nil {
						return err
					}
					if n > 1 {
						vals := []shape{circle{}, circle{}, circle{}, circle{}}[:n]
						vals[(r+1)%n] = unregistered{}
						_, err = AlltoallValue(c, vals)
						if err := want("alltoall", err); err != nil {
							return err
						}
					}
					// Decoding fails on the receivers only (the type differs
					// from what was sent): the root hears of it too.
					if n > 1 {
						var x any
						if r == 0 {
							x = struct{ A chan int }{}
						}
						err := func() (err error) {
							defer func() {
								if p := recover(); p != nil {
									err = fmt.Errorf("panic: %v", p)
								}
							}()
							return BcastValue(c, &x, 0)
						}()
						if err := want("bcast chan", err); err != nil {
							return err
						}
						var i int
						var str string
						if r == 0 {
							str = "not a number"
						}
						if r == 0 {
							err = BcastValue(c, &str, 0)
						} else {
							err = BcastValue(c, &i, 0) // a string cannot decode into an int
						}
						if err := want("bcast decode", err); err != nil {
							return err
						}
					}
					// Point to point: a nil pointer is an error, and the
					// receiver of a value that failed to encode gets one too.
					if err := want("send nil pointer", c.SendValue((*circle)(nil), r, 1)); err != nil {
						return err
					}
					if err := want("send nil", c.SendValue(nil, r, 1)); err != nil {
						return err
					}
					if n > 1 {
						right, left := (r+1)%n, (r+n-1)%n
						if err := want("send unencodable", c.SendValue(make(chan int), right, 2)); err != nil {
							return err
						}
						var x int
						_, err := c.RecvValue(&x, left, 2)
						if err := want("recv unencodable", err); err != nil {
							return err
						}
					}
					// Still usable afterwards.
					v := r
					if err := BcastValue(c, &v, 0); err != nil || v != 0 {
						return fmt.Errorf("bcast after errors: %d, %v", v, err)
					}
					return nil
				})
			})
		})
	}
}

func (square) ptr() *square { return &square{1} }

// A value message from a peer never panics the receiver, whatever its
// bytes: it decodes or returns an error wrapping ErrCodec (ErrArg for a
// relayed argument error, frame valArg).
func FuzzValueDecode(f *testing.F) {
	c := &Comm{p: &proc{cfg: Config{Codec: gobCodec{}}}}
	for _, v := range []any{42, "s", circle{2}, []shape{circle{1}, &square{2}}, map[string]int{"a": 1}} {
		b, err := c.encodeValue(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{valFailed, 'x'})
	f.Add([]byte{valArg, 'x'})
	f.Fuzz(func(t *testing.T, msg []byte) {
		var s shape
		var m map[string]int
		var x any
		for _, p := range []any{&s, &m, &x} {
			err := c.decodeValue(msg, 1, p)
			if len(msg) > 0 && msg[0] == valArg {
				if !errors.Is(err, ErrArg) {
					t.Fatalf("argument error frame: %v does not wrap ErrArg", err)
				}
				continue
			}
			if err != nil && !errors.Is(err, ErrCodec) {
				t.Fatalf("%T: %v does not wrap ErrCodec", p, err)
			}
		}
	})
}

// TestRecvValueBadPointer: RecvValue into something that is not a non-nil
// pointer is ErrArg at once, naming the argument, and leaves the message
// for the next receive (it used to wait for a message, consume it, and
// only then fail to decode).
func TestRecvValueBadPointer(t *testing.T) {
	var nilp *int
	for _, tc := range []struct {
		name string
		ptr  any
	}{{"nil", nil}, {"non-pointer", 3}, {"nil pointer", nilp}} {
		t.Run(tc.name, func(t *testing.T) {
			transports(t, 2, nil, func(t *testing.T, comms []*Comm) {
				// Before the message is sent: must not wait for it.
				_, err := comms[0].RecvValue(tc.ptr, 1, 7)
				if !errors.Is(err, ErrArg) || !strings.Contains(err.Error(), "tag 7") {
					t.Fatalf("RecvValue(%#v) before the send: %v, want ErrArg naming tag 7", tc.ptr, err)
				}
				if err := comms[1].SendValue(42, 0, 7); err != nil {
					t.Fatal(err)
				}
				if _, err := comms[0].RecvValue(tc.ptr, 1, 7); !errors.Is(err, ErrArg) {
					t.Fatalf("RecvValue(%#v): %v, want ErrArg", tc.ptr, err)
				}
				var v int
				if _, err := comms[0].RecvValue(&v, 1, 7); err != nil || v != 42 {
					t.Fatalf("the message after a refused RecvValue: %d, %v", v, err)
				}
			})
		})
	}
}

// TestScatterValueCountEveryRank: a ScatterValue root with the wrong
// number of values fails with ErrArg, and so does every other rank
// (it used to return at once and leave the others waiting for ever).
func TestScatterValueCountEveryRank(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			transports(t, n, nil, func(t *testing.T, comms []*Comm) {
				each(t, comms, func(c *Comm) error {
					root := c.Size() - 1
					var vals []string
					if c.Rank() == root {
						vals = make([]string, c.Size()+1)
					}
					if _, err := ScatterValue(c, vals, root); !errors.Is(err, ErrArg) || !strings.Contains(err.Error(), fmt.Sprintf("%d values", n+1)) {
						return fmt.Errorf("scattervalue with %d values: %v, want ErrArg naming the count", n+1, err)
					}
					// The communicator is still usable.
					if c.Rank() == root {
						vals = vals[:n]
						vals[0] = "ok"
					}
					got, err := ScatterValue(c, vals, root)
					if want := map[bool]string{true: "ok"}[c.Rank() == 0]; err != nil || got != want {
						return fmt.Errorf("scattervalue after the error: %q, %v; want %q", got, err, want)
					}
					return nil
				})
			})
		})
	}
}
