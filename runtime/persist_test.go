package mpi

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// persistSizes are the rank counts of the persistent-request tests that
// run over several ranks.
var persistSizes = []int{1, 2, 3, 8}

// forPersistWorlds runs f on worlds of persistSizes ranks on every
// transport.
func forPersistWorlds(t *testing.T, f func(t *testing.T, comms []*Comm)) {
	for _, tr := range transportMods {
		for _, n := range persistSizes {
			t.Run(tr.name+"/"+strconv.Itoa(n), func(t *testing.T) {
				comms, _ := world(t, n, tr.mod)
				f(t, comms)
			})
		}
	}
}

// Windows of persistent sends and receives around a ring of ranks,
// started again and again (StartAll and Start by turns), eager and
// rendezvous, deliver every message with its status; the requests stay
// the Persistents' own, and a completed one reads inactive.
func TestPersistentRestart(t *testing.T) {
	forPersistWorlds(t, func(t *testing.T, comms []*Comm) {
		const W = 4
		sizes := []int{8, 3 << 10, 200 << 10} // eager, past the TCP eager limit, rendezvous everywhere
		rounds := 40
		if testing.Short() {
			rounds = 10
		}
		each(t, comms, func(c *Comm) error {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			n, r := c.Size(), c.Rank()
			to, from := (r+1)%n, (r-1+n)%n
			for _, size := range sizes {
				sbufs, rbufs := make([][]byte, W), make([][]byte, W)
				var ps []*Persistent
				var reqs []*Request
				for w := 0; w < W; w++ {
					sbufs[w], rbufs[w] = make([]byte, size), make([]byte, size)
					rp, err := RecvInit(c, rbufs[w], from, w)
					if err != nil {
						return err
					}
					sp, err := SendInit(c, sbufs[w], to, w)
					if err != nil {
						return err
					}
					ps = append(ps, rp, sp)
					reqs = append(reqs, rp.Request(), sp.Request())
				}
				st := make([]Status, len(reqs))
				for round := 0; round < rounds; round++ {
					for w := range sbufs {
						binary.LittleEndian.PutUint64(sbufs[w], uint64(r*1000000+round*W+w))
					}
					if round%2 == 0 {
						if err := StartAll(ps...); err != nil {
							return err
						}
					} else {
						for _, p := range ps {
							if err := p.Start(); err != nil {
								return err
							}
						}
					}
					if err := WaitAllInto(ctx, st, reqs...); err != nil {
						return err
					}
					for w := 0; w < W; w++ {
						got := binary.LittleEndian.Uint64(rbufs[w])
						if want := uint64(from*1000000 + round*W + w); got != want {
							t.Errorf("size %d round %d window %d: got %d, want %d", size, round, w, got, want)
						}
						if s := st[2*w]; s != (Status{Source: from, Tag: w, Count: size, Bytes: size}) {
							t.Errorf("size %d round %d window %d: status %+v", size, round, w, s)
						}
					}
					for i, p := range ps {
						if p.Active() || p.Request() != reqs[i] {
							t.Errorf("size %d round %d: request %d active or not its own", size, round, i)
						}
					}
				}
			}
			return nil
		})
	})
}

// Starting an active, freed, nil or twice-listed Persistent is ErrArg and
// starts nothing (StartAll checks them all first); the active operation
// still completes, and the Persistent is usable again after (and after a
// Cancel). Wait on one never started returns at once.
func TestPersistentStartErrors(t *testing.T) {
	transports(t, 2, nil, func(t *testing.T, comms []*Comm) {
		c0, c1 := comms[0], comms[1]
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		buf, other := make([]byte, 8), make([]byte, 8)
		rp, err := RecvInit(c0, buf, 1, 1)
		if err != nil {
			t.Fatal(err)
		}
		op, err := RecvInit(c0, other, 1, 2)
		if err != nil {
			t.Fatal(err)
		}
		if st, err := rp.Request().Wait(ctx); err != nil || st != (Status{}) || rp.Active() {
			t.Fatalf("never started: %+v %v active=%v", st, err, rp.Active())
		}
		if err := rp.Start(); err != nil {
			t.Fatal(err)
		}
		if err := rp.Start(); !errors.Is(err, ErrArg) {
			t.Fatalf("start of an active receive: %v", err)
		}
		for name, list := range map[string][]*Persistent{
			"active":       {op, rp},
			"listed twice": {op, op},
			"nil":          {op, nil},
		} {
			if err := StartAll(list...); !errors.Is(err, ErrArg) {
				t.Errorf("StartAll %s: %v", name, err)
			}
			if op.Active() {
				t.Fatalf("StartAll %s started a request", name)
			}
		}
		if err := Send(c1, []byte("message1"), 0, 1); err != nil {
			t.Fatal(err)
		}
		if st, err := rp.Request().Wait(ctx); err != nil || st.Tag != 1 || string(buf) != "message1" {
			t.Fatalf("the active receive: %+v %v %q", st, err, buf)
		}
		if err := StartAll(op, rp); err != nil {
			t.Fatalf("after completion: %v", err)
		}
		go Send(c1, []byte("message2"), 0, 2)
		go Send(c1, []byte("message3"), 0, 1)
		if err := WaitAllInto(ctx, nil, op.Request(), rp.Request()); err != nil || string(other) != "message2" || string(buf) != "message3" {
			t.Fatalf("restarted: %v %q %q", err, other, buf)
		}

		// A started receive cancelled is inactive again, and restartable.
		if err := op.Start(); err != nil {
			t.Fatal(err)
		}
		if !op.Request().Cancel() {
			t.Fatal("cancelling a started persistent receive failed")
		}
		if _, err := op.Request().Wait(ctx); !errors.Is(err, ErrCancelled) || op.Active() {
			t.Fatalf("cancelled: %v", err)
		}
		if err := op.Start(); err != nil {
			t.Fatal(err)
		}
		go Send(c1, []byte("message4"), 0, 2)
		if _, err := op.Request().Wait(ctx); err != nil || string(other) != "message4" {
			t.Fatalf("restarted after Cancel: %v %q", err, other)
		}

		sp, err := SendInit(c0, buf, 1, 3)
		if err != nil {
			t.Fatal(err)
		}
		sp.Free()
		rp.Free()
		if err := sp.Start(); !errors.Is(err, ErrArg) {
			t.Errorf("start of a freed send: %v", err)
		}
		if err := StartAll(op, rp); !errors.Is(err, ErrArg) || op.Active() {
			t.Errorf("StartAll with a freed receive: %v", err)
		}
	})
}

// Bad arguments are found by SendInit and RecvInit; ProcNull completes at
// once on every start, alone or in StartAll.
func TestPersistentArgsAndProcNull(t *testing.T) {
	comms, _ := world(t, 2, nil)
	c := comms[0]
	buf := make([]int32, 4)
	cases := []struct {
		name string
		init func() (*Persistent, error)
		want error
	}{
		{"send bad tag", func() (*Persistent, error) { return SendInit(c, buf, 1, -3) }, ErrTag},
		{"send AnyTag", func() (*Persistent, error) { return SendInit(c, buf, 1, AnyTag) }, ErrTag},
		{"send bad rank", func() (*Persistent, error) { return SendInit(c, buf, 2, 0) }, ErrRank},
		{"send AnySource", func() (*Persistent, error) { return SendInit(c, buf, AnySource, 0) }, ErrRank},
		{"recv bad tag", func() (*Persistent, error) { return RecvInit(c, buf, 1, math.MaxInt32+1) }, ErrTag},
		{"recv bad rank", func() (*Persistent, error) { return RecvInit(c, buf, -7, 0) }, ErrRank},
	}
	for _, tc := range cases {
		if p, err := tc.init(); !errors.Is(err, tc.want) || p != nil {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	sp, err := SendInit(c, buf, ProcNull, 1)
	if err != nil {
		t.Fatal(err)
	}
	rp, err := RecvInit(c, buf, ProcNull, AnyTag)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := sp.Start(); err != nil {
			t.Fatal(err)
		}
		if err := rp.Start(); err != nil {
			t.Fatal(err)
		}
		if ok, st, err := rp.Request().Test(); !ok || st != procNullStatus || err != nil {
			t.Fatalf("ProcNull receive: %v %+v %v", ok, st, err)
		}
		if ok, _, err := sp.Request().Test(); !ok || err != nil {
			t.Fatalf("ProcNull send: %v %v", ok, err)
		}
		if err := StartAll(rp, sp); err != nil {
			t.Fatal(err)
		}
		if rp.Active() || sp.Active() {
			t.Fatal("ProcNull in StartAll did not complete at once")
		}
	}
}

// Persistent and plain sends and receives mixed, between every pair of
// ranks: messages of one sender with one tag are received in the order
// sent, by the receives in the order posted (StartAll's array order among
// Irecvs before and after it), on every transport.
func TestPersistentOrder(t *testing.T) {
	forPersistWorlds(t, func(t *testing.T, comms []*Comm) {
		const K = 12 // messages per pair and round
		each(t, comms, func(c *Comm) error {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			n, r := c.Size(), c.Rank()
			for round := 0; round < 5; round++ {
				var rreqs, sreqs []*Request
				var rps, sps []*Persistent
				rbufs := make([][]uint64, n)
				sbufs := make([][]uint64, n)
				for peer := 0; peer < n; peer++ {
					rbufs[peer] = make([]uint64, K)
					sbufs[peer] = make([]uint64, K)
				}
				// Receives: k%3 == 1 persistent (started together below,
				// between the Irecvs of k < K/2 and those after).
				for peer := 0; peer < n; peer++ {
					for k := 0; k < K; k++ {
						b := rbufs[peer][k : k+1]
						switch {
						case k%3 == 1:
							p, err := RecvInit(c, b, peer, 9)
							if err != nil {
								return err
							}
							rps = append(rps, p)
						case k < K/2:
							rreqs = append(rreqs, Irecv(c, b, peer, 9))
						}
					}
				}
				if err := StartAll(rps...); err != nil {
					return err
				}
				for peer := 0; peer < n; peer++ {
					for k := K / 2; k < K; k++ {
						if k%3 != 1 {
							rreqs = append(rreqs, Irecv(c, rbufs[peer][k:k+1], peer, 9))
						}
					}
				}
				// Sends: three of four persistent, started in runs of three.
				for peer := 0; peer < n; peer++ {
					var run []*Persistent
					for k := 0; k < K; k++ {
						sbufs[peer][k] = uint64(round*1000 + k)
						if k%4 != 3 {
							p, err := SendInit(c, sbufs[peer][k:k+1], peer, 9)
							if err != nil {
								return err
							}
							run = append(run, p)
							sps = append(sps, p)
							continue
						}
						if err := StartAll(run...); err != nil {
							return err
						}
						run = run[:0]
						sreqs = append(sreqs, Isend(c, sbufs[peer][k:k+1], peer, 9))
					}
					if err := StartAll(run...); err != nil {
						return err
					}
				}
				for _, p := range rps {
					rreqs = append(rreqs, p.Request())
				}
				for _, p := range sps {
					sreqs = append(sreqs, p.Request())
				}
				if err := WaitAllInto(ctx, nil, append(rreqs, sreqs...)...); err != nil {
					return err
				}
				// The receives were posted in the order: k < K/2 (Irecv)
				// and k%3 == 1 ones interleaved by peer... per peer, the
				// order of posting is: Irecvs with k < K/2, k%3 != 1;
				// then the persistent ones; then the rest.
				for peer := 0; peer < n; peer++ {
					var order []int
					for k := 0; k < K/2; k++ {
						if k%3 != 1 {
							order = append(order, k)
						}
					}
					for k := 1; k < K; k += 3 {
						order = append(order, k)
					}
					for k := K / 2; k < K; k++ {
						if k%3 != 1 {
							order = append(order, k)
						}
					}
					for i, k := range order {
						if got, want := rbufs[peer][k], uint64(round*1000+i); got != want {
							t.Errorf("rank %d from %d round %d: receive %d (posted %d.) got %d, want %d", r, peer, round, k, i, got, want)
						}
					}
				}
			}
			return nil
		})
	})
}

// AnySource persistent receives alongside specific ones: a message goes
// to the earliest-posted receive that matches it, whether it arrives
// after the StartAll or was waiting before it.
func TestPersistentAnySource(t *testing.T) {
	transports(t, 3, nil, func(t *testing.T, comms []*Comm) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		c0 := comms[0]
		bufs := make([][]byte, 3)
		init := func(i, src int) *Persistent {
			bufs[i] = make([]byte, 2)
			p, err := RecvInit(c0, bufs[i], src, 4)
			if err != nil {
				t.Fatal(err)
			}
			return p
		}
		// Posted order: from 2, any, from 1.
		spec2, any, spec1 := init(0, 2), init(1, AnySource), init(2, 1)
		for _, early := range []bool{false, true} {
			send := func() {
				if err := Send(comms[1], []byte("a1"), 0, 4); err != nil {
					t.Fatal(err)
				}
				if err := Send(comms[2], []byte("a2"), 0, 4); err != nil {
					t.Fatal(err)
				}
				if err := Send(comms[1], []byte("b1"), 0, 4); err != nil {
					t.Fatal(err)
				}
			}
			if early {
				send()
				// Wait until all three wait in rank 0 (unexpected).
				for {
					ok, st, err := Iprobe[byte](c0, 1, 4)
					if err != nil {
						t.Fatal(err)
					}
					if ok && st.Bytes == 2 {
						if ok2, _, _ := Iprobe[byte](c0, 2, 4); ok2 {
							break
						}
					}
					time.Sleep(time.Millisecond)
				}
			}
			if err := StartAll(spec2, any, spec1); err != nil {
				t.Fatal(err)
			}
			if !early {
				send()
			}
			st := make([]Status, 3)
			if err := WaitAllInto(ctx, st, spec2.Request(), any.Request(), spec1.Request()); err != nil {
				t.Fatal(err)
			}
			if string(bufs[0]) != "a2" || string(bufs[1]) != "a1" || string(bufs[2]) != "b1" || st[1].Source != 1 {
				t.Errorf("early=%v: from 2 %q, any %q (source %d), from 1 %q", early, bufs[0], bufs[1], st[1].Source, bufs[2])
			}
		}
	})
}

// A peer that dies while a window of persistent receives from it is
// started fails them all with its *PeerError in bounded time; starting
// them (and sends to it) again fails the same way, and the Persistents
// stay restartable. A freed communicator's Persistents fail with ErrFreed.
func TestPersistentPeerDeathAndFree(t *testing.T) {
	for _, tr := range transportMods {
		t.Run(tr.name, func(t *testing.T) {
			comms, _ := world(t, 3, tr.mod)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c0 := comms[0]
			if err := Send(comms[1], []byte("hello"), 0, 1); err != nil { // connect 1 -> 0
				t.Fatal(err)
			}
			if _, err := Recv(c0, make([]byte, 5), 1, 1); err != nil {
				t.Fatal(err)
			}

			dups := make([]*Comm, 3)
			each(t, comms, func(c *Comm) error {
				d, err := c.Dup()
				dups[c.Rank()] = d
				return err
			})
			fp, err := RecvInit(dups[0], make([]byte, 8), 2, 1)
			if err != nil {
				t.Fatal(err)
			}
			each(t, dups, func(d *Comm) error { return d.Free() })
			if err := fp.Start(); err != nil {
				t.Fatal(err)
			}
			if _, err := fp.Request().Wait(ctx); !errors.Is(err, ErrFreed) {
				t.Errorf("receive started on a freed communicator: %v", err)
			}
			if _, err := SendInit(dups[0], []byte("x"), 1, 1); !errors.Is(err, ErrFreed) {
				t.Errorf("SendInit on a freed communicator: %v", err)
			}

			const W = 8
			var ps []*Persistent
			var reqs []*Request
			for w := 0; w < W; w++ {
				src := 1
				if w%3 == 2 {
					src = AnySource
				}
				p, err := RecvInit(c0, make([]byte, 100<<10), src, 2)
				if err != nil {
					t.Fatal(err)
				}
				ps = append(ps, p)
				reqs = append(reqs, p.Request())
			}
			sp, err := SendInit(c0, make([]byte, 8), 1, 3)
			if err != nil {
				t.Fatal(err)
			}
			if err := StartAll(ps...); err != nil {
				t.Fatal(err)
			}
			killProc(comms[1].p)
			check := func(what string, err error) {
				t.Helper()
				var pe *PeerError
				if !errors.As(err, &pe) || pe.Rank != 1 {
					t.Errorf("%s: %v, want a PeerError for rank 1", what, err)
				}
			}
			for round := 0; round < 2; round++ {
				for w, r := range reqs {
					_, err := r.Wait(ctx)
					check("receive "+strconv.Itoa(w)+" round "+strconv.Itoa(round), err)
				}
				if err := StartAll(ps...); err != nil {
					t.Fatal(err)
				}
			}
			if err := WaitAllInto(ctx, nil, reqs...); err == nil {
				t.Error("receives restarted after the death: no error")
			}
			err = within(t, "persistent send to a dead peer", 20*time.Second, func() error {
				for {
					if err := sp.Start(); err != nil {
						return err
					}
					if _, err := sp.Request().Wait(ctx); err != nil {
						return err
					}
					time.Sleep(time.Millisecond)
				}
			})
			check("send", err)
		})
	}
}

// A message-rate loop of persistent requests (windows of StartAll of 64
// receives, or of 64 sends, waited for with a reused status array)
// allocates nothing per message over shared memory, whether the messages
// are in the ring when the receives start or come after them.
func TestPersistentNoAllocation(t *testing.T) {
	needShm(t)
	comms, _ := shmWorld(t, 2, nil)
	exchange(t, comms, []int{8})
	c0, c1 := comms[0], comms[1]
	defer keepReaderAway(t, c0.p.peers[1].shmL.Load())()
	ctx := context.Background()
	const W, windows = 64, 400
	buf, rbuf := make([]byte, 8), make([]byte, 8)
	rps, sps := make([]*Persistent, W), make([]*Persistent, W)
	reqs, sreqs := make([]*Request, W), make([]*Request, W)
	for w := range rps {
		var err error
		if rps[w], err = RecvInit(c0, rbuf, 1, 2); err != nil {
			t.Fatal(err)
		}
		if sps[w], err = SendInit(c1, buf, 0, 2); err != nil {
			t.Fatal(err)
		}
		reqs[w], sreqs[w] = rps[w].Request(), sps[w].Request()
	}
	all := append(append([]*Persistent(nil), rps...), sps...)
	st := make([]Status, W)
	start := func(ps []*Persistent) {
		if err := StartAll(ps...); err != nil {
			t.Fatal(err)
		}
	}
	wait := func(rs []*Request) {
		if err := WaitAllInto(ctx, st, rs...); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		window func()
	}{
		{"in the ring", func() { start(sps); wait(sreqs); start(rps); wait(reqs) }},
		{"posted", func() { start(rps); start(sps); wait(sreqs); wait(reqs) }},
		{"one by one", func() {
			for _, p := range all {
				if err := p.Start(); err != nil {
					t.Fatal(err)
				}
			}
			wait(sreqs)
			wait(reqs)
		}},
	} {
		tc.window()
		perMsg := math.Inf(1)
		for range 3 {
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			for range windows {
				tc.window()
			}
			runtime.ReadMemStats(&m1)
			perMsg = min(perMsg, float64(m1.TotalAlloc-m0.TotalAlloc)/(W*windows))
		}
		t.Logf("%s: %.2f bytes allocated per message", tc.name, perMsg)
		if perMsg > 4 {
			t.Errorf("%s: %.1f bytes allocated per message", tc.name, perMsg)
		}
	}
	if !bytes.Equal(rbuf, buf) {
		t.Errorf("received %q, sent %q", rbuf, buf)
	}
}

// Persistent requests waited for with WaitAny and Done (which make a
// request's channel) are started again with fresh channels, round after
// round, on every transport.
func TestPersistentWaitAnyDone(t *testing.T) {
	transports(t, 2, nil, func(t *testing.T, comms []*Comm) {
		const W = 6
		each(t, comms, func(c *Comm) error {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			peer := 1 - c.Rank()
			var ps []*Persistent
			for w := 0; w < W; w++ {
				buf := make([]int64, 1)
				var p *Persistent
				var err error
				if (w+c.Rank())%2 == 0 {
					p, err = SendInit(c, buf, peer, w)
				} else {
					p, err = RecvInit(c, buf, peer, w)
				}
				if err != nil {
					return err
				}
				ps = append(ps, p)
			}
			reqs := make([]*Request, W)
			for round := 0; round < 20; round++ {
				if err := StartAll(ps...); err != nil {
					return err
				}
				for w, p := range ps {
					reqs[w] = p.Request()
				}
				<-ps[0].Request().Done()
				for range W {
					i, _, err := WaitAny(ctx, reqs...)
					if err != nil || i < 0 {
						return fmt.Errorf("round %d: WaitAny %d %v", round, i, err)
					}
				}
				if i, _, _ := WaitAny(ctx, reqs...); i != -1 {
					return fmt.Errorf("round %d: WaitAny after all: %d", round, i)
				}
				for w, p := range ps {
					if p.Active() {
						return fmt.Errorf("round %d: request %d still active", round, w)
					}
				}
			}
			return nil
		})
	})
}
