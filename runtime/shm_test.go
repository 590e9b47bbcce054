package mpi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gompi/gompi/internal/shm"
)

// needShm skips tests of the shared-memory transport where it cannot run.
func needShm(t *testing.T) {
	t.Helper()
	if runtime.GOOS != "linux" || hostIdentity() == "" {
		t.Skip("shared memory needs Linux")
	}
	if os.Getenv("GOMPI_SHM") == "0" {
		t.Skip("GOMPI_SHM=0")
	}
}

func shmWorld(t *testing.T, n int, mod func(*Config)) ([]*Comm, string) {
	t.Helper()
	dir := t.TempDir()
	comms, _ := world(t, n, func(c *Config) {
		c.ShmDir = dir
		if mod != nil {
			mod(c)
		}
	})
	return comms, dir
}

func pattern(n, seed int) []byte {
	b := make([]byte, n)
	x := uint32(seed*2654435761 + 1)
	for i := range b {
		x = x*1664525 + 1013904223
		b[i] = byte(x >> 24)
	}
	return b
}

// exchange sends every size from rank 0 to 1 and back and checks the
// checksums.
func exchange(t *testing.T, comms []*Comm, sizes []int) {
	t.Helper()
	each(t, comms[:2], func(c *Comm) error {
		for i, n := range sizes {
			want := pattern(n, i)
			if c.Rank() == 0 {
				if err := Send(c, want, 1, i); err != nil {
					return err
				}
				back := make([]byte, n)
				if _, err := Recv(c, back, 1, i); err != nil {
					return err
				}
				if crc32.ChecksumIEEE(back) != crc32.ChecksumIEEE(want) {
					return fmt.Errorf("size %d: echo checksum mismatch", n)
				}
				continue
			}
			got := make([]byte, n)
			st, err := Recv(c, got, 0, i)
			if err != nil {
				return err
			}
			if st.Bytes != n || !bytes.Equal(got, want) {
				return fmt.Errorf("size %d: got %d bytes, equal %v", n, st.Bytes, bytes.Equal(got, want))
			}
			if err := Send(c, got, 0, i); err != nil {
				return err
			}
		}
		return nil
	})
}

var thresholdSizes = []int{0, 1, 8, 64<<10 - 1, 64 << 10, 64<<10 + 1, 1<<20 - 8, 1 << 20, 1<<20 + 9, 4<<20 + 3}

func TestShmUsedForSameHost(t *testing.T) {
	needShm(t)
	comms, _ := shmWorld(t, 3, nil)
	each(t, comms, func(c *Comm) error { return c.Barrier() })
	exchange(t, comms, []int{0, 8, 1000})
	for i, c := range comms {
		if c.p.shm.links.Load() == 0 {
			t.Errorf("rank %d made no shared-memory link", i)
		}
		for _, pe := range c.p.peers {
			if l := pe.current(); l != nil {
				if _, ok := l.(*shmLink); !ok {
					t.Errorf("rank %d: link to %d is %T", i, pe.rank, l)
				}
			}
		}
	}
}

func TestShmOffByConfig(t *testing.T) {
	comms, _ := world(t, 2, func(c *Config) { c.NoSharedMemory = true })
	exchange(t, comms, []int{8, 100 << 10})
	for _, c := range comms {
		if n := c.p.shm.links.Load(); n != 0 {
			t.Errorf("%d shm links with NoSharedMemory", n)
		}
	}
}

// Only one side turning shared memory off must keep the pair on TCP, not
// make the other wait for a file that never comes.
func TestShmOneSideOff(t *testing.T) {
	needShm(t)
	comms2, _ := world(t, 2, func(c *Config) {
		if c.Bootstrap.Rank() == 1 {
			c.NoSharedMemory = true
		}
	})
	start := time.Now()
	exchange(t, comms2, []int{8})
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("mixed pair took %v to connect", d)
	}
	if n := comms2[0].p.shm.links.Load(); n != 0 {
		t.Errorf("%d shm links", n)
	}
}

func needCMA(t *testing.T) {
	t.Helper()
	needShm(t)
	if os.Getenv("GOMPI_CMA") == "0" {
		t.Skip("GOMPI_CMA=0")
	}
}

func TestShmCMASizes(t *testing.T) {
	needCMA(t)
	comms, _ := shmWorld(t, 2, nil)
	exchange(t, comms, thresholdSizes)
	if comms[0].p.shm.cmaReads.Load() == 0 || comms[1].p.shm.cmaReads.Load() == 0 {
		t.Fatalf("no CMA reads: %d, %d", comms[0].p.shm.cmaReads.Load(), comms[1].p.shm.cmaReads.Load())
	}
	if n := comms[0].p.shm.streamRdv.Load() + comms[1].p.shm.streamRdv.Load(); n != 0 {
		t.Errorf("%d rendezvous streamed with CMA working", n)
	}
	// Truncation and allocation (RecvValue) on the CMA path, and a receive
	// posted after the RTS arrived (matched by the user goroutine).
	each(t, comms, func(c *Comm) error {
		big := pattern(300<<10, 7)
		if c.Rank() == 0 {
			if err := Send(c, big, 1, 1); err != nil {
				return err
			}
			if err := c.SendValue(big, 1, 2); err != nil {
				return err
			}
			return Send(c, big, 1, 3)
		}
		short := make([]byte, 100<<10)
		if _, err := Recv(c, short, 0, 1); !errors.Is(err, ErrTruncate) || !bytes.Equal(short, big[:len(short)]) {
			return fmt.Errorf("truncated recv: %v", err)
		}
		var v []byte
		if _, err := c.RecvValue(&v, 0, 2); err != nil || !bytes.Equal(v, big) {
			return fmt.Errorf("value: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // the RTS arrives before the receive
		got := make([]byte, len(big))
		if _, err := Recv(c, got, 0, 3); err != nil || !bytes.Equal(got, big) {
			return fmt.Errorf("late recv: %v", err)
		}
		return nil
	})
}

// Large rendezvous are copied by both sides (the receiver reads the head,
// the sender writes the tail): every size and truncation must still land
// exactly, and both ranks must have done their halves.
func TestShmCMASplit(t *testing.T) {
	needCMA(t)
	comms, _ := shmWorld(t, 2, func(c *Config) { c.CMASplit = 100 << 10 })
	sizes := []int{100<<10 - 1, 100 << 10, 100<<10 + 1, 1<<20 + 9, 4<<20 + 3, 8192*2 + 100<<10}
	exchange(t, comms, sizes)
	for i, c := range comms {
		if c.p.shm.cmaSplits.Load() == 0 || c.p.shm.cmaPuts.Load() == 0 {
			t.Errorf("rank %d: %d split receives, %d puts", i, c.p.shm.cmaSplits.Load(), c.p.shm.cmaPuts.Load())
		}
	}
	each(t, comms, func(c *Comm) error {
		big := pattern(3<<20+5, 9)
		if c.Rank() == 0 {
			if err := Send(c, big, 1, 1); err != nil {
				return err
			}
			return c.SendValue(big, 1, 2)
		}
		short := make([]byte, 1<<20+77)
		if st, err := Recv(c, short, 0, 1); !errors.Is(err, ErrTruncate) || !bytes.Equal(short, big[:len(short)]) {
			return fmt.Errorf("truncated split recv: %v (status %+v)", err, st)
		}
		var v []byte
		if _, err := c.RecvValue(&v, 0, 2); err != nil || !bytes.Equal(v, big) {
			return fmt.Errorf("split value: %v", err)
		}
		return nil
	})
}

// A receive is split only when the sender will answer the PUT soon: not
// while it is away from the runtime between Isend and Wait (its half
// would wait for it), but once it waits.
func TestShmCMASplitOnlyWhenSenderWaits(t *testing.T) {
	needCMA(t)
	comms, _ := shmWorld(t, 2, func(c *Config) { c.CMASplit = 100 << 10 })
	exchange(t, comms, []int{1 << 20}) // the pair has read each other's memory once
	big := pattern(1<<20, 3)
	splits := func() int64 { return comms[1].p.shm.cmaSplits.Load() }
	before := splits()
	received := make(chan struct{})
	each(t, comms, func(c *Comm) error {
		if c.Rank() == 0 {
			r := Isend(c, big, 1, 1)
			<-received // "computing": not in the runtime until the data is taken
			if _, err := r.Wait(context.Background()); err != nil {
				return err
			}
			r = Isend(c, big, 1, 2)
			_, err := r.Wait(context.Background()) // now waiting: the receiver may split
			return err
		}
		got := make([]byte, len(big))
		if _, err := Recv(c, got, 0, 1); err != nil || !bytes.Equal(got, big) {
			return fmt.Errorf("recv while the sender is away: %v", err)
		}
		if n := splits() - before; n != 0 {
			return fmt.Errorf("%d split receives from a sender that was not waiting", n)
		}
		close(received)
		time.Sleep(50 * time.Millisecond) // the sender is in Wait by now
		if _, err := Recv(c, got, 0, 2); err != nil || !bytes.Equal(got, big) {
			return fmt.Errorf("recv from a waiting sender: %v", err)
		}
		if n := splits() - before; n != 1 {
			return fmt.Errorf("%d split receives from a waiting sender, want 1", n)
		}
		return nil
	})
}

// A sender that cannot write the receiver's memory answers PUTDONE failed;
// the receiver reads that half itself, and stops asking that peer.
func TestShmCMASplitPutRefused(t *testing.T) {
	needCMA(t)
	old := cmaWriteFn
	cmaWriteFn = func(int, uint64, []byte) error { return unix.EPERM }
	t.Cleanup(func() { cmaWriteFn = old })
	comms, _ := shmWorld(t, 2, func(c *Config) { c.CMASplit = 100 << 10 })
	sizes := []int{1 << 20, 1<<20 + 9, 4<<20 + 3}
	exchange(t, comms, sizes)
	exchange(t, comms, sizes)
	for i, c := range comms {
		if n := c.p.shm.putFalls.Load(); n != 1 {
			t.Errorf("rank %d: %d refused puts, want 1", i, n)
		}
		if n := c.p.shm.cmaSplits.Load(); n != 1 {
			t.Errorf("rank %d: %d split receives, want 1 (then no more)", i, n)
		}
	}
}

func TestShmNoCMAStreams(t *testing.T) {
	needShm(t)
	comms, _ := shmWorld(t, 2, func(c *Config) { c.NoCMA = true })
	exchange(t, comms, thresholdSizes)
	for i, c := range comms {
		if n := c.p.shm.cmaReads.Load(); n != 0 {
			t.Errorf("rank %d: %d CMA reads with NoCMA", i, n)
		}
		if c.p.shm.streamRdv.Load() == 0 {
			t.Errorf("rank %d streamed nothing", i)
		}
	}
}

// A kernel or policy refusing process_vm_readv (EPERM) makes the pair
// fall back to streaming, and the sender stops offering CMA.
func TestShmCMAFallback(t *testing.T) {
	needCMA(t)
	old := cmaReadFn
	cmaReadFn = func(int, uint64, []byte) error { return unix.EPERM }
	t.Cleanup(func() { cmaReadFn = old })
	comms, _ := shmWorld(t, 2, nil)
	exchange(t, comms, thresholdSizes)
	exchange(t, comms, thresholdSizes)
	for i, c := range comms {
		// One failed read per direction, then the sender streams.
		if n := c.p.shm.cmaFalls.Load(); n != 1 {
			t.Errorf("rank %d: %d failed CMA reads, want 1", i, n)
		}
		if c.p.shm.streamRdv.Load() == 0 {
			t.Errorf("rank %d streamed nothing", i)
		}
	}
}

func TestShmPeerDeathPrompt(t *testing.T) {
	needShm(t)
	comms, _ := shmWorld(t, 2, nil)
	exchange(t, comms, []int{8})
	big := Irecv(comms[0], make([]byte, 1<<20), 1, 5)
	small := Irecv(comms[0], make([]byte, 8), 1, 6)
	// A blocking Recv receives on the ring itself (shmLink.help).
	blockingErr := make(chan error, 1)
	go func() {
		_, err := Recv(comms[0], make([]byte, 8), 1, 7)
		blockingErr <- err
	}()
	time.Sleep(20 * time.Millisecond) // rank 0's receiver is asleep in the ring
	p1 := comms[1].p
	start := time.Now()
	killProc(p1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, r := range []*Request{big, small} {
		var pe *PeerError
		if _, err := r.Wait(ctx); !errors.As(err, &pe) || pe.Rank != 1 {
			t.Fatalf("recv: %v", err)
		}
	}
	select {
	case err := <-blockingErr:
		var pe *PeerError
		if !errors.As(err, &pe) || pe.Rank != 1 {
			t.Fatalf("blocking recv: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("blocking recv did not return")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("peer death noticed after %v", d)
	}
	var pe *PeerError
	if err := Send(comms[0], make([]byte, 8), 1, 0); !errors.As(err, &pe) {
		t.Errorf("later send: %v", err)
	}
	if err := Send(comms[0], make([]byte, 1<<20), 1, 0); !errors.As(err, &pe) {
		t.Errorf("later large send: %v", err)
	}
}

// A stranger who squats the rendezvous file (it would need the job
// secret to know the name) cannot get in: the pair stays on TCP.
func TestShmStrangerSquat(t *testing.T) {
	needShm(t)
	comms, dir := shmWorld(t, 2, nil)
	p := comms[0].p
	other := shmJobID(p.boot, []byte("not the secret"))
	if other == p.shmJob {
		t.Fatal("job id does not depend on the secret")
	}
	path := filepath.Join(dir, shm.Name(p.shmJob, 0, 1))
	if err := os.WriteFile(path, make([]byte, 8192), 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	exchange(t, comms, []int{8, 200 << 10})
	if n := p.shm.links.Load(); n != 0 {
		t.Errorf("%d shm links despite the squatter", n)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("fallback took %v", d)
	}
	os.Remove(path)
}

func TestShmNoLeftovers(t *testing.T) {
	needShm(t)
	comms, dir := shmWorld(t, 3, nil)
	each(t, comms, func(c *Comm) error {
		// Every pair connects: a ring exchange each way.
		for d := 1; d < 3; d++ {
			out, in := []byte{byte(c.Rank())}, []byte{0}
			if _, err := Sendrecv(c, out, (c.Rank()+d)%3, 9, in, (c.Rank()+3-d)%3, 9); err != nil {
				return err
			}
		}
		return c.Barrier()
	})
	// A stale file of this job naming rank 0 (a peer died mid-connect).
	stale := filepath.Join(dir, shm.Name(comms[0].p.shmJob, 0, 7))
	os.WriteFile(stale, nil, 0o600)
	for _, c := range comms {
		if err := c.Finalize(); err != nil {
			t.Fatal(err)
		}
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		t.Errorf("left behind: %s", e.Name())
	}
}

// BenchmarkShmPingPong8 measures the 8-byte round trip between two
// in-process ranks over shared memory (TCP with GOMPI_SHM=0).
func BenchmarkShmPingPong8(b *testing.B) { benchPingPong(b, 8) }

// BenchmarkShmBandwidth4M measures 4 MiB one-way throughput (rank 1
// acknowledges every 16 messages).
func BenchmarkShmBandwidth4M(b *testing.B) {
	comms := benchWorld(b)
	buf := make([]byte, 4<<20)
	rbuf := make([]byte, 4<<20)
	b.SetBytes(int64(len(buf)))
	done := make(chan error, 1)
	go func() {
		for i := 0; i < b.N; i++ {
			if _, err := Recv(comms[1], rbuf, 0, 1); err != nil {
				done <- err
				return
			}
		}
		done <- Send(comms[1], []byte{1}, 0, 2)
	}()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := Send(comms[0], buf, 1, 1); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := Recv(comms[0], []byte{0}, 1, 2); err != nil {
		b.Fatal(err)
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

func benchWorld(b *testing.B) []*Comm {
	job := NewMemJob(2)
	comms := make([]*Comm, 2)
	errs := make([]error, 2)
	ch := make(chan struct{})
	for i := range comms {
		go func(i int) {
			comms[i], errs[i] = InitConfig(context.Background(), Config{Bootstrap: job.Rank(i), Host: "127.0.0.1", Linger: 200 * time.Millisecond})
			ch <- struct{}{}
		}(i)
	}
	<-ch
	<-ch
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() {
		for _, c := range comms {
			c.Finalize()
		}
	})
	return comms
}

func benchPingPong(b *testing.B, n int) {
	comms := benchWorld(b)
	buf := make([]byte, n)
	done := make(chan error, 1)
	go func() {
		rb := make([]byte, n)
		for i := 0; i < b.N+1; i++ {
			if _, err := Recv(comms[1], rb, 0, 1); err != nil {
				done <- err
				return
			}
			if err := Send(comms[1], rb, 0, 1); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	// One warm-up round connects the pair.
	Send(comms[0], buf, 1, 1)
	Recv(comms[0], buf, 1, 1)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := Send(comms[0], buf, 1, 1); err != nil {
			b.Fatal(err)
		}
		if _, err := Recv(comms[0], buf, 1, 1); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

// FuzzShmFrames feeds arbitrary messages through a real ring to the
// shared-memory receiver (header parsing, matching, dispatch) of a runtime
// with a posted receive: it must never panic or hang.
func FuzzShmFrames(f *testing.F) {
	if runtime.GOOS != "linux" {
		f.Skip("shared memory needs Linux")
	}
	msg := func(h header, extra []byte) []byte {
		b := make([]byte, headerSize)
		h.encode(b)
		b = append(b, extra...)
		return append([]byte{byte(len(b)), byte(len(b) >> 8)}, b...)
	}
	f.Add(msg(header{Type: frameEager, Src: 1, Tag: 5, Len: 3}, []byte("abc")))
	f.Add(append(msg(header{Type: frameRTS, Flags: flagCMA, Src: 1, Tag: 5, Len: 40, ID: 3}, make([]byte, 16)),
		msg(header{Type: frameData, Len: 40, ID: 3}, bytes.Repeat([]byte("z"), 40))...))
	f.Add(append(msg(header{Type: frameRTS, Src: 1, Tag: 5, Len: 40, ID: 3}, nil),
		msg(header{Type: frameData, Len: 40, ID: 3}, bytes.Repeat([]byte("z"), 40))...))
	f.Add(msg(header{Type: frameFin, ID: 9}, nil))
	f.Add(msg(header{Type: frameBye}, nil))
	dir := f.TempDir()
	old := cmaReadFn
	cmaReadFn = func(int, uint64, []byte) error { return unix.EPERM } // never read a random pid
	f.Cleanup(func() { cmaReadFn = old })
	var job atomic.Int64
	f.Fuzz(func(t *testing.T, data []byte) {
		id := fmt.Sprintf("fuzz%d_%d", os.Getpid(), job.Add(1))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var a *shm.Chan
		var errA error
		done := make(chan struct{})
		go func() {
			defer close(done)
			a, errA = shm.Connect(ctx, id, 1, 0, &shm.Options{Dir: dir, RingSize: shm.MinRingSize})
		}()
		b, err := shm.Connect(ctx, id, 0, 1, &shm.Options{Dir: dir, RingSize: shm.MinRingSize})
		<-done
		if err != nil || errA != nil {
			t.Fatal(err, errA)
		}
		defer b.Close()
		defer a.Close()
		var msgs [][]byte
		for len(data) >= 2 {
			n := min(int(data[0])|int(data[1])<<8, len(data)-2)
			msgs = append(msgs, data[2:2+n])
			data = data[2+n:]
		}
		go func() {
			for _, m := range msgs {
				if a.Send(ctx, m, nil) != nil {
					return
				}
			}
		}()
		p := testProc(2, 64)
		l := newShmLink(p, p.peers[1])
		l.lctx, l.cancel = context.WithTimeout(l.lctx, 5*time.Second)
		defer l.cancel()
		l.ch = b
		p.peers[1].ln = l
		req := p.world.irecv(0, make([]byte, 16), 1, AnySource, AnyTag, false)
		for range msgs {
			if _, err := l.recvOne(l.lctx, 0); err != nil || l.bye {
				break
			}
		}
		req.Test()
		for i := 0; i < 3; i++ {
			Iprobe[byte](p.world, AnySource, AnyTag)
		}
	})
}

// TestShmEagerLimit: with a shared-memory eager limit below EagerLimit,
// messages above it go by CMA and those at or below it through the ring;
// with CMA off, EagerLimit applies again.
func TestShmEagerLimit(t *testing.T) {
	needCMA(t)
	comms, _ := shmWorld(t, 2, func(c *Config) { c.ShmEagerLimit = 4 << 10 })
	exchange(t, comms, []int{4 << 10})
	if n := comms[0].p.shm.cmaReads.Load() + comms[1].p.shm.cmaReads.Load(); n != 0 {
		t.Fatalf("%d CMA reads at the shm eager limit", n)
	}
	exchange(t, comms, []int{4<<10 + 1, 16 << 10})
	if n := comms[0].p.shm.cmaReads.Load() + comms[1].p.shm.cmaReads.Load(); n != 4 {
		t.Fatalf("%d CMA reads above the shm eager limit, want 4", n)
	}
	nocma, _ := shmWorld(t, 2, func(c *Config) { c.ShmEagerLimit = 4 << 10; c.NoCMA = true })
	exchange(t, nocma, []int{16 << 10})
	if n := nocma[0].p.shm.streamRdv.Load() + nocma[1].p.shm.streamRdv.Load(); n != 0 {
		t.Fatalf("%d streamed rendezvous below EagerLimit without CMA", n)
	}
}
