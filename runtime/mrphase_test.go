package mpi

import (
	"context"
	"runtime"
	"testing"
	"time"
)

// BenchmarkShmMsgRatePhases times the two sides of a message-rate window
// one after the other (no overlap), min over windows, so that each side's
// own cost per message shows even on a busy host: send is 64 Isends and
// their WaitAll into an empty ring; recv is 64 Irecvs and their WaitAll
// with the messages already in the ring; posted is 64 Irecvs posted
// before the messages come, and their WaitAll after.
func BenchmarkShmMsgRatePhases(b *testing.B) {
	b.Run("Irecv", func(b *testing.B) { benchMsgRatePhases(b, phasesIrecv) })
	b.Run("IrecvInto", func(b *testing.B) { benchMsgRatePhases(b, phasesSlots) })
	b.Run("Persistent", func(b *testing.B) { benchMsgRatePhases(b, phasesPersistent) })
	b.Run("PersistentStart", func(b *testing.B) { benchMsgRatePhases(b, phasesPersistentStart) })
}

// The ways benchMsgRatePhases sends and receives a window.
const (
	phasesIrecv           = iota // Isend; Irecv and WaitAll
	phasesSlots                  // Isend; IrecvInto and WaitAllInto (gompi-bench mr)
	phasesPersistent             // StartAll of persistent sends, of receives; WaitAllInto (mrp)
	phasesPersistentStart        // the same started one by one (Start): no batching
)

// persistWindow makes W persistent receives (or sends) of buf between
// ranks 0 and 1 of comms with tag, and their requests.
func persistWindow(b *testing.B, comms []*Comm, recv bool, buf []byte, tag, W int) ([]*Persistent, []*Request) {
	ps, reqs := make([]*Persistent, W), make([]*Request, W)
	for w := range ps {
		var err error
		if recv {
			ps[w], err = RecvInit(comms[1], buf, 0, tag)
		} else {
			ps[w], err = SendInit(comms[0], buf, 1, tag)
		}
		if err != nil {
			b.Fatal(err)
		}
		reqs[w] = ps[w].Request()
	}
	return ps, reqs
}

// benchMsgRatePhases is BenchmarkShmMsgRatePhases receiving (and, for
// phasesPersistent, sending) the given way.
func benchMsgRatePhases(b *testing.B, mode int) {
	const W = 64
	comms := benchWorld(b)
	ctx := context.Background()
	sreqs, rreqs := make([]*Request, W), make([]*Request, W)
	buf, rbuf := make([]byte, 8), make([]byte, 8)
	rs, st := make([]RecvSlot, W), make([]Status, W)
	var sps, rps [4][]*Persistent
	var spr, rpr [4][]*Request
	persistent := mode == phasesPersistent || mode == phasesPersistentStart
	startAll := func(ps []*Persistent) {
		if mode == phasesPersistent {
			if err := StartAll(ps...); err != nil {
				b.Fatal(err)
			}
			return
		}
		for _, p := range ps {
			if err := p.Start(); err != nil {
				b.Fatal(err)
			}
		}
	}
	if persistent {
		for _, tag := range []int{2, 3} {
			sps[tag], spr[tag] = persistWindow(b, comms, false, buf, tag, W)
			rps[tag], rpr[tag] = persistWindow(b, comms, true, rbuf, tag, W)
		}
	}
	irecvs := func(tag int) {
		if persistent {
			startAll(rps[tag])
			copy(rreqs, rpr[tag])
			return
		}
		for w := range rreqs {
			if mode == phasesSlots {
				rreqs[w] = IrecvInto(&rs[w], comms[1], rbuf, 0, tag)
			} else {
				rreqs[w] = Irecv(comms[1], rbuf, 0, tag)
			}
		}
	}
	isends := func(tag int) {
		if persistent {
			startAll(sps[tag])
			copy(sreqs, spr[tag])
			return
		}
		for w := range sreqs {
			sreqs[w] = Isend(comms[0], buf, 1, tag)
		}
	}
	waitRecvs := func() error {
		if mode != phasesIrecv {
			return WaitAllInto(ctx, st, rreqs...)
		}
		_, err := WaitAll(ctx, rreqs...)
		return err
	}
	minSend, minRecv, minPost, minPost1, minDrain := time.Hour, time.Hour, time.Hour, time.Hour, time.Hour
	windows := (b.N + W - 1) / W
	for i := 0; i < windows; i++ {
		t0 := time.Now()
		isends(2)
		if err := WaitAllInto(ctx, nil, sreqs...); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		irecvs(2)
		if err := waitRecvs(); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		minSend, minRecv = min(minSend, t1.Sub(t0)), min(minRecv, t2.Sub(t1))
		t0 = time.Now()
		irecvs(3)
		t1 = time.Now()
		isends(3)
		t2 = time.Now()
		if err := waitRecvs(); err != nil {
			b.Fatal(err)
		}
		t3 := time.Now()
		minPost = min(minPost, t1.Sub(t0)+t3.Sub(t2))
		minPost1, minDrain = min(minPost1, t1.Sub(t0)), min(minDrain, t3.Sub(t2))
	}
	b.ReportMetric(float64(minSend.Nanoseconds())/W, "send-ns/msg")
	b.ReportMetric(float64(minRecv.Nanoseconds())/W, "recv-ns/msg")
	b.ReportMetric(float64(minPost.Nanoseconds())/W, "posted-ns/msg")
	b.ReportMetric(float64(minPost1.Nanoseconds())/W, "post-ns/msg")
	b.ReportMetric(float64(minDrain.Nanoseconds())/W, "drain-ns/msg")
}

// BenchmarkShmPingPongMin is BenchmarkShmPingPong8 reported as the
// fastest batch of 100 round trips (one-way ns), which, unlike the mean,
// stays put on a busy host: for comparing the latency path's own cost.
func BenchmarkShmPingPongMin(b *testing.B) {
	const batch = 100
	comms := benchWorld(b)
	buf, rbuf := make([]byte, 8), make([]byte, 8)
	batches := (b.N + batch - 1) / batch
	done := make(chan error, 1)
	go func() {
		for i := 0; i < batches*batch; i++ {
			if _, err := Recv(comms[1], rbuf, 0, 1); err != nil {
				done <- err
				return
			}
			if err := Send(comms[1], rbuf, 0, 1); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	best := time.Hour
	b.ResetTimer()
	for i := 0; i < batches; i++ {
		t0 := time.Now()
		for range batch {
			if err := Send(comms[0], buf, 1, 1); err != nil {
				b.Fatal(err)
			}
			if _, err := Recv(comms[0], buf, 1, 1); err != nil {
				b.Fatal(err)
			}
		}
		best = min(best, time.Since(t0))
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(best.Nanoseconds())/(2*batch), "min-one-way-ns")
}

// BenchmarkShmMatchBurst times the receiver's matching alone: a window of
// 64 IrecvInto posted (post-ns), then, while the receiving goroutine holds
// the ring so that readLoop cannot take the frames early, 64 eager sends,
// and then the receiver draining the ring against the posted receives
// (match-ns: frame read, match, copy, completion). Minimum over windows.
// StartAll posts persistent receives instead of IrecvInto, and sends with
// StartAll of persistent sends (whose cost is not in either figure).
func BenchmarkShmMatchBurst(b *testing.B) {
	b.Run("IrecvInto", func(b *testing.B) { benchMatchBurst(b, false) })
	b.Run("StartAll", func(b *testing.B) { benchMatchBurst(b, true) })
}

func benchMatchBurst(b *testing.B, persistent bool) {
	const W = 64
	comms := benchWorld(b)
	ctx := context.Background()
	sreqs, rreqs := make([]*Request, W), make([]*Request, W)
	rs, st := make([]RecvSlot, W), make([]Status, W)
	buf, rbuf := make([]byte, 8), make([]byte, 8)
	sps, spr := persistWindow(b, comms, false, buf, 2, W)
	rps, rpr := persistWindow(b, comms, true, rbuf, 2, W)
	if err := Send(comms[0], buf, 1, 1); err != nil { // make the link
		b.Fatal(err)
	}
	if _, err := Recv(comms[1], rbuf, 0, 1); err != nil {
		b.Fatal(err)
	}
	l := comms[1].p.peers[0].shmL.Load()
	if l == nil {
		b.Skip("no shared-memory link")
	}
	minPost, minMatch := time.Hour, time.Hour
	for i := 0; i < (b.N+W-1)/W; i++ {
		t0 := time.Now()
		if persistent {
			if err := StartAll(rps...); err != nil {
				b.Fatal(err)
			}
			copy(rreqs, rpr)
		} else {
			for w := range rreqs {
				rreqs[w] = IrecvInto(&rs[w], comms[1], rbuf, 0, 2)
			}
		}
		t1 := time.Now()
		for !l.acquire() {
			runtime.Gosched()
		}
		if persistent {
			if err := StartAll(sps...); err != nil {
				b.Fatal(err)
			}
			copy(sreqs, spr)
		} else {
			for w := range sreqs {
				sreqs[w] = Isend(comms[0], buf, 1, 2)
			}
		}
		t2 := time.Now()
		l.helpUntil((*reqWait)(rreqs[W-1]))
		t3 := time.Now()
		l.release()
		if err := WaitAllInto(ctx, st, rreqs...); err != nil {
			b.Fatal(err)
		}
		if err := WaitAllInto(ctx, nil, sreqs...); err != nil {
			b.Fatal(err)
		}
		minPost, minMatch = min(minPost, t1.Sub(t0)), min(minMatch, t3.Sub(t2))
	}
	b.ReportMetric(float64(minPost.Nanoseconds())/W, "post-ns/msg")
	b.ReportMetric(float64(minMatch.Nanoseconds())/W, "match-ns/msg")
}
