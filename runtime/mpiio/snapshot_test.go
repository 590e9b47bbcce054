package mpiio_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	mpi "github.com/gompi/gompi/runtime"
	"github.com/gompi/gompi/runtime/cow"
	"github.com/gompi/gompi/runtime/mpiio"
	"github.com/gompi/gompi/runtime/mpiio/journal"
	"golang.org/x/sys/unix"
)

func snapHints(cdir string) mpiio.Hints {
	return mpiio.Hints{"gompi_cache_dir": cdir, "gompi_cache_snapshot": "enable", "gompi_cache_snapshot_min": "1",
		"gompi_cache_flush_delay": "20ms"}
}

// snapPattern is n bytes, one value per 4 KiB (filled by doubling copies:
// cheap under the race detector).
func snapPattern(gen, rank, n int) []byte {
	b := make([]byte, n)
	for i := 0; i < n; i += 4096 {
		blk := b[i:min(i+4096, n)]
		blk[0] = byte(gen*31 + rank*7 + i/4096)
		for k := 1; k < len(blk); k *= 2 {
			copy(blk[k:], blk[:k])
		}
	}
	return b
}

// With gompi_cache_snapshot, cached writes return after a fork and the
// caller reuses its buffer at once: each write lands as it was at the
// call, a read right after a write sees it, many writes are in flight at
// once (collective and independent, heap and cow.Make buffers), and a
// buffer in shared memory, which a fork would not capture, is copied.
// With GOMPI_COW=off every write takes the copy path.
func TestCacheSnapshot(t *testing.T) {
	for _, tc := range []struct {
		name, mem string
		off       bool // GOMPI_COW=off
		wantSnaps bool
	}{
		{"heap", "heap", false, true},
		{"cow", "cow", false, true},
		{"shared memory", "shared", false, false},
		{"GOMPI_COW=off", "heap", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.off {
				t.Setenv(cow.EnvDisable, "off")
			}
			dir := t.TempDir()
			path, cdir := filepath.Join(dir, "f"), filepath.Join(dir, "cache")
			const n, gens = 1 << 20, 12
			runRanks(t, 2, func(c *mpi.Comm) error {
				f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeCreate|mpiio.ModeRdwr, snapHints(cdir))
				if err != nil {
					return err
				}
				var buf []byte
				switch tc.mem {
				case "heap":
					buf = make([]byte, n)
				case "cow":
					if buf, err = cow.Make[byte](n); err != nil {
						return err
					}
					defer cow.Free(buf)
				case "shared":
					if buf, err = unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS); err != nil {
						return err
					}
					defer unix.Munmap(buf)
				}
				me := c.Rank()
				for g := 0; g < gens; g++ {
					copy(buf, snapPattern(g, me, n))
					off := int64((g*2 + me) * n)
					if g%2 == 0 {
						_, err = f.WriteAtAll(buf, off)
					} else {
						_, err = f.WriteAt(buf, off)
					}
					if err != nil {
						return err
					}
					clear(buf) // at once: the write has its own copy
					if g == 3 {
						// Read right after a write: waits for its writer.
						got := make([]byte, n)
						if _, err := f.ReadAt(got, off); err != nil || !bytes.Equal(got, snapPattern(g, me, n)) {
							return fmt.Errorf("read right after write %d: %v", g, err)
						}
					}
				}
				snaps := mpiio.CacheSnapshots(f)
				if tc.wantSnaps && snaps != gens || !tc.wantSnaps && snaps != 0 {
					return fmt.Errorf("%d writes took the snapshot path, want %v", snaps, map[bool]int{true: gens, false: 0}[tc.wantSnaps])
				}
				if err := f.Sync(); err != nil {
					return err
				}
				if err := c.Barrier(); err != nil {
					return err
				}
				other := 1 - me
				got := make([]byte, n)
				for g := 0; g < gens; g++ {
					if _, err := f.ReadAt(got, int64((g*2+other)*n)); err != nil || !bytes.Equal(got, snapPattern(g, other, n)) {
						return fmt.Errorf("rank %d's write %d read after Sync: %v", other, g, err)
					}
				}
				return f.Close()
			})
			if left, _ := filepath.Glob(filepath.Join(cdir, "*")); len(left) != 0 {
				t.Fatalf("cache files left after Close: %v", left)
			}
		})
	}
}

// A collective cached write's snapshot writer is held until the call
// returns (cow.Options.Hold): at the end of the call, after its
// agreement, nothing is in the cache's data file yet; after the return
// the writer is released, and Sync finds every byte in place. Both
// shapes: disjoint ranges (each rank's own write) and interleaved pieces
// (cached locally on the plan's domains).
func TestCacheSnapshotHeldUntilReturn(t *testing.T) {
	for _, interleaved := range []bool{false, true} {
		t.Run(map[bool]string{false: "contiguous", true: "interleaved"}[interleaved], func(t *testing.T) {
			dir := t.TempDir()
			path, cdir := filepath.Join(dir, "f"), filepath.Join(dir, "cache")
			const n, blk = 1 << 20, 4096
			var mu sync.Mutex
			var seen []string
			defer mpiio.SetTestBeforeRelease(func(f *mpiio.File) {
				held, size := mpiio.CacheHeld(f)
				mu.Lock()
				seen = append(seen, fmt.Sprintf("held %d, data file %d bytes", held, size))
				mu.Unlock()
			})()
			runRanks(t, 2, func(c *mpi.Comm) error {
				f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeCreate|mpiio.ModeRdwr, snapHints(cdir))
				if err != nil {
					return err
				}
				me := c.Rank()
				off := int64(me * n)
				// where rank r's byte i is in the file
				at := func(r, i int) int { return r*n + i }
				if interleaved {
					ft, err := mpi.Vector(n/blk, blk, 2*blk, mpi.Byte)
					if err == nil {
						err = f.SetView(int64(me*blk), mpi.Byte, ft)
					}
					if err != nil {
						return err
					}
					off = 0
					at = func(r, i int) int { return i/blk*2*blk + r*blk + i%blk }
				}
				buf := snapPattern(0, me, n)
				if _, err := f.WriteAtAll(buf, off); err != nil {
					return err
				}
				clear(buf)
				if held, _ := mpiio.CacheHeld(f); held != 0 {
					return fmt.Errorf("%d snapshot writers still held after the call returned", held)
				}
				if got := mpiio.CacheSnapshots(f); got != 1 {
					return fmt.Errorf("%d writes took the snapshot path, want 1", got)
				}
				if err := f.Sync(); err != nil {
					return err
				}
				if err := f.Close(); err != nil {
					return err
				}
				got, err := os.ReadFile(path)
				if err != nil {
					return err
				}
				for r := 0; r < 2; r++ {
					want := snapPattern(0, r, n)
					for i := 0; i < n; i += blk {
						if at(r, i) >= len(got) || got[at(r, i)] != want[i] {
							return fmt.Errorf("rank %d's byte %d not in the file after Sync", r, i)
						}
					}
				}
				return nil
			})
			if want := "held 1, data file 0 bytes"; len(seen) != 2 || seen[0] != want || seen[1] != want {
				t.Fatalf("at the end of the calls: %q, want %q on both ranks", seen, want)
			}
		})
	}
}

const snapKillEnv = "GOMPI_MPIIO_SNAPKILL_CHILD" // "<file>|<cache dir>"

// TestSnapKillChild is the process TestCacheSnapshotKill kills: it writes
// 32 MiB through a snapshot cache and kills itself (SIGKILL) the moment
// the write returns, with the snapshot writer still at work.
func TestSnapKillChild(t *testing.T) {
	spec := os.Getenv(snapKillEnv)
	if spec == "" {
		t.Skip("helper process of TestCacheSnapshotKill")
	}
	var path, cdir string
	fmt.Sscanf(spec, "%s %s", &path, &cdir)
	runRanks(t, 1, func(c *mpi.Comm) error {
		f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeCreate|mpiio.ModeWronly, snapHints(cdir))
		if err != nil {
			return err
		}
		buf := snapPattern(1, 0, 32<<20)
		if _, err := f.WriteAtAll(buf, 0); err != nil {
			return err
		}
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	})
}

// kill -9 of the rank right after a cached write returned (its snapshot
// writer still running): the write is in the file after recovery, by the
// next Open (which waits for the writer, the journal's lock holder) or by
// journal.Replay once the writer let the lock go.
func TestCacheSnapshotKill(t *testing.T) {
	for _, byOpen := range []bool{true, false} {
		t.Run(map[bool]string{true: "Open", false: "Replay"}[byOpen], func(t *testing.T) {
			dir := t.TempDir()
			path, cdir := filepath.Join(dir, "f"), filepath.Join(dir, "cache")
			cmd := exec.Command(os.Args[0], "-test.run=^TestSnapKillChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), snapKillEnv+"="+path+" "+cdir)
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			out, err := cmd.CombinedOutput()
			if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("helper did not die by SIGKILL: %v\n%s", err, out)
			}
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // its group, as a launcher ends a job
			js, _ := filepath.Glob(filepath.Join(cdir, "*"+journal.JournalSuffix))
			if len(js) != 1 {
				t.Fatalf("journals %v", js)
			}
			if j, err := os.Open(js[0]); err == nil {
				if err := journal.Lock(j); errors.Is(err, journal.ErrInUse) {
					t.Log("the snapshot writer outlived the rank")
				}
				j.Close()
			}
			if byOpen {
				runRanks(t, 1, func(c *mpi.Comm) error {
					f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeWronly, mpiio.Hints{"gompi_cache_dir": cdir})
					if err != nil {
						return err
					}
					return f.Close()
				})
			} else {
				for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
					_, n, err := journal.Replay(js[0])
					if err == nil && n == 1 {
						break
					}
					if !errors.Is(err, journal.ErrInUse) || time.Now().After(deadline) {
						t.Fatalf("replay: %d extents, %v", n, err)
					}
				}
			}
			b, _ := os.ReadFile(path)
			if !bytes.Equal(b, snapPattern(1, 0, 32<<20)) {
				t.Fatalf("the acknowledged write is not in the file after recovery (%d bytes)", len(b))
			}
		})
	}
}

// Open waits for a journal's lock another process holds (a killed rank's
// snapshot writer), as long as its context allows: it opens once the lock
// is released, and fails with journal.ErrInUse and the context's error
// when the context ends first. It waits past a short grace only while a
// snapshot record is uncommitted; a live cache's lock is ErrInUse soon.
func TestOpenWaitsForJournalLock(t *testing.T) {
	dir := t.TempDir()
	path, cdir := filepath.Join(dir, "f"), filepath.Join(dir, "cache")
	os.Mkdir(cdir, 0o700)
	abs, _ := filepath.Abs(path)
	h := sha256.Sum256([]byte(abs))
	jp := filepath.Join(cdir, hex.EncodeToString(h[:12])+"-r0"+journal.JournalSuffix)
	hold := func() *os.File {
		j, err := os.OpenFile(jp, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if err := journal.Lock(j); err != nil {
			t.Fatal(err)
		}
		return j
	}
	j := hold()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	runRanks(t, 1, func(c *mpi.Comm) error {
		f, err := mpiio.Open(ctx, c, path, mpiio.ModeCreate|mpiio.ModeWronly, mpiio.Hints{"gompi_cache_dir": cdir})
		if err == nil {
			f.Close()
			return fmt.Errorf("Open of a file whose journal is locked succeeded")
		}
		if !errors.Is(err, journal.ErrInUse) || !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("Open: %v, want journal.ErrInUse and the context's deadline", err)
		}
		return nil
	})
	j.Close()

	j = hold()
	go func() {
		time.Sleep(200 * time.Millisecond)
		j.Close() // the writer is done
	}()
	open := func(ctx context.Context, what string) {
		t.Helper()
		runRanks(t, 1, func(c *mpi.Comm) error {
			f, err := mpiio.Open(ctx, c, path, mpiio.ModeCreate|mpiio.ModeWronly, mpiio.Hints{"gompi_cache_dir": cdir})
			if err != nil {
				return fmt.Errorf("Open after the lock was released (%s): %v", what, err)
			}
			return f.Close()
		})
	}
	open(context.Background(), "at once")

	// A writer still owes a commit (an uncommitted snapshot record): Open
	// waits past the short grace a live cache gets.
	w := hold()
	rec := journal.ExtentRecord(journal.Extent{Seq: 1, Len: 8, Snapshot: true})
	if _, err := w.Write(append(journal.Header(abs), rec...)); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(3 * time.Second)
		w.Close()
	}()
	open(context.Background(), "after 3 s with a snapshot record uncommitted")

	// Nothing uncommitted: the holder is a live cache, and Open says so
	// after the grace, on its own, long before this context's end.
	live := hold()
	defer live.Close()
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	runRanks(t, 1, func(c *mpi.Comm) error {
		f, err := mpiio.Open(ctx, c, path, mpiio.ModeCreate|mpiio.ModeWronly, mpiio.Hints{"gompi_cache_dir": cdir})
		if err == nil {
			f.Close()
			return fmt.Errorf("Open of a file a live cache holds succeeded")
		}
		if !errors.Is(err, journal.ErrInUse) || ctx.Err() != nil {
			return fmt.Errorf("Open: %v (context: %v), want journal.ErrInUse before the context ended", err, ctx.Err())
		}
		return nil
	})
}

// A snapshot writer that fails (here: the file size limit, as a full
// cache directory would) loses the write it was given: the next Sync
// says so, naming the extent, and its uncommitted record is skipped by
// replay.
func TestCacheSnapshotWriterFails(t *testing.T) {
	dir := t.TempDir()
	path, cdir := filepath.Join(dir, "f"), filepath.Join(dir, "cache")
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal(err)
	}
	runRanks(t, 1, func(c *mpi.Comm) error {
		f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeCreate|mpiio.ModeWronly, snapHints(cdir))
		if err != nil {
			return err
		}
		// The writer inherits the limit (and blocks SIGXFSZ): its pwrite
		// past 1 MiB fails with EFBIG.
		lim := syscall.Rlimit{Cur: 1 << 20, Max: old.Max}
		if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
			return err
		}
		_, werr := f.WriteAt(snapPattern(1, 0, 4<<20), 0)
		syscall.Setrlimit(syscall.RLIMIT_FSIZE, &old)
		if werr != nil {
			return fmt.Errorf("write: %v (want it acknowledged, the failure later)", werr)
		}
		if mpiio.CacheSnapshots(f) != 1 {
			return fmt.Errorf("the write did not take the snapshot path")
		}
		serr := f.Sync()
		if serr == nil || !strings.Contains(serr.Error(), "lost: its snapshot writer failed") || !errors.Is(serr, syscall.EFBIG) {
			return fmt.Errorf("Sync after a failed writer: %v, want the lost write named with EFBIG", serr)
		}
		if err := f.Close(); err == nil {
			return fmt.Errorf("Close after a failed writer succeeded")
		}
		return nil
	})
	targets, err := journal.ReplayDir(cdir)
	if err != nil || len(targets) != 0 {
		t.Fatalf("replay of an uncommitted snapshot extent: %v %v, want nothing written", targets, err)
	}
	if b, _ := os.ReadFile(path); len(b) != 0 {
		t.Fatalf("file has %d bytes of a write whose writer failed", len(b))
	}
}
