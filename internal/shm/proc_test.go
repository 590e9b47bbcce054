//go:build linux

package shm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// The two-process tests re-run this test binary as the peer (the standard
// helper-process pattern): TestHelperProcess does the peer's part when
// GOMPI_SHM_HELPER names a mode.

type helperCfg struct {
	mode       string
	job, dir   string
	self, peer int
	ring, n    int
}

func spawn(t testing.TB, h helperCfg) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(),
		"GOMPI_SHM_HELPER="+h.mode, "GOMPI_SHM_JOB="+h.job, "GOMPI_SHM_DIR="+h.dir,
		"GOMPI_SHM_SELF="+strconv.Itoa(h.self), "GOMPI_SHM_PEER="+strconv.Itoa(h.peer),
		"GOMPI_SHM_RING="+strconv.Itoa(h.ring), "GOMPI_SHM_N="+strconv.Itoa(h.n))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Stdout = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, &stderr
}

func TestHelperProcess(t *testing.T) {
	mode := os.Getenv("GOMPI_SHM_HELPER")
	if mode == "" {
		t.Skip("helper process for the two-process tests")
	}
	atoi := func(k string) int { n, _ := strconv.Atoi(os.Getenv(k)); return n }
	self, peer, ring, n := atoi("GOMPI_SHM_SELF"), atoi("GOMPI_SHM_PEER"), atoi("GOMPI_SHM_RING"), atoi("GOMPI_SHM_N")
	err := runHelper(mode, os.Getenv("GOMPI_SHM_JOB"), os.Getenv("GOMPI_SHM_DIR"), self, peer, ring, n)
	if err != nil {
		fmt.Fprintf(os.Stderr, "helper %s: %v\n", mode, err)
		os.Exit(1)
	}
	os.Exit(0)
}

func runHelper(mode, job, dir string, self, peer, ring, n int) error {
	ctx := context.Background()
	opt := &Options{Dir: dir, RingSize: ring}
	if mode == "ratesink" {
		opt.Spin = rateSpin
	}
	c, err := Connect(ctx, job, self, peer, opt)
	if err != nil {
		return err
	}
	defer c.Close()
	buf := make([]byte, 8<<20)
	into := func(n int) []byte { return buf[:min(n, len(buf))] }
	switch mode {
	case "exchange":
		return exchange(ctx, c, uint64(self)+1, n, ring)
	case "stream": // send checked messages until the parent kills us
		rng := rand.New(rand.NewPCG(9, 9))
		content := rand.NewChaCha8([32]byte{9})
		for i := 0; ; i++ {
			h, p := checked(content, i, randSize(rng, ring))
			if err := c.Send(ctx, h, p); err != nil {
				return err
			}
		}
	case "sleep": // connect, never read
		time.Sleep(time.Hour)
	case "pong": // echo until closed
		for {
			m, err := c.Recv(ctx, into)
			if err != nil {
				return nil
			}
			if err := c.Send(ctx, nil, buf[:m]); err != nil {
				return nil
			}
		}
	case "ping": // ping-pong with a "pong" helper until killed
		for {
			if err := c.Send(ctx, nil, buf[:8]); err != nil {
				return nil
			}
			if _, err := c.Recv(ctx, into); err != nil {
				return nil
			}
		}
	case "ratesink": // as the runtime receives: envelope, then payload; every 64th message is acked
		var env [32]byte
		for i := 1; ; i++ {
			if _, err := c.RecvSplitIdleExclusive(ctx, nil, 0, env[:], into); err != nil {
				return nil
			}
			if i%rateWindow == 0 {
				if err := c.Send(ctx, nil, buf[:4]); err != nil {
					return nil
				}
			}
		}
	case "sink": // receive; a 1-byte message asks for a 1-byte ack
		for {
			m, err := c.Recv(ctx, into)
			if err != nil {
				return nil
			}
			if m == 1 {
				if err := c.Send(ctx, nil, buf[:1]); err != nil {
					return nil
				}
			}
		}
	}
	return fmt.Errorf("unknown mode %q", mode)
}

// shmFiles lists the job's files in the default directory.
func shmFiles(job string) []string {
	m, _ := filepath.Glob(filepath.Join(DefaultDir(), filePrefix+job+"-*"))
	return m
}

func TestTwoProcesses(t *testing.T) {
	job := testJob(t)
	const ring = 16 << 10
	n := 100000
	if testing.Short() {
		n = 10000
	}
	cmd, out := spawn(t, helperCfg{mode: "exchange", job: job, self: 1, peer: 0, ring: ring, n: n})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Connect(ctx, job, 0, 1, &Options{RingSize: ring})
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("connect: %v\n%s", err, out)
	}
	if f := shmFiles(job); len(f) != 0 {
		t.Errorf("files left after connect: %v", f)
	}
	t0 := time.Now()
	err = exchange(ctx, c, 1, n, ring)
	t.Logf("%d checked messages each way in %v", n, time.Since(t0))
	c.Close()
	werr := cmd.Wait()
	if err != nil || werr != nil {
		t.Fatalf("parent: %v; helper: %v\n%s", err, werr, out)
	}
}

// killedPeer connects to a helper in the given mode, runs f (which must get
// the parent blocked or streaming), SIGKILLs the helper, and checks that the
// call returns ErrPeerDead within a bounded time and no file remains.
func killedPeer(t *testing.T, mode string, f func(c *Chan) error) {
	job := testJob(t)
	cmd, out := spawn(t, helperCfg{mode: mode, job: job, self: 1, peer: 0, ring: 64 << 10})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := Connect(ctx, job, 0, 1, &Options{RingSize: 64 << 10})
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("connect: %v\n%s", err, out)
	}
	defer c.Close()
	r := blocked(func() error { return f(c) })
	time.Sleep(100 * time.Millisecond)
	killed := time.Now()
	cmd.Process.Kill() // not reaped until the end: the survivor sees a zombie
	select {
	case res := <-r:
		err, _ := res[0].(error)
		if !errors.Is(err, ErrPeerDead) {
			t.Errorf("got %v, want ErrPeerDead", err)
		}
		t.Logf("%v after the kill: %v", time.Since(killed), err)
	case <-time.After(5 * time.Second):
		t.Errorf("still blocked 5s after the peer was killed")
	}
	cmd.Wait()
	if f := shmFiles(job); len(f) != 0 {
		t.Errorf("files left: %v", f)
	}
}

func TestPeerKilledWhileStreaming(t *testing.T) {
	killedPeer(t, "stream", func(c *Chan) error {
		buf := make([]byte, 3*64<<10+12)
		for i := 0; ; i++ {
			m, err := c.Recv(context.Background(), func(n int) []byte { return buf[:n] })
			if err != nil {
				return err
			}
			if err := verify(buf[:m], i); err != nil {
				return err
			}
		}
	})
}

func TestPeerKilledWhileSending(t *testing.T) {
	killedPeer(t, "sleep", func(c *Chan) error {
		for {
			if err := c.Send(context.Background(), nil, make([]byte, 10000)); err != nil {
				return err
			}
		}
	})
}

func connectHelper(b *testing.B, mode, job string, ring int) (*Chan, *exec.Cmd) {
	return connectHelperOpt(b, mode, job, &Options{RingSize: ring})
}

func connectHelperOpt(b *testing.B, mode, job string, opt *Options) (*Chan, *exec.Cmd) {
	cmd, out := spawn(b, helperCfg{mode: mode, job: job, self: 1, peer: 0, ring: opt.RingSize})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Connect(ctx, job, 0, 1, opt)
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		b.Fatalf("connect: %v\n%s", err, out)
	}
	return c, cmd
}

func pingPong(b *testing.B, c *Chan) {
	ctx := context.Background()
	buf := make([]byte, 8)
	into := func(int) []byte { return buf }
	for range 1000 { // warm up
		c.Send(ctx, nil, buf)
		c.Recv(ctx, into)
	}
	b.ResetTimer()
	for range b.N {
		if err := c.Send(ctx, nil, buf); err != nil {
			b.Fatal(err)
		}
		if _, err := c.Recv(ctx, into); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2/1000, "µs/one-way")
}

// BenchmarkPingPong8 is the round trip of an 8-byte message between two
// processes (half of it is what osu_latency reports).
func BenchmarkPingPong8(b *testing.B) {
	c, cmd := connectHelper(b, "pong", testJob(b), DefaultRingSize)
	pingPong(b, c)
	c.Close()
	cmd.Wait()
}

// rateWindow is BenchmarkRate8's window, osu_mbw_mr's; rateSpin its
// spin, the runtime's when ranks have cores of their own.
const (
	rateWindow = 64
	rateSpin   = time.Millisecond
)

// BenchmarkRate8 is the ring's share of osu_mbw_mr at 8 bytes: windows of
// 64 messages (a 32-byte envelope, as the runtime's, and 8 bytes of
// payload), each acknowledged by the receiver, which receives as the
// runtime's reader does (RecvSplitIdleExclusive).
func BenchmarkRate8(b *testing.B) {
	c, cmd := connectHelperOpt(b, "ratesink", testJob(b), &Options{RingSize: DefaultRingSize, Spin: rateSpin})
	ctx := context.Background()
	ack := make([]byte, 4)
	into := func(int) []byte { return ack }
	rateWindows(b, ctx, c, false, func() error { _, err := c.Recv(ctx, into); return err })
	c.Close()
	cmd.Wait()
}

// BenchmarkRate8Many is BenchmarkRate8 with each window written by one
// SendMany (the runtime's StartAll of persistent sends).
func BenchmarkRate8Many(b *testing.B) {
	c, cmd := connectHelperOpt(b, "ratesink", testJob(b), &Options{RingSize: DefaultRingSize, Spin: rateSpin})
	ctx := context.Background()
	ack := make([]byte, 4)
	into := func(int) []byte { return ack }
	rateWindows(b, ctx, c, true, func() error { _, err := c.Recv(ctx, into); return err })
	c.Close()
	cmd.Wait()
}

// BenchmarkRate8Reader is BenchmarkRate8 as a rank runs it: the sender's
// acknowledgements are received by another goroutine (the runtime's
// reader), which spins on the other ring while the sender sends, so the
// two threads' state in the Chan must not share cache lines.
func BenchmarkRate8Reader(b *testing.B) {
	c, cmd := connectHelperOpt(b, "ratesink", testJob(b), &Options{RingSize: DefaultRingSize, Spin: rateSpin})
	ctx, cancel := context.WithCancel(context.Background())
	acks := make(chan error, 1)
	go func() {
		ack := make([]byte, 4)
		into := func(int) []byte { return ack }
		for {
			_, err := c.RecvSplitIdleExclusive(ctx, nil, 0, nil, into)
			acks <- err
			if err != nil {
				return
			}
		}
	}()
	rateWindows(b, ctx, c, false, func() error { return <-acks })
	cancel()
	<-acks
	c.Close()
	cmd.Wait()
}

// rateWindows sends b.N 8-byte messages with 32-byte envelopes in windows
// of rateWindow (each window one SendMany when many is set), calling ack
// after each window, and reports the rate.
func rateWindows(b *testing.B, ctx context.Context, c *Chan, many bool, ack func() error) {
	var env [32]byte
	payload := make([]byte, 8)
	windows := max(1, b.N/rateWindow)
	frame := func(int) ([]byte, []byte) { return env[:], payload }
	b.ResetTimer()
	for range windows {
		if many {
			if _, err := c.SendMany(ctx, rateWindow, frame); err != nil {
				b.Fatal(err)
			}
		}
		for i := 0; i < rateWindow && !many; i++ {
			if err := c.Send(ctx, env[:], payload); err != nil {
				b.Fatal(err)
			}
		}
		if err := ack(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(windows*rateWindow)/b.Elapsed().Seconds()/1e6, "Mmsg/s")
}

// BenchmarkPingPong8Oversubscribed: the same while a second pair of
// processes ping-pongs too: 4 processes on this machine's 2 cores.
func BenchmarkPingPong8Oversubscribed(b *testing.B) {
	job := testJob(b)
	other1, _ := spawn(b, helperCfg{mode: "ping", job: job, self: 2, peer: 3, ring: DefaultRingSize})
	other2, _ := spawn(b, helperCfg{mode: "pong", job: job, self: 3, peer: 2, ring: DefaultRingSize})
	c, cmd := connectHelper(b, "pong", job, DefaultRingSize)
	pingPong(b, c)
	c.Close()
	cmd.Wait()
	other1.Process.Kill()
	other2.Process.Kill()
	other1.Wait()
	other2.Wait()
}

// BenchmarkStream4MiB streams 4 MiB messages one way (the receiver copies
// each into its own buffer), like osu_bw.
func BenchmarkStream4MiB(b *testing.B) {
	for _, ring := range []int{256 << 10, 1 << 20, 4 << 20} {
		b.Run(fmt.Sprintf("ring=%dKiB", ring>>10), func(b *testing.B) {
			c, cmd := connectHelper(b, "sink", testJob(b), ring)
			ctx := context.Background()
			msg := make([]byte, 4<<20)
			for i := range msg {
				msg[i] = byte(i)
			}
			ack := func() {
				if err := c.Send(ctx, nil, msg[:1]); err != nil {
					b.Fatal(err)
				}
				if _, err := c.Recv(ctx, func(int) []byte { return make([]byte, 1) }); err != nil {
					b.Fatal(err)
				}
			}
			for range 4 {
				c.Send(ctx, nil, msg)
			}
			ack()
			b.SetBytes(int64(len(msg)))
			b.ResetTimer()
			for range b.N {
				if err := c.Send(ctx, nil, msg); err != nil {
					b.Fatal(err)
				}
			}
			ack()
			b.StopTimer()
			c.Close()
			cmd.Wait()
		})
	}
}

// BenchmarkMemcpy4MiB is the yardstick for BenchmarkStream4MiB: one core
// copying 4 MiB between two buffers.
func BenchmarkMemcpy4MiB(b *testing.B) {
	src, dst := make([]byte, 4<<20), make([]byte, 4<<20)
	b.SetBytes(int64(len(src)))
	for range b.N {
		copy(dst, src)
	}
}

// TestKilledDuringConnect: a creator killed before its peer attached leaves
// its file behind (nothing else can remove it); Sweep does.
func TestKilledDuringConnect(t *testing.T) {
	job := testJob(t)
	cmd, _ := spawn(t, helperCfg{mode: "sleep", job: job, self: 0, peer: 1, ring: MinRingSize})
	deadline := time.Now().Add(10 * time.Second)
	for len(shmFiles(job)) == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if f := shmFiles(job); len(f) != 1 {
		t.Fatalf("files: %v", f)
	}
	if n, err := Sweep("", job); n != 1 || err != nil {
		t.Fatalf("swept %d, %v", n, err)
	}
	if f := shmFiles(job); len(f) != 0 {
		t.Fatalf("files left after Sweep: %v", f)
	}
}
