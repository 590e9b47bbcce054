package mpi

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// ev is one step of a matching scenario: a message arriving from the
// network ("msg"), or a receive being posted ("recv").
type ev struct {
	kind     string
	ctx      uint32
	src, tag int
	id       string // message payload / receive name
}

func TestMatching(t *testing.T) {
	cases := []struct {
		name   string
		events []ev
		want   map[string]string // receive -> payload it got ("" = still pending)
		left   int               // unexpected messages left
	}{
		{"posted first", []ev{{"recv", 0, 1, 5, "r"}, {"msg", 0, 1, 5, "a"}}, map[string]string{"r": "a"}, 0},
		{"unexpected first", []ev{{"msg", 0, 1, 5, "a"}, {"recv", 0, 1, 5, "r"}}, map[string]string{"r": "a"}, 0},
		{"fifo per source and tag", []ev{{"msg", 0, 1, 5, "a"}, {"msg", 0, 1, 5, "b"}, {"recv", 0, 1, 5, "r1"}, {"recv", 0, 1, 5, "r2"}},
			map[string]string{"r1": "a", "r2": "b"}, 0},
		{"tag selects", []ev{{"msg", 0, 1, 5, "a"}, {"msg", 0, 1, 6, "b"}, {"recv", 0, 1, 6, "r"}}, map[string]string{"r": "b"}, 1},
		{"source selects", []ev{{"msg", 0, 2, 5, "a"}, {"msg", 0, 1, 5, "b"}, {"recv", 0, 1, 5, "r"}}, map[string]string{"r": "b"}, 1},
		{"any source takes the earliest", []ev{{"msg", 0, 2, 5, "a"}, {"msg", 0, 1, 5, "b"}, {"recv", 0, AnySource, 5, "r"}}, map[string]string{"r": "a"}, 1},
		{"any tag takes the earliest", []ev{{"msg", 0, 1, 7, "a"}, {"msg", 0, 1, 5, "b"}, {"recv", 0, 1, AnyTag, "r"}}, map[string]string{"r": "a"}, 1},
		{"both wildcards", []ev{{"recv", 0, AnySource, AnyTag, "r"}, {"msg", 0, 3, 9, "a"}}, map[string]string{"r": "a"}, 0},
		{"contexts never cross", []ev{{"msg", 2, 1, 5, "a"}, {"recv", 0, 1, 5, "r"}}, map[string]string{"r": ""}, 1},
		{"earliest posted receive wins", []ev{{"recv", 0, AnySource, 5, "r1"}, {"recv", 0, 1, 5, "r2"}, {"msg", 0, 1, 5, "a"}, {"msg", 0, 1, 5, "b"}},
			map[string]string{"r1": "a", "r2": "b"}, 0},
		{"specific receive skips others' messages", []ev{{"recv", 0, 1, 5, "r"}, {"msg", 0, 2, 5, "a"}, {"msg", 0, 1, 5, "b"}},
			map[string]string{"r": "b"}, 1},
		{"no match stays pending", []ev{{"recv", 0, 1, 5, "r"}, {"msg", 0, 1, 6, "a"}}, map[string]string{"r": ""}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine()
			got := map[string]string{}
			reqs := map[string]*recvOp{}
			for _, ev := range tc.events {
				switch ev.kind {
				case "recv":
					op := &recvOp{ctx: ev.ctx, src: ev.src, tag: ev.tag, srcWorld: -1, req: newRequest()}
					reqs[ev.id] = op
					got[ev.id] = ""
					m, err := e.post(op)
					if err != nil {
						t.Fatal(err)
					}
					if m != nil {
						got[ev.id] = string(m.data)
					}
				case "msg":
					m := &message{ctx: ev.ctx, src: ev.src, tag: ev.tag, data: []byte(ev.id)}
					if op := e.arrive(m); op != nil {
						for name, r := range reqs {
							if r == op {
								got[name] = ev.id
							}
						}
					}
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("got %v want %v", got, tc.want)
			}
			if e.unexpected.len() != tc.left {
				t.Errorf("%d unexpected left, want %d", e.unexpected.len(), tc.left)
			}
		})
	}
}

func TestMatchingTruncateAndProbe(t *testing.T) {
	p := testProc(3, 64)
	c := p.world
	for i, d := range []string{"0123456789", "ab"} {
		m := &message{ctx: 0, src: 1, tag: i, srcWorld: 1, data: []byte(d)}
		if p.eng.arrive(m) != nil {
			t.Fatal("matched with nothing posted")
		}
	}
	ok, st, err := Iprobe[uint16](c, 1, AnyTag)
	if !ok || err != nil || st.Count != 5 || st.Bytes != 10 || st.Tag != 0 {
		t.Fatalf("iprobe %v %+v %v", ok, st, err)
	}
	buf := make([]uint16, 2)
	st, err = Recv(c, buf, 1, 0)
	if !errors.Is(err, ErrTruncate) || st.Count != 2 || st.Bytes != 4 {
		t.Fatalf("truncate %+v %v", st, err)
	}
	st, err = Recv(c, buf, AnySource, AnyTag)
	if err != nil || st.Count != 1 || st.Tag != 1 {
		t.Fatalf("second %+v %v", st, err)
	}
}

func TestMatchingPeerFailure(t *testing.T) {
	p := testProc(3, 64)
	c := p.world
	mine := Irecv(c, make([]byte, 1), 1, 0)
	other := Irecv(c, make([]byte, 1), 2, 0)
	anyReq := Irecv(c, make([]byte, 1), AnySource, 0)
	// A message from the failing peer that arrived before it failed can
	// still be received.
	p.eng.arrive(&message{ctx: 0, src: 1, tag: 9, srcWorld: 1, data: []byte("x")})
	perr := &PeerError{Rank: 1, Err: errors.New("gone")}
	p.eng.failSource(1, perr, false)
	var pe *PeerError
	if ok, _, err := mine.Test(); !ok || !errors.As(err, &pe) {
		t.Fatalf("receive from failed peer: %v %v", ok, err)
	}
	if ok, _, err := anyReq.Test(); !ok || !errors.As(err, &pe) {
		t.Fatalf("AnySource receive: %v %v", ok, err)
	}
	if ok, _, _ := other.Test(); ok {
		t.Fatal("receive from a live peer completed")
	}
	if _, err := Recv(c, make([]byte, 1), 1, 9); err != nil {
		t.Fatalf("message that arrived before the failure: %v", err)
	}
	if _, err := Recv(c, make([]byte, 1), 1, 9); !errors.As(err, &pe) {
		t.Fatalf("later receive: %v", err)
	}
	// An orderly finalize fails only receives naming that peer.
	p.eng.failSource(2, &PeerError{Rank: 2, Err: ErrPeerFinalized}, true)
	if _, _, err := other.Test(); !errors.Is(err, ErrPeerFinalized) {
		t.Fatalf("receive from finalized peer: %v", err)
	}
}

// The engine's queues keep order under any mix of pushes and removals, and
// a queue emptied and refilled over and over (a window of receives posted
// and matched) reuses its array.
func TestFifo(t *testing.T) {
	vals := make([]int, 200)
	for i := range vals {
		vals[i] = i
	}
	for _, tc := range []struct {
		name string
		ops  string // p: push the next value; 0: remove the head; 1: remove the second; l: the last
	}{
		{"window", strings.Repeat("p", 64) + strings.Repeat("0", 64) + strings.Repeat("p", 64) + strings.Repeat("0", 64)},
		{"interleaved", strings.Repeat("pp0", 50)},
		{"middle", "pppp1l0p1pp0l00"},
		{"compact", strings.Repeat("p", 8) + "000" + strings.Repeat("p", 20) + strings.Repeat("0", 25)},
	} {
		var f fifo[int]
		var ref []*int
		next := 0
		for k, op := range tc.ops {
			switch op {
			case 'p':
				f.push(&vals[next])
				ref = append(ref, &vals[next])
				next++
			case '0', '1', 'l':
				i := map[rune]int{'0': 0, '1': 1, 'l': len(ref) - 1}[op]
				if i < 0 || i >= len(ref) {
					continue
				}
				f.removeAt(i)
				ref = append(ref[:i:i], ref[i+1:]...)
			}
			got := f.items()
			if len(got) != len(ref) || f.len() != len(ref) {
				t.Fatalf("%s, op %d: %d items, want %d", tc.name, k, len(got), len(ref))
			}
			for i := range ref {
				if got[i] != ref[i] {
					t.Fatalf("%s, op %d: item %d is %d, want %d", tc.name, k, i, *got[i], *ref[i])
				}
			}
			for i := 0; i < f.head; i++ {
				if f.buf[i] != nil {
					t.Fatalf("%s, op %d: removed item %d still reachable", tc.name, k, i)
				}
			}
		}
	}
	var f fifo[int]
	x := new(int)
	allocs := testing.AllocsPerRun(100, func() {
		for range 64 {
			f.push(x)
		}
		for range 64 {
			f.removeAt(0)
		}
	})
	if allocs != 0 {
		t.Errorf("a window posted and matched allocates %v times", allocs)
	}
}
