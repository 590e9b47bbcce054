//go:build linux

package shm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var jobSeq atomic.Int64

// testJob returns a job id unique to this test process.
func testJob(t testing.TB) string {
	return fmt.Sprintf("t%d-%d", os.Getpid(), jobSeq.Add(1))
}

// pair connects ranks 0 and 1 within this process: two mappings of one file.
func pair(t testing.TB, opt *Options) (a, b *Chan) {
	t.Helper()
	if opt == nil {
		opt = &Options{}
	}
	if opt.Dir == "" {
		opt.Dir = t.TempDir()
	}
	job := testJob(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var errA error
	done := make(chan struct{})
	go func() {
		defer close(done)
		a, errA = Connect(ctx, job, 0, 1, opt)
	}()
	b, errB := Connect(ctx, job, 1, 0, opt)
	<-done
	if errA != nil || errB != nil {
		t.Fatalf("connect: %v, %v", errA, errB)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func dirEmpty(t testing.TB, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		t.Errorf("left behind: %s", e.Name())
	}
}

func TestConnectUnlinks(t *testing.T) {
	dir := t.TempDir()
	a, b := pair(t, &Options{Dir: dir})
	dirEmpty(t, dir)
	ctx := context.Background()
	if err := a.Send(ctx, []byte("hi "), []byte("there")); err != nil {
		t.Fatal(err)
	}
	m, err := b.RecvBytes(ctx)
	if err != nil || string(m) != "hi there" {
		t.Fatalf("got %q, %v", m, err)
	}
	if err := b.Send(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	if m, err := a.RecvBytes(ctx); err != nil || len(m) != 0 {
		t.Fatalf("got %q, %v", m, err)
	}
}

func TestOrdering(t *testing.T) {
	a, b := pair(t, &Options{RingSize: 8192})
	ctx := context.Background()
	const n = 20000
	errc := make(chan error, 1)
	go func() {
		var h [8]byte
		for i := range n {
			binary.LittleEndian.PutUint64(h[:], uint64(i))
			if err := a.Send(ctx, h[:], bytes.Repeat([]byte{byte(i)}, i%37)); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	buf := make([]byte, 64)
	for i := range n {
		m, err := b.Recv(ctx, func(n int) []byte { return buf[:n] })
		if err != nil {
			t.Fatal(err)
		}
		if m != 8+i%37 || binary.LittleEndian.Uint64(buf) != uint64(i) {
			t.Fatalf("message %d: len %d seq %d", i, m, binary.LittleEndian.Uint64(buf))
		}
		for _, c := range buf[8:m] {
			if c != byte(i) {
				t.Fatalf("message %d: bad payload", i)
			}
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// checked builds a message whose first 12 bytes are its sequence number and
// the CRC of the rest.
func checked(rng *rand.ChaCha8, seq int, size int) (hdr, payload []byte) {
	payload = make([]byte, size)
	rng.Read(payload)
	hdr = make([]byte, 12)
	binary.LittleEndian.PutUint64(hdr, uint64(seq))
	binary.LittleEndian.PutUint32(hdr[8:], crc32.ChecksumIEEE(payload))
	return hdr, payload
}

func verify(m []byte, seq int) error {
	if len(m) < 12 {
		return fmt.Errorf("message %d: %d bytes", seq, len(m))
	}
	if s := binary.LittleEndian.Uint64(m); s != uint64(seq) {
		return fmt.Errorf("message %d: sequence %d", seq, s)
	}
	if binary.LittleEndian.Uint32(m[8:]) != crc32.ChecksumIEEE(m[12:]) {
		return fmt.Errorf("message %d (%d bytes): checksum mismatch", seq, len(m))
	}
	return nil
}

// randSize mixes tiny, medium and larger-than-ring messages.
func randSize(rng *rand.Rand, ring int) int {
	switch r := rng.IntN(100); {
	case r < 60:
		return rng.IntN(64)
	case r < 95:
		return rng.IntN(ring)
	default:
		return rng.IntN(3 * ring)
	}
}

// exchange runs a full-duplex checked stream of n messages each way.
func exchange(ctx context.Context, c *Chan, seed uint64, n, ring int) error {
	var wg sync.WaitGroup
	var sendErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(seed, 1))
		content := rand.NewChaCha8([32]byte{byte(seed)})
		for i := range n {
			h, p := checked(content, i, randSize(rng, ring))
			if err := c.Send(ctx, h, p); err != nil {
				sendErr = fmt.Errorf("send %d: %w", i, err)
				return
			}
		}
	}()
	var recvErr error
	buf := make([]byte, 3*ring+12)
	for i := range n {
		m, err := c.Recv(ctx, func(n int) []byte { return buf[:n] })
		if err != nil {
			recvErr = fmt.Errorf("recv %d: %w", i, err)
			break
		}
		if err := verify(buf[:m], i); err != nil {
			recvErr = err
			break
		}
	}
	wg.Wait()
	return errors.Join(sendErr, recvErr)
}

func TestWrapAroundRandom(t *testing.T) {
	const ring = 4096
	a, b := pair(t, &Options{RingSize: ring})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := 20000
	if testing.Short() {
		n = 3000
	}
	errc := make(chan error, 1)
	go func() { errc <- exchange(ctx, a, 1, n, ring) }()
	if err := exchange(ctx, b, 2, n, ring); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

func TestLargerThanRing(t *testing.T) {
	a, b := pair(t, &Options{RingSize: 64 << 10})
	ctx := context.Background()
	rng := rand.NewChaCha8([32]byte{3})
	for _, size := range []int{64<<10 - 20, 64 << 10, 64<<10 + 1, 1 << 20, 4<<20 + 3} {
		h, p := checked(rng, size, size)
		errc := make(chan error, 1)
		go func() { errc <- a.Send(ctx, h, p) }()
		m, err := b.RecvBytes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := verify(m, size); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
}

func TestTruncated(t *testing.T) {
	a, b := pair(t, &Options{RingSize: 4096})
	ctx := context.Background()
	big := bytes.Repeat([]byte("x"), 10000)
	go func() {
		a.Send(ctx, nil, big)
		a.Send(ctx, nil, []byte("next"))
	}()
	buf := make([]byte, 10)
	n, err := b.Recv(ctx, func(n int) []byte { return buf })
	if n != 10000 || !errors.Is(err, ErrTruncated) || string(buf) != "xxxxxxxxxx" {
		t.Fatalf("got %d, %v, %q", n, err, buf)
	}
	if m, err := b.RecvBytes(ctx); err != nil || string(m) != "next" {
		t.Fatalf("got %q, %v", m, err)
	}
}

// blocked runs f in a goroutine and returns a channel with its error and
// how long it took.
func blocked(f func() error) <-chan [2]any {
	c := make(chan [2]any, 1)
	t0 := time.Now()
	go func() {
		err := f()
		c <- [2]any{err, time.Since(t0)}
	}()
	return c
}

func expect(t *testing.T, c <-chan [2]any, want error, within time.Duration) {
	t.Helper()
	select {
	case r := <-c:
		err, _ := r[0].(error)
		if !errors.Is(err, want) {
			t.Fatalf("got %v after %v, want %v", err, r[1], want)
		}
		t.Logf("returned %v after %v", err, r[1])
	case <-time.After(within):
		t.Fatalf("still blocked after %v, want %v", within, want)
	}
}

func TestCloseWakesPeerRecv(t *testing.T) {
	a, b := pair(t, &Options{Poll: 10 * time.Second}) // the wake-up, not the poll, must end it
	ctx := context.Background()
	for _, m := range []string{"one", "two"} {
		a.Send(ctx, nil, []byte(m))
	}
	r := blocked(func() error {
		for _, want := range []string{"one", "two"} {
			if m, err := b.RecvBytes(ctx); err != nil || string(m) != want {
				return fmt.Errorf("got %q, %v", m, err)
			}
		}
		_, err := b.RecvBytes(ctx)
		return err
	})
	time.Sleep(20 * time.Millisecond)
	a.Close()
	expect(t, r, ErrClosed, time.Second)
	if err := b.Send(ctx, nil, []byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("send after peer close: %v", err)
	}
}

func TestCloseWakesPeerSend(t *testing.T) {
	a, b := pair(t, &Options{RingSize: 4096, Poll: 10 * time.Second})
	ctx := context.Background()
	r := blocked(func() error { return a.Send(ctx, nil, make([]byte, 3000)) })
	r2 := blocked(func() error {
		<-r
		return a.Send(ctx, nil, make([]byte, 3000))
	})
	time.Sleep(20 * time.Millisecond)
	b.Close()
	expect(t, r2, ErrClosed, time.Second)
}

func TestOwnCloseWakesRecv(t *testing.T) {
	a, _ := pair(t, &Options{Poll: 10 * time.Second})
	r := blocked(func() error { _, err := a.RecvBytes(context.Background()); return err })
	time.Sleep(20 * time.Millisecond)
	a.Close()
	expect(t, r, ErrClosed, time.Second)
	if _, err := a.RecvBytes(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("recv after close: %v", err)
	}
	if err := a.Send(context.Background(), nil, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("send after close: %v", err)
	}
	if a.Pending() {
		t.Fatal("pending after close")
	}
	if err := a.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

func TestAliveFunc(t *testing.T) {
	var dead atomic.Bool
	gone := errors.New("control connection lost")
	opt := &Options{Poll: 20 * time.Millisecond, Alive: func() error {
		if dead.Load() {
			return gone
		}
		return nil
	}}
	a, b := pair(t, opt)
	ctx := context.Background()
	r := blocked(func() error { _, err := a.RecvBytes(ctx); return err })
	time.Sleep(50 * time.Millisecond)
	dead.Store(true)
	expect(t, r, gone, time.Second)
	dead.Store(false)

	r = blocked(func() error { _, err := b.RecvBytes(ctx); return err })
	s := blocked(func() error {
		for {
			if err := a.Send(ctx, nil, make([]byte, 1<<16)); err != nil {
				return err
			}
		}
	})
	<-r // one message arrives; then b stops reading and a fills the ring
	time.Sleep(50 * time.Millisecond)
	dead.Store(true)
	expect(t, s, ErrPeerDead, time.Second)
}

func TestContextCancel(t *testing.T) {
	a, b := pair(t, &Options{RingSize: 4096, Poll: 10 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	r := blocked(func() error { _, err := b.RecvBytes(ctx); return err })
	time.Sleep(20 * time.Millisecond)
	cancel()
	expect(t, r, context.Canceled, time.Second)

	// Nothing was half-received: the channel still works.
	bg := context.Background()
	if err := a.Send(bg, nil, []byte("ok")); err != nil {
		t.Fatal(err)
	}
	if m, err := b.RecvBytes(bg); err != nil || string(m) != "ok" {
		t.Fatalf("got %q, %v", m, err)
	}

	// A send waiting for space before publishing anything can be cancelled
	// and the channel stays usable.
	if err := a.Send(bg, nil, make([]byte, 4096-frameBytes)); err != nil { // fills the ring exactly
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithTimeout(bg, 30*time.Millisecond)
	defer cancel2()
	if err := a.Send(ctx2, nil, []byte("y")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("send: %v", err)
	}
	if m, err := b.RecvBytes(bg); err != nil || len(m) != 4096-frameBytes {
		t.Fatalf("got %d bytes, %v", len(m), err)
	}

	// A send cancelled half-way through a message closes the channel, and
	// the peer sees ErrClosed rather than waiting for the rest.
	ctx3, cancel3 := context.WithTimeout(bg, 30*time.Millisecond)
	defer cancel3()
	if err := a.Send(ctx3, nil, make([]byte, 10000)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("send: %v", err)
	}
	if _, err := b.RecvBytes(bg); !errors.Is(err, ErrClosed) {
		t.Fatalf("recv of half a message: %v", err)
	}
	if err := a.Send(bg, nil, nil); err == nil {
		t.Fatal("send on a broken channel succeeded")
	}
}

func TestCreatorGivesUp(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := Connect(ctx, "lonely", 0, 1, &Options{Dir: dir}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("creator: %v", err)
	}
	dirEmpty(t, dir)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	if _, err := Connect(ctx2, "lonely", 1, 0, &Options{Dir: dir}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("opener: %v", err)
	}
}

func TestSweep(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"gompi-7-0-1", "gompi-7-2-3", "gompi-7-1-2-3", "gompi-8-0-1", "other"} {
		os.WriteFile(filepath.Join(dir, n), nil, 0o600)
	}
	n, err := Sweep(dir, "7")
	if err != nil || n != 2 {
		t.Fatalf("swept %d, %v", n, err)
	}
	ents, _ := os.ReadDir(dir)
	var left []string
	for _, e := range ents {
		left = append(left, e.Name())
	}
	if fmt.Sprint(left) != "[gompi-7-1-2-3 gompi-8-0-1 other]" {
		t.Fatalf("left %v", left)
	}
	// A stale file makes the creator fail until swept.
	os.WriteFile(filepath.Join(dir, Name("9", 0, 1)), nil, 0o600)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := Connect(ctx, "9", 0, 1, &Options{Dir: dir}); err == nil {
		t.Fatal("connect over a stale file succeeded")
	}
	if n, _ := Sweep(dir, "9"); n != 1 {
		t.Fatalf("swept %d", n)
	}
}

func TestBadArgs(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		job  string
		a, b int
		ring int
	}{{"", 0, 1, 0}, {"a/b", 0, 1, 0}, {"j", 1, 1, 0}, {"j", -1, 1, 0}, {"j", 0, 1, 5000}, {"j", 0, 1, 1024}} {
		if _, err := Connect(ctx, c.job, c.a, c.b, &Options{Dir: t.TempDir(), RingSize: c.ring}); err == nil {
			t.Errorf("Connect(%q, %d, %d, ring %d) succeeded", c.job, c.a, c.b, c.ring)
		}
	}
}

func TestPending(t *testing.T) {
	a, b := pair(t, nil)
	ctx := context.Background()
	if b.Pending() {
		t.Fatal("pending on an empty channel")
	}
	a.Send(ctx, nil, []byte("x"))
	for range 2 { // the second answer comes from the cached head
		if !b.Pending() {
			t.Fatal("not pending after a send")
		}
	}
	b.RecvBytes(ctx)
	if b.Pending() {
		t.Fatal("pending after the receive")
	}
}

func TestConnectAlive(t *testing.T) {
	gone := errors.New("peer's proxy reported it dead")
	opt := &Options{Dir: t.TempDir(), Poll: 20 * time.Millisecond, Alive: func() error { return gone }}
	for _, self := range []int{0, 1} {
		t0 := time.Now()
		_, err := Connect(context.Background(), "j", self, 1-self, opt)
		if !errors.Is(err, ErrPeerDead) || !errors.Is(err, gone) || time.Since(t0) > time.Second {
			t.Fatalf("rank %d: %v after %v", self, err, time.Since(t0))
		}
	}
	dirEmpty(t, opt.Dir)
}

func TestOpenRejectsCorruptFile(t *testing.T) {
	dir := t.TempDir()
	for i, mutate := range []func(img []byte){
		func(img []byte) { img[offMagic] ^= 1 },
		func(img []byte) { img[offVersion] = 9 },
		func(img []byte) { binary.NativeEndian.PutUint64(img[offRingSize:], 3*MinRingSize) },
		func(img []byte) { binary.NativeEndian.PutUint64(img[offRingSize:], 2*MinRingSize) }, // file too short for it
		func(img []byte) { img[offState] = stateAttached },
	} {
		img := image()
		mutate(img)
		job := fmt.Sprint("corrupt", i)
		if err := os.WriteFile(filepath.Join(dir, Name(job, 0, 1)), img, 0o600); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := Connect(ctx, job, 1, 0, &Options{Dir: dir})
		cancel()
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("case %d: %v", i, err)
		}
	}
}

// TestNoLostWakeups: with no spinning, every wait goes to the futex, and a
// lost wake-up would stall a round trip for the whole 10 s Poll.
func TestNoLostWakeups(t *testing.T) {
	a, b := pair(t, &Options{Spin: -1, Poll: 10 * time.Second, RingSize: 4096})
	ctx := context.Background()
	n := 20000
	if testing.Short() {
		n = 2000
	}
	go func() {
		buf := make([]byte, 3000)
		for {
			m, err := b.Recv(ctx, func(n int) []byte { return buf[:n] })
			if err != nil {
				return
			}
			if b.Send(ctx, nil, buf[:m]) != nil {
				return
			}
		}
	}()
	t0 := time.Now()
	buf := make([]byte, 3000)
	var slowest time.Duration
	for i := range n {
		rt := time.Now()
		size := []int{8, 3000}[i%2] // 3000: the sender also waits for space
		if err := a.Send(ctx, nil, buf[:size]); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Recv(ctx, func(n int) []byte { return buf[:n] }); err != nil {
			t.Fatal(err)
		}
		slowest = max(slowest, time.Since(rt))
	}
	d := time.Since(t0)
	t.Logf("%d sleeping round trips in %v (%v each, slowest %v)", n, d, d/time.Duration(n), slowest)
	// A lost wake-up stalls its round trip until the 10 s Poll; judge each
	// round trip rather than the total, which on a loaded machine grows
	// with scheduling latency alone.
	if slowest > 5*time.Second {
		t.Fatalf("a round trip took %v: lost wake-up?", slowest)
	}
}

// TestCancelAndCloseRaces: cancellation and Close racing with a call going
// to sleep must still end it at once, not after Poll.
func TestCancelAndCloseRaces(t *testing.T) {
	for i := range 200 {
		a, b := pair(t, &Options{Spin: -1, Poll: 10 * time.Second, RingSize: 4096})
		ctx, cancel := context.WithCancel(context.Background())
		r := blocked(func() error { _, err := b.RecvBytes(ctx); return err })
		if i%2 == 0 {
			time.Sleep(time.Duration(i) * time.Microsecond)
		}
		cancel()
		select {
		case <-r:
		case <-time.After(2 * time.Second):
			t.Fatalf("iteration %d: cancel did not wake the receiver", i)
		}
		r = blocked(func() error { _, err := b.RecvBytes(context.Background()); return err })
		r2 := blocked(func() error { _, err := a.RecvBytes(context.Background()); return err })
		time.Sleep(time.Duration(i) * time.Microsecond)
		a.Close()
		for _, c := range []<-chan [2]any{r, r2} {
			select {
			case <-c:
			case <-time.After(2 * time.Second):
				t.Fatalf("iteration %d: close did not wake a receiver", i)
			}
		}
		b.Close()
	}
}

// Each side's user word is seen by the other side and by no one else's
// store: the two words are separate.
func TestUserWords(t *testing.T) {
	a, b := pair(t, nil)
	if a.PeerWord() != 0 || b.PeerWord() != 0 {
		t.Fatalf("fresh words: %d, %d", a.PeerWord(), b.PeerWord())
	}
	a.SetWord(7)
	b.SetWord(9)
	if got := b.PeerWord(); got != 7 {
		t.Errorf("b sees %d, want 7", got)
	}
	if got := a.PeerWord(); got != 9 {
		t.Errorf("a sees %d, want 9", got)
	}
	a.SetWord(0)
	if got := b.PeerWord(); got != 0 {
		t.Errorf("b sees %d after reset, want 0", got)
	}
}

// The words may be used after Close (a goroutine leaving its wait while
// the link shuts down): they read 0 and ignore stores, never touching the
// unmapped file.
func TestUserWordsAfterClose(t *testing.T) {
	a, b := pair(t, nil)
	b.SetWord(3)
	a.Close()
	a.SetWord(1)
	if got := a.PeerWord(); got != 0 {
		t.Fatalf("PeerWord after Close = %d, want 0", got)
	}
}

// Shutdown wakes a receive that skips the lock (RecvSplitIdleExclusive);
// messages sent before it are still delivered, later calls fail without
// touching the memory, and Close then unmaps.
func TestShutdownExclusiveRecv(t *testing.T) {
	a, b := pair(t, &Options{Poll: 10 * time.Second})
	bg := context.Background()
	var hdr [2]byte
	recv := func() ([]byte, error) {
		var body []byte
		_, err := b.RecvSplitIdleExclusive(bg, nil, 0, hdr[:], func(n int) []byte { body = make([]byte, n); return body })
		return body, err
	}
	if err := a.Send(bg, []byte("h1"), []byte("body")); err != nil {
		t.Fatal(err)
	}
	if body, err := recv(); err != nil || string(hdr[:]) != "h1" || string(body) != "body" {
		t.Fatalf("%q %q %v", hdr, body, err)
	}
	r := blocked(func() error { _, err := recv(); return err })
	time.Sleep(20 * time.Millisecond)
	a.Send(bg, []byte("h2"), []byte("sent before")) // the blocked receive gets it
	expect(t, r, nil, time.Second)
	r = blocked(func() error { _, err := recv(); return err })
	time.Sleep(20 * time.Millisecond)
	b.Shutdown()
	expect(t, r, ErrClosed, time.Second)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := recv(); !errors.Is(err, ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
}

// An exclusive receiver frees ring space lazily (every quarter ring, and
// before it waits); a producer that keeps filling a small ring must still
// never wait for good.
func TestExclusiveRecvLazyTail(t *testing.T) {
	a, b := pair(t, &Options{RingSize: MinRingSize, Poll: 10 * time.Second})
	const n = 5000
	errc := make(chan error, 1)
	go func() {
		rng := rand.NewChaCha8([32]byte{7})
		for i := range n {
			hdr, payload := checked(rng, i, i%1500)
			if err := a.Send(context.Background(), hdr, payload); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	buf := make([]byte, 1600)
	for i := range n {
		m, err := b.RecvSplitIdleExclusive(ctx, nil, 0, nil, func(int) []byte { return buf })
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if err := verify(buf[:m], i); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// A sleeping receiver costs its sender one wake-up, not one per message
// published before its thread runs again (wakeFlagged).
func TestOneWakePerSleep(t *testing.T) {
	a, b := pair(t, nil)
	ctx := context.Background()
	r := &a.tx
	r.consWait.Store(1) // b's receiver is asleep (as awaitSpin leaves it)
	seq := r.consSeq.Load()
	for i := range 10 {
		if err := a.Send(ctx, nil, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if n := r.consSeq.Load() - seq; n != 1 {
		t.Errorf("%d wake-ups for 10 messages to one sleeper, want 1", n)
	}
	if r.consWait.Load() != 0 {
		t.Error("waking did not clear the flag")
	}
	for i := range 10 {
		m, err := b.RecvBytes(ctx)
		if err != nil || len(m) != 1 || m[0] != byte(i) {
			t.Fatalf("message %d: %v %v", i, m, err)
		}
	}
	// The same for a sender asleep waiting for space.
	p := &b.rx
	p.prodWait.Store(1)
	seq = p.prodSeq.Load()
	for i := range 10 {
		if err := a.Send(ctx, nil, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.RecvBytes(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := p.prodSeq.Load() - seq; n != 1 {
		t.Errorf("%d wake-ups of a sender waiting for space, want 1", n)
	}
}

// Messages several rings long, both ways, with no spinning: every wait
// sleeps, and each wake-up may come before the sleeper's condition holds
// (part of a message published, part of the space freed), so a sleeper
// that did not raise its flag again would stall until Poll.
func TestNoLostWakeupsStreaming(t *testing.T) {
	a, b := pair(t, &Options{Spin: -1, Poll: 10 * time.Second, RingSize: 4096})
	ctx := context.Background()
	n := 300
	if testing.Short() {
		n = 50
	}
	go func() {
		buf := make([]byte, 3*4096+24)
		for {
			m, err := b.Recv(ctx, func(n int) []byte { return buf[:n] })
			if err != nil || b.Send(ctx, nil, buf[:m]) != nil {
				return
			}
		}
	}()
	out, in := make([]byte, 3*4096+24), make([]byte, 3*4096+24)
	for i := range out {
		out[i] = byte(i * 7)
	}
	for i := range n {
		rt := time.Now()
		if err := a.Send(ctx, nil, out); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Recv(ctx, func(n int) []byte { return in[:n] }); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(in, out) {
			t.Fatalf("round trip %d: data differs", i)
		}
		if d := time.Since(rt); d > 5*time.Second {
			t.Fatalf("round trip %d took %v: lost wake-up?", i, d)
		}
	}
}
