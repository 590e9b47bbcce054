package ckpt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gompi/gompi/ckpt/layout"
	mpi "github.com/gompi/gompi/runtime"
)

// runRanks runs f on n in-process ranks and returns their errors.
func runRanks(t *testing.T, n int, f func(c *mpi.Comm) error) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	job := mpi.NewMemJob(n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			c, err := mpi.InitConfig(ctx, mpi.Config{Bootstrap: job.Rank(i), Host: "127.0.0.1"})
			if err != nil {
				errs[i] = err
				return
			}
			errs[i] = f(c)
			if ferr := c.Finalize(); errs[i] == nil {
				errs[i] = ferr
			}
		}(i)
	}
	wg.Wait()
	return errs
}

func noErrs(t *testing.T, errs []error) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// state is an application's state in these tests.
type state struct {
	Step int
	Grid []float64
	Blob *blob
}

// blob is large state saved through io.WriterTo/io.ReaderFrom; fail makes
// its reader report a failed read.
type blob struct {
	data []byte
	fail bool
}

func (b *blob) WriteTo(w io.Writer) (int64, error) {
	n, err := w.Write(b.data)
	return int64(n), err
}

func (b *blob) ReadFrom(r io.Reader) (int64, error) {
	if b.fail {
		return 0, errors.New("application refuses this read")
	}
	var buf bytes.Buffer
	n, err := buf.ReadFrom(r)
	b.data = buf.Bytes()
	return n, err
}

func (s *state) register(c *Ckpt) {
	c.Register("step", &s.Step)
	RegisterSlice(c, "grid", &s.Grid)
	c.RegisterStream("blob", s.Blob, s.Blob)
}

func newState(rank, step int) *state {
	s := &state{Step: step, Grid: make([]float64, 100), Blob: &blob{data: []byte(fmt.Sprintf("rank %d step %d", rank, step))}}
	for i := range s.Grid {
		s.Grid[i] = float64(rank*1000+i) + float64(step)/10
	}
	return s
}

// checkpointSteps writes one epoch per step in steps.
func checkpointSteps(t *testing.T, n int, cfg Config, steps ...int) {
	t.Helper()
	checkpointStepsFor(t, n, func(int) Config { return cfg }, steps...)
}

// checkpointStepsFor is checkpointSteps with a configuration per rank
// (a cache directory per simulated node).
func checkpointStepsFor(t *testing.T, n int, cfgOf func(rank int) Config, steps ...int) {
	t.Helper()
	noErrs(t, runRanks(t, n, func(comm *mpi.Comm) error {
		c, err := New(context.Background(), comm, cfgOf(comm.Rank()))
		if err != nil {
			return err
		}
		s := newState(comm.Rank(), 0)
		s.register(c)
		for _, st := range steps {
			ns := newState(comm.Rank(), st)
			s.Step, s.Grid, s.Blob.data = ns.Step, ns.Grid, ns.Blob.data
			if err := c.Checkpoint(); err != nil {
				return err
			}
		}
		return c.Close()
	}))
}

// restoreAll restores on n ranks and returns each rank's epoch, state and
// error; failRank's reader fails for the newest epoch.
func restoreAll(t *testing.T, n int, cfg Config, failRank int) ([]int, []*state, []error) {
	t.Helper()
	return restoreAllFor(t, n, func(int) Config { return cfg }, failRank)
}

// restoreExpect restores n ranks under cfg and checks that rank 0 restored
// epoch and every rank's state is the one of step; msg (with the epochs
// restored) says which restart failed.
func restoreExpect(t *testing.T, n int, cfg Config, epoch, step int, msg string) {
	t.Helper()
	eps, sts, errs := restoreAll(t, n, cfg, -1)
	noErrs(t, errs)
	if eps[0] != epoch {
		t.Fatalf(msg, eps)
	}
	checkState(t, sts, step)
}

// restoreAllFor is restoreAll with a configuration per rank.
func restoreAllFor(t *testing.T, n int, cfgOf func(rank int) Config, failRank int) ([]int, []*state, []error) {
	t.Helper()
	eps := make([]int, n)
	sts := make([]*state, n)
	errs := runRanks(t, n, func(comm *mpi.Comm) error {
		c, err := New(context.Background(), comm, cfgOf(comm.Rank()))
		if err != nil {
			return err
		}
		s := &state{Blob: &blob{}}
		s.register(c)
		if comm.Rank() == failRank {
			// The reader fails once: candidates are tried newest first,
			// so it refuses the newest epoch only.
			s.Blob.fail = true
			orig := c.secs[2].load
			c.secs[2].load = func(r io.Reader, size int64) error {
				err := orig(r, size)
				s.Blob.fail = false
				return err
			}
		}
		e, err := c.Restore()
		eps[comm.Rank()], sts[comm.Rank()] = e, s
		if err != nil {
			c.Close() // the prefix's owner record: the next job runs in this process
			return err
		}
		return c.Close()
	})
	return eps, sts, errs
}

func checkState(t *testing.T, sts []*state, step int) {
	t.Helper()
	for r, s := range sts {
		want := newState(r, step)
		if s.Step != want.Step || fmt.Sprint(s.Grid) != fmt.Sprint(want.Grid) || !bytes.Equal(s.Blob.data, want.Blob.data) {
			t.Fatalf("rank %d restored step %d %q, want step %d %q", r, s.Step, s.Blob.data, step, want.Blob.data)
		}
	}
}

func TestCheckpointRestore(t *testing.T) {
	cfg := Config{Prefix: t.TempDir(), Keep: 5}
	checkpointSteps(t, 3, cfg, 10, 20)
	eps, sts, errs := restoreAll(t, 3, cfg, -1)
	noErrs(t, errs)
	if eps[0] != 2 || eps[2] != 2 {
		t.Fatalf("restored epochs %v, want 2", eps)
	}
	checkState(t, sts, 20)
	// A second run continues the epoch counter.
	checkpointSteps(t, 3, cfg, 30)
	if m, err := layout.Newest(cfg.Prefix); err != nil || m.Epoch != 3 {
		t.Fatalf("newest after a second run: %+v %v, want epoch 3", m, err)
	}
}

func TestRestoreFallsBackTogether(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(prefix string) error
	}{
		{"deleted rank file", func(p string) error { return os.Remove(layout.RankPath(p, 2, 1)) }},
		{"one byte", func(p string) error {
			path := layout.RankPath(p, 2, 2)
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			b[7] ^= 0x40
			return os.WriteFile(path, b, 0o644)
		}},
		{"uncommitted newest", func(p string) error { return os.Remove(p + "/epoch.000002/MANIFEST") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Prefix: t.TempDir(), Keep: 5}
			checkpointSteps(t, 3, cfg, 10, 20)
			if err := tc.damage(cfg.Prefix); err != nil {
				t.Fatal(err)
			}
			eps, sts, errs := restoreAll(t, 3, cfg, -1)
			noErrs(t, errs)
			if eps[0] != 1 || eps[1] != 1 || eps[2] != 1 {
				t.Fatalf("restored epochs %v, want 1 on every rank", eps)
			}
			checkState(t, sts, 10)
		})
	}
}

func TestRestoreFailedRead(t *testing.T) {
	cfg := Config{Prefix: t.TempDir(), Keep: 5}
	checkpointSteps(t, 3, cfg, 10, 20)
	eps, sts, errs := restoreAll(t, 3, cfg, 1)
	noErrs(t, errs)
	if eps[0] != 1 || eps[2] != 1 {
		t.Fatalf("a rank failed reading epoch 2: restored %v, want 1 everywhere", eps)
	}
	checkState(t, sts, 10)
}

func TestRestoreNothing(t *testing.T) {
	cfg := Config{Prefix: t.TempDir()}
	_, _, errs := restoreAll(t, 2, cfg, -1)
	for r, err := range errs {
		if !errors.Is(err, ErrNoCheckpoint) {
			t.Fatalf("rank %d: %v, want ErrNoCheckpoint", r, err)
		}
	}
	// Every epoch damaged: the same, naming why.
	checkpointSteps(t, 2, cfg, 10)
	os.Remove(layout.RankPath(cfg.Prefix, 1, 0))
	_, _, errs = restoreAll(t, 2, cfg, -1)
	var re *RestoreError
	if !errors.Is(errs[0], ErrNoCheckpoint) || !errors.As(errs[0], &re) || len(re.Tried) != 1 {
		t.Fatalf("rank 0: %v, want a RestoreError for epoch 1", errs[0])
	}
}

func TestRestoreOtherRankCount(t *testing.T) {
	cfg := Config{Prefix: t.TempDir()}
	checkpointSteps(t, 3, cfg, 10)
	_, _, errs := restoreAll(t, 2, cfg, -1)
	for r, err := range errs {
		if !errors.Is(err, ErrRankCount) {
			t.Fatalf("rank %d: %v, want ErrRankCount", r, err)
		}
	}
	// With a callback, 2 ranks take the 3 old ranks' steps.
	got := make([][]int, 2)
	noErrs(t, runRanks(t, 2, func(comm *mpi.Comm) error {
		c, err := New(context.Background(), comm, cfg)
		if err != nil {
			return err
		}
		var step int
		c.Register("step", &step)
		c.SetRedistribute(func(o *OldEpoch) error {
			for r := comm.Rank(); r < o.Ranks; r += comm.Size() {
				b, err := o.Section(r, "blob")
				if err != nil {
					return err
				}
				got[comm.Rank()] = append(got[comm.Rank()], len(b))
			}
			return nil
		})
		if _, err := c.Restore(); err != nil {
			return err
		}
		return c.Close()
	}))
	if len(got[0]) != 2 || len(got[1]) != 1 {
		t.Fatalf("redistribution read %v", got)
	}
}

func TestNeedCheckpointAgrees(t *testing.T) {
	cfg := Config{Prefix: t.TempDir()}
	reqs := make([]chan struct{}, 3)
	for i := range reqs {
		reqs[i] = make(chan struct{}, 1)
	}
	answers := make([][]bool, 3)
	noErrs(t, runRanks(t, 3, func(comm *mpi.Comm) error {
		cc := cfg
		cc.Requests = reqs[comm.Rank()]
		c, err := New(context.Background(), comm, cc)
		if err != nil {
			return err
		}
		if comm.Rank() == 1 {
			c.Request() // as a request through the event channel would
		}
		for i := 0; i < 3; i++ {
			if i == 1 && comm.Rank() == 2 {
				// The event record for the same request reaches rank 2
				// a step late: no second checkpoint.
				c.raise(1)
			}
			need, err := c.NeedCheckpoint()
			if err != nil {
				return err
			}
			answers[comm.Rank()] = append(answers[comm.Rank()], need)
		}
		return c.Close()
	}))
	for r, a := range answers {
		if len(a) != 3 || !a[0] || a[1] || a[2] {
			t.Fatalf("rank %d answered %v, want [true false false]", r, a)
		}
	}
}

func TestKeep(t *testing.T) {
	cfg := Config{Prefix: t.TempDir(), Keep: 2}
	checkpointSteps(t, 2, cfg, 1, 2, 3, 4)
	eps, err := layout.List(cfg.Prefix)
	if err != nil || len(eps) != 2 || eps[0].Epoch != 3 || eps[1].Epoch != 4 {
		t.Fatalf("epochs %+v %v, want 3 and 4", eps, err)
	}
}

func TestCacheLevel(t *testing.T) {
	cfg := Config{Prefix: t.TempDir(), Cache: t.TempDir(), Keep: 2}
	checkpointSteps(t, 3, cfg, 10, 20, 30)
	// Close waited for the flush: the newest epoch is committed in the
	// prefix and intact there.
	m, err := layout.Newest(cfg.Prefix)
	if err != nil || m.Epoch != 3 {
		t.Fatalf("prefix newest %+v %v, want epoch 3", m, err)
	}
	if bad, err := layout.Verify(cfg.Prefix, 3); err != nil || bad != nil {
		t.Fatalf("flushed epoch: %v %v", bad, err)
	}
	// The cache keeps K epochs too once the last flush is committed
	// (Close: no checkpoint follows to prune it).
	if eps, err := layout.List(cfg.Cache); err != nil || len(eps) != 2 || eps[0].Epoch != 2 || eps[1].Epoch != 3 {
		t.Fatalf("cache epochs after Close %+v %v, want 2 and 3", eps, err)
	}
	one := Config{Prefix: t.TempDir(), Cache: t.TempDir(), Keep: 1}
	checkpointSteps(t, 3, one, 10, 20, 30)
	if eps, err := layout.List(one.Cache); err != nil || len(eps) != 1 || eps[0].Epoch != 3 {
		t.Fatalf("cache epochs after Close with -ckpoint-keep 1: %+v %v, want 3 only", eps, err)
	}
	// Losing the whole cache: restart from the prefix.
	os.RemoveAll(cfg.Cache)
	restoreExpect(t, 3, cfg, 3, 30, "restored %v, want 3")
}

func TestCacheOnlyEpoch(t *testing.T) {
	// An epoch whose flush never completed is restartable from the
	// caches, and not from the prefix.
	cfg := Config{Prefix: t.TempDir(), Cache: t.TempDir(), Keep: 3}
	checkpointSteps(t, 2, cfg, 10, 20)
	if err := layout.Remove(cfg.Prefix, 2); err != nil {
		t.Fatal(err)
	}
	restoreExpect(t, 2, cfg, 2, 20, "restored %v, want 2 from the cache")
	// The restart completed the flush: epoch 2 is back in the prefix.
	if bad, err := layout.Verify(cfg.Prefix, 2); err != nil || bad != nil {
		t.Fatalf("prefix epoch 2 after the restart: %v %v", bad, err)
	}
	// The newest epoch deleted from the cache and the prefix: epoch 1
	// from wherever.
	layout.Remove(cfg.Cache, 2)
	layout.Remove(cfg.Prefix, 2)
	restoreExpect(t, 2, cfg, 1, 10, "restored %v, want 1")
}

func TestConfigFromEnv(t *testing.T) {
	t.Setenv(EnvPrefix, "/p")
	t.Setenv(EnvInterval, "1.5")
	t.Setenv(EnvKeep, "3")
	t.Setenv(EnvEpoch, "7")
	c := FromEnv()
	if err := c.validate(); err != nil || c.Prefix != "/p" || c.Interval != 1500*time.Millisecond || c.Keep != 3 || c.Epoch != 7 {
		t.Fatalf("FromEnv = %+v, %v", c, err)
	}
	t.Setenv(EnvKeep, "zero")
	c = FromEnv()
	if err := c.validate(); err == nil {
		t.Fatal("bad GOMPI_CKPT_KEEP accepted")
	}
	if err := (&Config{}).validate(); !errors.Is(err, ErrNoPrefix) {
		t.Fatalf("empty config: %v", err)
	}
}

// A section name registered twice is an error from Checkpoint and Restore
// on every rank, not a panic.
func TestRegisterTwiceIsAnError(t *testing.T) {
	cfg := Config{Prefix: t.TempDir()}
	errs := runRanks(t, 2, func(comm *mpi.Comm) error {
		c, err := New(context.Background(), comm, cfg)
		if err != nil {
			return err
		}
		var a, b int
		c.Register("x", &a)
		c.Register("x", &b)
		if _, err := c.Restore(); err == nil || !strings.Contains(err.Error(), `"x" registered twice`) {
			return fmt.Errorf("Restore: %v, want the duplicate named", err)
		}
		if err := c.Checkpoint(); err == nil || !strings.Contains(err.Error(), `"x" registered twice`) {
			return fmt.Errorf("Checkpoint: %v, want the duplicate named", err)
		}
		return c.Close()
	})
	noErrs(t, errs)
}

// TestCacheRecycles: with a cache, a Checkpoint overwrites the rank's
// spare file (preallocated after the first flush, then the retired
// epoch's file) instead of allocating a new one, and Close gives the spare
// back; every epoch still restores.
func TestCacheRecycles(t *testing.T) {
	cfg := Config{Prefix: t.TempDir(), Cache: t.TempDir(), Keep: 1}
	noErrs(t, runRanks(t, 2, func(comm *mpi.Comm) error {
		c, err := New(context.Background(), comm, cfg)
		if err != nil {
			return err
		}
		s := newState(comm.Rank(), 0)
		s.register(c)
		spare := layout.SparePath(cfg.Cache, comm.Rank())
		var prev os.FileInfo // the spare the next epoch must reuse
		for e, st := range []int{10, 20, 30} {
			ns := newState(comm.Rank(), st)
			s.Step, s.Grid, s.Blob.data = ns.Step, ns.Grid, ns.Blob.data
			if err := c.Checkpoint(); err != nil {
				return err
			}
			now, err := os.Stat(layout.RankPath(cfg.Cache, e+1, comm.Rank()))
			if err != nil {
				return err
			}
			if prev != nil && !os.SameFile(prev, now) {
				return fmt.Errorf("epoch %d: a new file, not the spare", e+1)
			}
			if err := c.Flush(); err != nil {
				return err
			}
			if prev, err = os.Stat(spare); err != nil {
				return fmt.Errorf("after epoch %d: no spare: %v", e+1, err)
			}
		}
		if err := c.Close(); err != nil {
			return err
		}
		if _, err := os.Stat(spare); !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("spare left after Close: %v", err)
		}
		return nil
	}))
	if eps, _ := layout.List(cfg.Cache); len(eps) != 1 || eps[0].Epoch != 3 {
		t.Fatalf("cache epochs %+v, want 3 only", eps)
	}
	restoreExpect(t, 2, cfg, 3, 30, "restored %v, want 3")
	// From the prefix alone too.
	os.RemoveAll(cfg.Cache)
	restoreExpect(t, 2, cfg, 3, 30, "restored %v from the prefix, want 3")
}

// TestCacheChecksumDeferred: with a cache (no partner), Checkpoint commits
// the cache manifest without checksums and the flush computes them from
// the cache files: the prefix's manifest and then the cache's carry the
// files' true CRC-32C, so a cache copy damaged later is caught.
func TestCacheChecksumDeferred(t *testing.T) {
	cfg := Config{Prefix: t.TempDir(), Cache: t.TempDir(), Keep: 2}
	noErrs(t, runRanks(t, 2, func(comm *mpi.Comm) error {
		c, err := New(context.Background(), comm, cfg)
		if err != nil {
			return err
		}
		s := newState(comm.Rank(), 10)
		s.register(c)
		if err := c.Checkpoint(); err != nil {
			return err
		}
		if comm.Rank() == 0 {
			m, err := layout.ReadManifest(cfg.Cache, 1)
			if err != nil {
				return err
			}
			if m.Checksummed() {
				return fmt.Errorf("cache manifest has checksums before the flush: %+v", m.Files)
			}
		}
		if err := c.Flush(); err != nil {
			return err
		}
		return c.Close()
	}))
	for _, dir := range []string{cfg.Prefix, cfg.Cache} {
		m, err := layout.ReadManifest(dir, 1)
		if err != nil || !m.Checksummed() {
			t.Fatalf("%s: manifest %+v %v, want checksums", dir, m, err)
		}
		for _, f := range m.Files {
			got, err := layout.Checksum(dir, 1, layout.File{Name: f.Name, Size: f.Size})
			if err != nil || got.CRC32C != f.CRC32C {
				t.Fatalf("%s rank %d: manifest says %s, file has %s (%v)", dir, f.Rank, f.CRC32C, got.CRC32C, err)
			}
		}
	}
	// One byte of rank 1's cache copy damaged: caught, the prefix copy
	// restores.
	p := layout.RankPath(cfg.Cache, 1, 1)
	b, _ := os.ReadFile(p)
	b[3] ^= 0x40
	os.WriteFile(p, b, 0o644)
	restoreExpect(t, 2, cfg, 1, 10, "restored %v, want 1")
}

// TestCachePrimedBeforeFirstCheckpoint: the first NeedCheckpoint that
// says no asks for a spare of the raw slices' size, so the first
// Checkpoint overwrites allocated storage too.
func TestCachePrimedBeforeFirstCheckpoint(t *testing.T) {
	cfg := Config{Prefix: t.TempDir(), Cache: t.TempDir()}
	noErrs(t, runRanks(t, 2, func(comm *mpi.Comm) error {
		c, err := New(context.Background(), comm, cfg)
		if err != nil {
			return err
		}
		s := newState(comm.Rank(), 10)
		s.register(c)
		if need, err := c.NeedCheckpoint(); err != nil || need {
			return fmt.Errorf("NeedCheckpoint = %v, %v", need, err)
		}
		if err := c.Flush(); err != nil {
			return err
		}
		spare, err := os.Stat(layout.SparePath(cfg.Cache, comm.Rank()))
		if err != nil || spare.Size() != int64(8*len(s.Grid)) {
			return fmt.Errorf("spare %v (%v), want %d bytes", spare, err, 8*len(s.Grid))
		}
		if err := c.Checkpoint(); err != nil {
			return err
		}
		now, err := os.Stat(layout.RankPath(cfg.Cache, 1, comm.Rank()))
		if err != nil || !os.SameFile(spare, now) {
			return fmt.Errorf("the first epoch's file is not the spare (%v)", err)
		}
		return c.Close()
	}))
	restoreExpect(t, 2, cfg, 1, 10, "restored %v, want 1")
}

// TestKeepSkipsUnreadableEpochs: an epoch a restart could not read back
// does not count towards -ckpoint-keep. Epoch 2 is damaged, the job
// restarts from epoch 1 and checkpoints epoch 3: with Keep 2, epochs 3 and
// 2 used to be kept and epoch 1 removed, leaving one readable epoch (3)
// where the user asked for two; 3 and 1 must stay readable. One more
// checkpoint then removes both 1 and the damaged 2.
func TestKeepSkipsUnreadableEpochs(t *testing.T) {
	for _, cached := range []bool{false, true} {
		t.Run(fmt.Sprintf("cache=%v", cached), func(t *testing.T) {
			cfg := Config{Prefix: t.TempDir(), Keep: 2}
			if cached {
				cfg.Cache = t.TempDir()
			}
			checkpointSteps(t, 3, cfg, 10, 20)
			for _, dir := range []string{cfg.Prefix, cfg.Cache} {
				if dir != "" {
					if err := os.Remove(layout.RankPath(dir, 2, 1)); err != nil {
						t.Fatal(err)
					}
				}
			}
			run := func(steps ...int) {
				noErrs(t, runRanks(t, 3, func(comm *mpi.Comm) error {
					c, err := New(context.Background(), comm, cfg)
					if err != nil {
						return err
					}
					s := &state{Blob: &blob{}}
					s.register(c)
					if _, err := c.Restore(); err != nil {
						return err
					}
					for _, st := range steps {
						ns := newState(comm.Rank(), st)
						s.Step, s.Grid, s.Blob.data = ns.Step, ns.Grid, ns.Blob.data
						if err := c.Checkpoint(); err != nil {
							return err
						}
					}
					return c.Close()
				}))
			}
			run(30)
			// With a cache, the prefix commits only the newest flushed
			// epoch: epoch 1 is kept in the cache.
			where := cfg.Prefix
			if cached {
				where = cfg.Cache
			}
			for _, e := range []int{1, 3} {
				if _, err := layout.ReadManifest(where, e); err != nil {
					t.Fatalf("after restoring epoch 1 past the damaged 2 and checkpointing 3 with Keep 2: epoch %d: %v", e, err)
				}
			}
			one := cfg
			one.Epoch = 1
			restoreExpect(t, 3, one, 1, 10, "restored %v, want epoch 1")
			run(40)
			got, err := layout.List(where)
			if err != nil || len(got) != 2 || got[0].Epoch != 3 || got[1].Epoch != 4 {
				t.Fatalf("epochs after one more checkpoint: %+v %v, want 3 and 4", got, err)
			}
		})
	}
}

// TestCacheOfAnotherPrefix: a job with a new prefix and a cache directory
// another job left (a common /tmp/ckpt) used to restore that job's
// checkpoint from the cache, as if it were its own (heat then panicked on
// a grid of another size). New now refuses such a cache on every rank,
// naming it; the owning prefix still uses it.
func TestCacheOfAnotherPrefix(t *testing.T) {
	cache := t.TempDir()
	a := Config{Prefix: t.TempDir(), Cache: cache, Keep: 2}
	checkpointSteps(t, 2, a, 10)
	b := Config{Prefix: t.TempDir(), Cache: cache, Keep: 2}
	errs := runRanks(t, 2, func(comm *mpi.Comm) error {
		c, err := New(context.Background(), comm, b)
		if err != nil {
			return err
		}
		s := &state{Blob: &blob{}}
		s.register(c)
		e, err := c.Restore()
		c.Close()
		return fmt.Errorf("restored epoch %d (%v) of another prefix's cache", e, err)
	})
	for r, err := range errs {
		if !errors.Is(err, layout.ErrForeignCache) {
			t.Fatalf("rank %d: %v, want ErrForeignCache", r, err)
		}
		if r == 0 && !strings.Contains(err.Error(), cache) {
			t.Fatalf("rank 0: %v does not name the cache %s", err, cache)
		}
	}
	restoreExpect(t, 2, a, 1, 10, "the owner restored %v, want epoch 1")
}

// TestCacheOfARunningJob: a second job started with the same prefix and
// cache while the first runs (a job submitted twice) used to share the
// node's cache with it: each pruned, moved to spares and renamed over the
// other's epoch files (heat: "commit .../epoch.000011/MANIFEST: no such
// file or directory"), and a restart from the cache, which checks an
// unflushed file by its size and index only, could take a mixture of the
// two states for a whole epoch. New now refuses on every rank while the
// first job holds the cache, naming it, and accepts once it closed.
func TestCacheOfARunningJob(t *testing.T) {
	cfg := Config{Prefix: t.TempDir(), Cache: t.TempDir(), Keep: 2}
	errs := besideRunningJob(t, cfg, func(comm *mpi.Comm, c *Ckpt) error {
		s := newState(comm.Rank(), 10)
		s.register(c)
		return c.Checkpoint()
	})
	for r, err := range errs {
		if !errors.Is(err, layout.ErrCacheInUse) {
			t.Fatalf("rank %d: %v, want ErrCacheInUse", r, err)
		}
		if r == 0 && !strings.Contains(err.Error(), cfg.Cache) {
			t.Fatalf("rank 0: %v does not name the cache %s", err, cfg.Cache)
		}
	}
	restoreExpect(t, 2, cfg, 1, 10, "after the first job closed: restored %v, want epoch 1")
}

// besideRunningJob starts a second 2-rank job with cfg while a first one
// with cfg, set up by prep, still runs, and returns the second's errors
// on New (an error of its own if New succeeded).
func besideRunningJob(t *testing.T, cfg Config, prep func(comm *mpi.Comm, c *Ckpt) error) []error {
	t.Helper()
	held, release := make(chan struct{}), make(chan struct{})
	first := make(chan []error)
	go func() {
		first <- runRanks(t, 2, func(comm *mpi.Comm) error {
			c, err := New(context.Background(), comm, cfg)
			if err != nil {
				return err
			}
			if err := prep(comm, c); err != nil {
				return err
			}
			if comm.Rank() == 0 {
				close(held)
			}
			<-release
			return c.Close()
		})
	}()
	<-held
	errs := runRanks(t, 2, func(comm *mpi.Comm) error {
		c, err := New(context.Background(), comm, cfg)
		if err != nil {
			return err
		}
		c.Close()
		return errors.New("New succeeded beside a running job")
	})
	close(release)
	noErrs(t, <-first)
	return errs
}

// TestCommitsEveryFlushedEpoch: epochs whose flushes end between two
// collective calls of the library are all committed in the prefix. Only
// the newest was: the others stayed uncommitted there and were removed
// as leftovers, so -ckpoint-keep 3 left one epoch in the prefix (and
// keep 2 left epochs 8 and 10 of a run, not 9 and 10).
func TestCommitsEveryFlushedEpoch(t *testing.T) {
	cfg := Config{Prefix: t.TempDir(), Cache: t.TempDir(), Keep: 3}
	gate := make(chan struct{})
	testFlushGate = func() { <-gate }
	defer func() { testFlushGate = nil }()
	var once sync.Once
	noErrs(t, runRanks(t, 2, func(comm *mpi.Comm) error {
		c, err := New(context.Background(), comm, cfg)
		if err != nil {
			return err
		}
		s := newState(comm.Rank(), 0)
		s.register(c)
		for _, st := range []int{10, 20, 30} {
			s.Step = st
			if err := c.Checkpoint(); err != nil {
				return err
			}
		}
		// Every flush ends before the next collective call (Close's).
		if err := comm.Barrier(); err != nil {
			return err
		}
		once.Do(func() { close(gate) })
		return c.Close()
	}))
	eps, err := layout.List(cfg.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for _, e := range eps {
		if e.Committed() {
			got = append(got, e.Epoch)
		}
	}
	if fmt.Sprint(got) != "[1 2 3]" {
		t.Fatalf("committed in the prefix: %v, want [1 2 3]", got)
	}
	for e := 1; e <= 3; e++ {
		if bad, err := layout.Verify(cfg.Prefix, e); err != nil || bad != nil {
			t.Fatalf("epoch %d: %v %v", e, bad, err)
		}
	}
}

// TestRestoreRequestedEpochFails: with Config.Epoch (-ckpoint-num), an
// epoch that cannot be restored is an error that does not match
// ErrNoCheckpoint. It did: heat, as the package's documented loop does,
// then started from step 0 and its checkpoints pruned the epochs the user
// had asked to restart from.
func TestRestoreRequestedEpochFails(t *testing.T) {
	cfg := Config{Prefix: t.TempDir(), Keep: 5}
	checkpointSteps(t, 2, cfg, 10, 20)
	if err := os.Truncate(layout.RankPath(cfg.Prefix, 2, 1), 10); err != nil {
		t.Fatal(err)
	}
	for _, e := range []int{2, 9} {
		want := cfg
		want.Epoch = e
		_, _, errs := restoreAll(t, 2, want, -1)
		for r, err := range errs {
			if !errors.Is(err, ErrEpochUnavailable) || errors.Is(err, ErrNoCheckpoint) || !strings.Contains(err.Error(), fmt.Sprintf("-ckpoint-num %d", e)) {
				t.Fatalf("epoch %d, rank %d: %v; want ErrEpochUnavailable naming -ckpoint-num %d, not ErrNoCheckpoint", e, r, err, e)
			}
		}
	}
}

// TestRestoreNoneLeavesState: when no epoch is restored, no rank's state
// was loaded from one. The only epoch, damaged on rank 1: rank 0 used to
// load it before the ranks agreed it failed, and the application,
// starting from the beginning, ran rank 0 from the epoch's step and rank 1
// from 0 (examples/heat hung). An epoch every copy of which is intact but
// that one rank's reader refuses leaves the others loaded: that is
// ErrPartialRestore, not ErrNoCheckpoint.
func TestRestoreNoneLeavesState(t *testing.T) {
	t.Run("damaged on one rank", func(t *testing.T) {
		cfg := Config{Prefix: t.TempDir(), Keep: 5}
		checkpointSteps(t, 3, cfg, 10)
		if err := os.Truncate(layout.RankPath(cfg.Prefix, 1, 1), 10); err != nil {
			t.Fatal(err)
		}
		_, sts, errs := restoreAll(t, 3, cfg, -1)
		for r, err := range errs {
			if !errors.Is(err, ErrNoCheckpoint) {
				t.Fatalf("rank %d: %v, want ErrNoCheckpoint", r, err)
			}
			if s := sts[r]; s.Step != 0 || s.Grid != nil || s.Blob.data != nil {
				t.Fatalf("rank %d: no epoch restored, yet its state is step %d, %d grid points, %q", r, s.Step, len(s.Grid), s.Blob.data)
			}
		}
	})
	t.Run("refused by one rank's reader", func(t *testing.T) {
		cfg := Config{Prefix: t.TempDir(), Keep: 5}
		checkpointSteps(t, 3, cfg, 10)
		_, _, errs := restoreAll(t, 3, cfg, 1)
		for r, err := range errs {
			if !errors.Is(err, ErrPartialRestore) || errors.Is(err, ErrNoCheckpoint) {
				t.Fatalf("rank %d: %v, want ErrPartialRestore (not ErrNoCheckpoint)", r, err)
			}
		}
	})
}
