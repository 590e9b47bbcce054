package pmi

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

// portConn opens a PMI_PORT-mode connection (the rank is not known until
// the client names it) to n.
func portConn(t *testing.T, ctx context.Context, n *Node) (*client, chan error) {
	t.Helper()
	a, b := net.Pipe()
	ch := make(chan error, 1)
	go func() { ch <- n.Serve(ctx, -1, b) }()
	return &client{t: t, conn: a, r: bufio.NewReader(a)}, ch
}

// In PMI_PORT mode any local process may connect: a second connection
// naming a rank already claimed is refused (PMI-1 initack and PMI-2
// fullinit), and the refusal is ErrRefused, not a protocol error of the
// job's rank.
func TestSecondClaimRefused(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n, err := NewNode(NodeConfig{KVSName: "k", Size: 2, Ranks: []int{0, 1}, Uplink: &jobUplink{job: NewJob(1)}})
	if err != nil {
		t.Fatal(err)
	}
	first, _ := portConn(t, ctx, n)
	if got := first.do("cmd=initack pmiid=1"); got != "cmd=initack" {
		t.Fatalf("first claim: %q", got)
	}
	second, errs := portConn(t, ctx, n)
	if got := second.do("cmd=initack pmiid=1"); !strings.Contains(got, "rc=-1") {
		t.Fatalf("second claim answered %q", got)
	}
	if err := <-errs; !errors.Is(err, ErrRefused) || errors.Is(err, ErrProtocol) {
		t.Fatalf("second claim: %v, want ErrRefused", err)
	}
	// PMI-2: the same rank through fullinit.
	third, errs := portConn(t, ctx, n)
	third.do("cmd=init pmi_version=2 pmi_subversion=0")
	c2 := &client2{t: t, conn: third.conn, r: third.r}
	if got := c2.do("cmd=fullinit;pmirank=1;"); !strings.Contains(got, "rc=-1") {
		t.Fatalf("PMI-2 second claim answered %q", got)
	}
	if err := <-errs; !errors.Is(err, ErrRefused) {
		t.Fatalf("PMI-2 second claim: %v", err)
	}
	// A PMI-2 connection that names no rank cannot fence or put.
	fourth, errs := portConn(t, ctx, n)
	fourth.do("cmd=init pmi_version=2 pmi_subversion=0")
	c2 = &client2{t: t, conn: fourth.conn, r: fourth.r}
	if got := c2.do("cmd=kvs-fence;"); !strings.Contains(got, "rc=-1") {
		t.Fatalf("anonymous fence answered %q", got)
	}
	if err := <-errs; !errors.Is(err, ErrRefused) {
		t.Fatalf("anonymous fence: %v", err)
	}
	// Rank 0 is still free to claim.
	ok, _ := portConn(t, ctx, n)
	if got := ok.do("cmd=initack pmiid=0"); got != "cmd=initack" {
		t.Fatalf("rank 0 claim: %q", got)
	}
}

// A barrier is released by every local rank entering, not by as many
// entries: one rank entering twice (only possible from two connections,
// which claims already prevent) neither counts twice nor releases it.
func TestBarrierCountsDistinctRanks(t *testing.T) {
	up := &jobUplink{job: NewJob(1)}
	n, err := NewNode(NodeConfig{KVSName: "k", Size: 2, Ranks: []int{0, 1}, Uplink: up})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := make(chan error, 1)
	go func() { first <- n.barrier(ctx, 0) }()
	// Wait until rank 0 is in.
	for deadline := time.Now().Add(5 * time.Second); ; {
		n.mu.Lock()
		in := n.entered[0]
		n.mu.Unlock()
		if in {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("rank 0 never entered")
		}
		time.Sleep(time.Millisecond)
	}
	if err := n.barrier(ctx, 0); !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("second entry of rank 0: %v", err)
	}
	if err := n.barrier(ctx, -1); !errors.Is(err, ErrRefused) {
		t.Fatalf("entry of no rank: %v", err)
	}
	select {
	case err := <-first:
		t.Fatalf("barrier released before rank 1 entered: %v", err)
	default:
	}
	if err := n.barrier(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
}

// A rank that has ended without entering the current barrier round makes
// the round fail at once, naming it, whether it left before or while the
// others wait; a rank that entered before it left does not, and a round
// no rank enters fails nothing.
func TestBarrierFailsWhenARankLeft(t *testing.T) {
	tests := []struct {
		name   string
		before []int // ranks that leave before the others enter
		enter  []int // ranks entering (waiting in the barrier)
		after  []int // ranks that leave while they wait
		broken bool
	}{
		{"left before the round", []int{0}, []int{1, 2}, nil, true},
		{"left during the round", nil, []int{1, 2}, []int{0}, true},
		{"entered, then left", nil, []int{0, 1}, []int{0}, false},
		{"nobody fences", []int{0, 1, 2}, nil, nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, err := NewNode(NodeConfig{KVSName: "k", Size: 3, Ranks: []int{0, 1, 2}, Uplink: &jobUplink{job: NewJob(1)}})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			for _, r := range tc.before {
				n.Left(r)
			}
			errs := make(chan error, len(tc.enter))
			for _, r := range tc.enter {
				go func() { errs <- n.barrier(ctx, r) }()
			}
			// Wait until every entering rank is in (or already failed).
			for deadline := time.Now().Add(5 * time.Second); ; {
				n.mu.Lock()
				in := len(n.entered)
				n.mu.Unlock()
				if in == len(tc.enter) || len(errs) > 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("ranks never entered")
				}
				time.Sleep(time.Millisecond)
			}
			for _, r := range tc.after {
				n.Left(r)
			}
			if !tc.broken {
				// Left fails waiters synchronously: they are still
				// registered if and only if nothing failed them.
				n.mu.Lock()
				waiting := len(n.waiters)
				n.mu.Unlock()
				if waiting != len(tc.enter) || len(errs) > 0 {
					t.Fatalf("%d of %d ranks still waiting", waiting, len(tc.enter))
				}
				return
			}
			for range tc.enter {
				err := <-errs
				if !errors.Is(err, ErrBarrierBroken) || !strings.Contains(err.Error(), "rank 0 ended") {
					t.Fatalf("waiter got %v, want ErrBarrierBroken naming rank 0", err)
				}
			}
		})
	}
}

// Pending names the nodes a fence round under way still waits for; with no
// round under way, or after the round completed, none.
func TestJobPending(t *testing.T) {
	j := NewJob(3)
	pending := func() (p []bool) {
		for n := 0; n < 3; n++ {
			p = append(p, j.Pending(n))
		}
		return p
	}
	steps := []struct {
		arrive int
		want   []bool
	}{
		{-1, []bool{false, false, false}},
		{1, []bool{true, false, true}},
		{0, []bool{false, false, true}},
		{2, []bool{false, false, false}}, // complete: the next round has no arrivals
	}
	var arrivals []Arrival
	for _, s := range steps {
		if s.arrive >= 0 {
			a, err := j.Arrive(s.arrive, []KV{{Key: fmt.Sprint("k", s.arrive), Value: "v"}})
			if err != nil {
				t.Fatal(err)
			}
			arrivals = append(arrivals, a)
		}
		if got := pending(); !slices.Equal(got, s.want) {
			t.Fatalf("after node %d arrived: pending %v, want %v", s.arrive, got, s.want)
		}
	}
	for _, a := range arrivals {
		kvs, err := a.Wait(context.Background())
		if err != nil || len(kvs) != 3 {
			t.Fatalf("round: %v, %v", kvs, err)
		}
	}
}

// A PMI_PORT connection that has named no rank yet is not one of the job's
// ranks (any local process of the user can connect): whatever it sends, or
// however it breaks off, it is refused and the job goes on, as a second
// claim is. Before, junk from it ended the job as a protocol error of
// "rank -1".
func TestUnnamedConnectionRefused(t *testing.T) {
	tests := []struct {
		name, send string
	}{
		{"PMI-1 junk", "\x00\xff hello world\n"},
		{"init before initack", "cmd=init pmi_version=1 pmi_subversion=1\n"},
		{"initack of no local rank", "cmd=initack pmiid=9\n"},
		{"unterminated line", "cmd=initack pmi"},
		{"PMI-2 junk frame", "cmd=init pmi_version=2 pmi_subversion=0\nabcdefghijk"},
		{"PMI-2 short frame", "cmd=init pmi_version=2 pmi_subversion=0\n30    cmd=fullinit;"},
		{"PMI-2 fullinit of no local rank", "cmd=init pmi_version=2 pmi_subversion=0\n" + formatRaw2("cmd=fullinit;pmirank=zz;")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			n, err := NewNode(NodeConfig{KVSName: "k", Size: 2, Ranks: []int{0, 1}, Uplink: &jobUplink{job: NewJob(1)}})
			if err != nil {
				t.Fatal(err)
			}
			c, errs := portConn(t, ctx, n)
			go io.Copy(io.Discard, c.r) // replies, so the server is not blocked
			go func() {
				c.conn.SetDeadline(time.Now().Add(5 * time.Second))
				c.conn.Write([]byte(tc.send))
				c.conn.Close() // after what it sent, the stranger goes away
			}()
			select {
			case err := <-errs:
				if !errors.Is(err, ErrRefused) || errors.Is(err, ErrProtocol) || strings.Contains(err.Error(), "rank -1") {
					t.Fatalf("got %v, want ErrRefused (not a protocol error of rank -1)", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Serve did not return")
			}
			// The job's rank can still claim its connection.
			ok, _ := portConn(t, ctx, n)
			if got := ok.do("cmd=initack pmiid=1"); got != "cmd=initack" {
				t.Fatalf("rank 1 claim after the stranger: %q", got)
			}
		})
	}
}
