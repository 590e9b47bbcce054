package mpiio_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	mpi "github.com/gompi/gompi/runtime"
	"github.com/gompi/gompi/runtime/mpiio"
	"github.com/gompi/gompi/runtime/mpiio/journal"
)

const (
	crashEnv = "GOMPI_MPIIO_CRASH_CHILD" // "<file>|<cache dir>[|snapshot]"
	recLen   = 4096
	records  = 64
)

func record(i int) []byte { return bytes.Repeat([]byte{byte(i + 1)}, recLen) }

// TestCrashChild is the process killed by TestCacheCrash: two ranks write
// records collectively through a slow-flushing cache and print each
// acknowledgement. Each rank's half of a record is four 512-byte pieces
// interleaved with the other rank's (a vector view), so each call leaves
// one vectored extent per rank in the journals.
func TestCrashChild(t *testing.T) {
	spec := os.Getenv(crashEnv)
	if spec == "" {
		t.Skip("helper process of TestCacheCrash")
	}
	path, dir, _ := strings.Cut(spec, "|")
	dir, snap, _ := strings.Cut(dir, "|")
	hints := mpiio.Hints{"gompi_cache_dir": dir, "gompi_cache_flush_delay": "3ms", "cb_nodes": "2", "striping_unit": "4096"}
	if snap != "" {
		hints["gompi_cache_snapshot"], hints["gompi_cache_snapshot_min"] = "enable", "1"
	}
	out := bufio.NewWriter(os.Stdout)
	runRanks(t, 2, func(c *mpi.Comm) error {
		f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeCreate|mpiio.ModeWronly, hints)
		if err != nil {
			return err
		}
		const blk = 512
		ft, err := mpi.Vector(records*recLen/(2*blk), blk, 2*blk, mpi.Byte)
		if err == nil {
			err = f.SetView(int64(c.Rank()*blk), mpi.Byte, ft)
		}
		if err != nil {
			return err
		}
		for i := 0; i < records; i++ {
			// Each rank writes half of record i.
			h := recLen / 2
			if _, err := f.WriteAtAll(record(i)[:h], int64(i*h)); err != nil {
				return err
			}
			if c.Rank() == 0 {
				fmt.Fprintf(out, "ack %d\n", i)
				out.Flush()
			}
		}
		select {} // wait to be killed
	})
}

// kill -9 at many points between acknowledgement and flush: every
// acknowledged record must be in the file after recovery (by Open, or by
// journal.ReplayDir as a launcher would). The "snap" points write through
// copy-on-write snapshot writers (each write's bytes written by a forked
// process after the call returned), which may outlive the kill.
func TestCacheCrash(t *testing.T) {
	type point struct {
		k    int  // kill after k acknowledged records
		snap bool // through snapshot writers
	}
	points := []point{{1, false}, {2, false}, {5, false}, {9, false}, {17, false}, {33, false}, {63, false}, {3, true}, {24, true}, {61, true}}
	if testing.Short() {
		points = []point{{2, false}, {17, false}, {24, true}}
	}
	for pi, pt := range points {
		k, snap := pt.k, pt.snap
		name := strconv.Itoa(k)
		if snap {
			name = "snap" + name
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path, cdir := filepath.Join(dir, "shared"), filepath.Join(dir, "cache")
			// Half of the points with the cache on tmpfs, whose extents
			// carry no data checksum.
			tmpfs := pi%4 >= 2 || testing.Short() && pi == 1
			if tmpfs {
				shm, err := os.MkdirTemp("/dev/shm", "gompi-cache-crash-")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { os.RemoveAll(shm) })
				cdir = filepath.Join(shm, "cache")
			}
			cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
			spec := path + "|" + cdir
			if snap {
				spec += "|snapshot"
			}
			cmd.Env = append(os.Environ(), crashEnv+"="+spec)
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			sc := bufio.NewScanner(stdout)
			acked := -1
			for sc.Scan() {
				if n, ok := strings.CutPrefix(sc.Text(), "ack "); ok {
					acked, _ = strconv.Atoi(n)
					if acked+1 >= k {
						break
					}
				}
			}
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Wait()
			if acked+1 < k {
				t.Fatalf("child acknowledged only %d records", acked+1)
			}
			js, _ := filepath.Glob(filepath.Join(cdir, "*"+journal.JournalSuffix))
			if snap {
				// Writers that outlived the kill hold their journal until
				// their commit is in (ReplayDir would skip it).
				for _, j := range js {
					waitUnlocked(t, j)
				}
			}
			for _, j := range js {
				b, _ := os.ReadFile(j)
				_, pend, err := journal.Parse(b)
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range pend {
					if e.NoCRC != tmpfs {
						t.Fatalf("extent %d: NoCRC %v with the cache on tmpfs %v", e.Seq, e.NoCRC, tmpfs)
					}
				}
			}
			switch pi % 3 {
			case 0:
				if _, err := journal.ReplayDir(cdir); err != nil {
					t.Fatal(err)
				}
			case 1:
				// By a job of one rank: rank 1's journal is nobody's in
				// it, and used to stay behind (its acknowledged records
				// missing, to be written over newer bytes by a later
				// replay).
				runRanks(t, 1, func(c *mpi.Comm) error {
					f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeWronly, mpiio.Hints{"gompi_cache_dir": cdir})
					if err != nil {
						return err
					}
					return f.Close()
				})
			case 2:
				// A read-only Open (a job reading the results) replays
				// too, before its reads: it used to skip the cache
				// directory and read the file without the records.
				runRanks(t, 2, func(c *mpi.Comm) error {
					f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeRdonly, mpiio.Hints{"gompi_cache_dir": cdir})
					if err != nil {
						return err
					}
					got := make([]byte, (acked+1)*recLen)
					if _, err := f.ReadAtAll(got, 0); err != nil {
						return err
					}
					for i := 0; i <= acked; i++ {
						if !bytes.Equal(got[i*recLen:(i+1)*recLen], record(i)) {
							return fmt.Errorf("read-only Open after the crash: acknowledged record %d of %d not read back", i, acked+1)
						}
					}
					return f.Close()
				})
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i <= acked; i++ {
				if len(b) < (i+1)*recLen || !bytes.Equal(b[i*recLen:(i+1)*recLen], record(i)) {
					t.Fatalf("acknowledged record %d of %d lost after the crash (file has %d bytes)", i, acked+1, len(b))
				}
			}
			if left, _ := filepath.Glob(filepath.Join(cdir, "*"+journal.JournalSuffix)); len(left) != 0 {
				t.Fatalf("journals left after recovery: %v", left)
			}
		})
	}
}

// Cached writes are read back, Sync and Close flush them, Size sees them.
func TestCacheReadBack(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	runRanks(t, 3, func(c *mpi.Comm) error {
		f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeCreate|mpiio.ModeRdwr,
			mpiio.Hints{"gompi_cache_dir": filepath.Join(dir, "cache"), "gompi_cache_flush_delay": "1ms"})
		if err != nil {
			return err
		}
		buf := bytes.Repeat([]byte{byte(c.Rank() + 1)}, 10000)
		if _, err := f.WriteAtAll(buf, int64(c.Rank()*10000)); err != nil {
			return err
		}
		// A rank's own reads see its cached writes at once (each rank
		// caches its own pieces); other ranks' after Sync (MPI's
		// sync-barrier-sync rule).
		end := int64(c.Rank()+1) * 10000
		if sz, err := f.Size(); err != nil || sz < end {
			return fmt.Errorf("size %d before sync, want at least %d, %v", sz, end, err)
		}
		own := make([]byte, 10000)
		if _, err := f.ReadAt(own, end-10000); err != nil || !bytes.Equal(own, buf) {
			return fmt.Errorf("own bytes before sync: %d..%d %v", own[0], own[9999], err)
		}
		if err := f.Sync(); err != nil {
			return err
		}
		got := make([]byte, 10000)
		if _, err := f.ReadAt(got, int64(((c.Rank()+1)%3)*10000)); err != nil {
			return err
		}
		if got[0] != byte((c.Rank()+1)%3+1) || got[9999] != got[0] {
			return fmt.Errorf("read %d, want %d", got[0], (c.Rank()+1)%3+1)
		}
		return f.Close()
	})
	b, _ := os.ReadFile(path)
	if len(b) != 30000 || b[0] != 1 || b[29999] != 3 {
		t.Fatalf("file after close: %d bytes", len(b))
	}
}

// With a cache on every rank, each rank caches its own pieces of its
// host's domains, and only pieces of other hosts' domains travel (their
// aggregator writes them to the file): no file-system block has cached
// bytes from two hosts (ranks 0,1 play host a, ranks 2,3 host b), and the
// file is right after Close.
func TestCacheLocalPiecesTwoHosts(t *testing.T) {
	restore := mpiio.SetTestHosts(func(rank int) string { return []string{"a", "a", "b", "b"}[rank] })
	defer restore()
	dir := t.TempDir()
	path, cdir := filepath.Join(dir, "f"), filepath.Join(dir, "cache")
	const rec, n, bs = 3000, 40, 4096 // records straddle blocks
	runRanks(t, 4, func(c *mpi.Comm) error {
		f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeCreate|mpiio.ModeWronly,
			mpiio.Hints{"gompi_cache_dir": cdir, "gompi_cache_flush_delay": "1h", "striping_unit": strconv.Itoa(bs)})
		if err != nil {
			return err
		}
		ct, _ := mpi.Contiguous(rec, mpi.Byte)
		ft, _ := mpi.Resized(ct, 0, rec*4)
		if err := f.SetView(int64(rec*c.Rank()), mpi.Byte, ft); err != nil {
			return err
		}
		buf := make([]byte, rec*n)
		for i := range buf {
			buf[i] = byte(c.Rank()*50 + i/rec)
		}
		if _, err := f.WriteAtAll(buf, 0); err != nil {
			return err
		}
		if err := c.Barrier(); err != nil {
			return err
		}
		if c.Rank() == 0 {
			// Nothing is flushed yet (the flusher waits an hour): read
			// every rank's journal.
			host := map[int64]string{} // block -> host with cached bytes there
			js, _ := filepath.Glob(filepath.Join(cdir, "*"+journal.JournalSuffix))
			if len(js) != 4 {
				return fmt.Errorf("%d journals, want 4", len(js))
			}
			for _, j := range js {
				b, err := os.ReadFile(j)
				if err != nil {
					return err
				}
				_, pend, err := journal.Parse(b)
				if err != nil {
					return err
				}
				r, _ := strconv.Atoi(j[strings.LastIndex(j, "-r")+2 : len(j)-len(journal.JournalSuffix)])
				h := []string{"a", "a", "b", "b"}[r]
				if len(pend) == 0 {
					return fmt.Errorf("rank %d cached nothing of its own", r)
				}
				for _, e := range pend {
					e.Each(func(off, _, l int64) error {
						for b := off / bs; b <= (off+l-1)/bs; b++ {
							if o, ok := host[b]; ok && o != h {
								err = fmt.Errorf("block %d has cached bytes from hosts %s and %s", b, o, h)
							}
							host[b] = h
						}
						return nil
					})
					if err != nil {
						return err
					}
				}
			}
			// Pieces that travelled to another host's aggregator are
			// written to the file by it (cached there, they were invisible
			// to their writer's reads): every other block is in the file
			// already.
			file, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			through := 0
			for b := int64(0); b < (4*rec*n+bs-1)/bs; b++ {
				if _, ok := host[b]; ok {
					continue
				}
				through++
				for o := b * bs; o < min((b+1)*bs, 4*rec*n); o++ {
					if want := byte(o/rec%4*50 + o/(4*rec)); o >= int64(len(file)) || file[o] != want {
						return fmt.Errorf("block %d is neither cached nor in the file (byte %d)", b, o)
					}
				}
			}
			if through == 0 {
				return fmt.Errorf("no block written through: no piece travelled?")
			}
		}
		if err := c.Barrier(); err != nil { // no Close (which flushes) before the check
			return err
		}
		return f.Close() // the drain cuts the flusher's delay short
	})
	b, _ := os.ReadFile(path)
	if len(b) != 4*rec*n {
		t.Fatalf("file has %d bytes, want %d", len(b), 4*rec*n)
	}
	for k := 0; k < n*4; k++ {
		r, i := k%4, k/4
		if b[k*rec] != byte(r*50+i) || b[k*rec+rec-1] != byte(r*50+i) {
			t.Fatalf("record %d of rank %d: %d", i, r, b[k*rec])
		}
	}
}

// After a Sync, the next writes reuse the data file's space (no growth,
// its pages already allocated) and read back right, before and after
// another Sync.
func TestCacheReusesDataAfterSync(t *testing.T) {
	dir := t.TempDir()
	path, cdir := filepath.Join(dir, "f"), filepath.Join(dir, "cache")
	runRanks(t, 2, func(c *mpi.Comm) error {
		f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeCreate|mpiio.ModeRdwr, mpiio.Hints{"gompi_cache_dir": cdir})
		if err != nil {
			return err
		}
		for gen := 1; gen <= 3; gen++ {
			buf := bytes.Repeat([]byte{byte(gen*10 + c.Rank())}, 5000)
			if _, err := f.WriteAt(buf, int64(c.Rank()*5000)); err != nil {
				return err
			}
			got := make([]byte, 5000)
			if _, err := f.ReadAt(got, int64(c.Rank()*5000)); err != nil || !bytes.Equal(got, buf) {
				return fmt.Errorf("generation %d: read %d, %v", gen, got[0], err)
			}
			if err := f.Sync(); err != nil {
				return err
			}
			ds, _ := filepath.Glob(filepath.Join(cdir, "*-r"+strconv.Itoa(c.Rank())+journal.DataSuffix))
			if len(ds) != 1 {
				return fmt.Errorf("data files %v", ds)
			}
			st, err := os.Stat(ds[0])
			if err != nil {
				return err
			}
			if st.Size() != 5000 { // kept by the Sync, overwritten (not appended to) after it
				return fmt.Errorf("generation %d: data file of %d bytes after Sync, want 5000", gen, st.Size())
			}
		}
		return f.Close()
	})
	b, _ := os.ReadFile(path)
	if len(b) != 10000 || b[0] != 30 || b[9999] != 31 {
		t.Fatalf("file after close: %d bytes, %d %d", len(b), b[0], b[len(b)-1])
	}
}

// waitUnlocked waits until no process holds journal j's lock.
func waitUnlocked(t *testing.T, j string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		f, err := os.Open(j)
		if err != nil {
			t.Fatal(err)
		}
		err = journal.Lock(f)
		f.Close()
		if err == nil {
			return
		}
		if !errors.Is(err, journal.ErrInUse) || time.Now().After(deadline) {
			t.Fatalf("journal %s: %v", j, err)
		}
	}
}

// TestSetSizeAfterCachedWrites: SetSize cuts the file only after every
// rank's cached writes reached it. Rank 1's cached write (its flush held
// back) is drained by its SetSize; rank 0 (no cache) used to truncate at
// once, so when rank 1 entered SetSize after that (here: once rank 0 is in
// SetSize's agreement), its flush extended the file again past the size
// every rank had asked for, with bytes written before the SetSize.
func TestSetSizeAfterCachedWrites(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	rank0Agreeing := make(chan struct{})
	var once sync.Once
	defer mpiio.SetTestAgree(func(op string, rank int) {
		if op == "set size" && rank == 0 {
			once.Do(func() { close(rank0Agreeing) })
		}
	})()
	runRanks(t, 2, func(c *mpi.Comm) error {
		hints := mpiio.Hints{}
		if c.Rank() == 1 {
			hints = mpiio.Hints{"gompi_cache_dir": filepath.Join(dir, "cache"), "gompi_cache_flush_delay": "1h"}
		}
		f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeCreate|mpiio.ModeRdwr, hints)
		if err != nil {
			return err
		}
		if c.Rank() == 1 {
			if _, err := f.WriteAt(bytes.Repeat([]byte{7}, 100), 500); err != nil {
				return err
			}
		}
		if err := c.Barrier(); err != nil {
			return err
		}
		if c.Rank() == 1 {
			<-rank0Agreeing
		}
		if err := f.SetSize(10); err != nil {
			return err
		}
		if sz, err := f.Size(); err != nil || sz != 10 {
			return fmt.Errorf("Size after SetSize(10) = %d, %v", sz, err)
		}
		return f.Close()
	})
	if st, err := os.Stat(path); err != nil || st.Size() != 10 {
		t.Fatalf("file after SetSize(10): %v, %v; want 10 bytes", st.Size(), err)
	}
}

// TestSetSizeDiffers: ranks passing different sizes all get an error
// (rank 0's size used to win silently).
func TestSetSizeDiffers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	runRanks(t, 3, func(c *mpi.Comm) error {
		f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeCreate|mpiio.ModeRdwr, nil)
		if err != nil {
			return err
		}
		err = f.SetSize(int64(100 * (c.Rank() + 1)))
		if !errors.Is(err, mpi.ErrArg) || !strings.Contains(err.Error(), "different sizes") {
			return fmt.Errorf("SetSize with sizes differing across ranks: %v, want mpi.ErrArg naming different sizes", err)
		}
		return f.Close()
	})
}

// TestCacheAtomicMode: in atomic mode, a write that follows another rank's
// overlapping write (ordered by a message) wins, and is what every rank
// reads, with a cache too. Cached, both writes waited for their own
// rank's flusher (held back here): rank 0's read flushed its own older
// write and read it, not rank 1's newer one, and the flushers' order, not
// the writes', decided the file.
func TestCacheAtomicMode(t *testing.T) {
	for _, mode := range []string{"independent", "collective", "two-phase"} {
		t.Run(mode, func(t *testing.T) {
			coll := mode != "independent"
			hints := mpiio.Hints{"gompi_cache_dir": filepath.Join(t.TempDir(), "cache"), "gompi_cache_flush_delay": "1h"}
			if mode == "two-phase" {
				// Two hosts, a domain each: each host's aggregator
				// caches its domain's pieces of both writes.
				hints["romio_cb_write"], hints["striping_unit"] = "enable", "4096"
				defer mpiio.SetTestHosts(func(r int) string { return fmt.Sprint("host", r) })()
			}
			dir := t.TempDir()
			path := filepath.Join(dir, "f")
			older, newer := bytes.Repeat([]byte{'A'}, 8192), bytes.Repeat([]byte{'B'}, 8192)
			runRanks(t, 2, func(c *mpi.Comm) error {
				f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeCreate|mpiio.ModeRdwr, hints)
				if err != nil {
					return err
				}
				if err := f.SetAtomicity(true); err != nil {
					return err
				}
				for w, data := range [][]byte{older, newer} {
					mine := data
					if c.Rank() != w {
						mine = nil
					}
					if coll {
						_, err = f.WriteAtAll(mine, 0)
					} else if mine != nil {
						_, err = f.WriteAt(mine, 0)
					}
					if err != nil {
						return err
					}
					if err := c.Barrier(); err != nil { // orders the writes
						return err
					}
				}
				// One rank reads at a time: a read drains its own rank's
				// cache, which must not be what decides what it reads.
				for r := 0; r < 2; r++ {
					if r == c.Rank() {
						got := make([]byte, len(newer))
						if _, err := f.ReadAt(got, 0); err != nil {
							return err
						}
						if !bytes.Equal(got, newer) {
							return fmt.Errorf("read %q...%q after rank 1's write, want its %q", got[:4], got[len(got)-4:], newer[:4])
						}
					}
					if err := c.Barrier(); err != nil {
						return err
					}
				}
				return f.Close()
			})
			if b, err := os.ReadFile(path); err != nil || !bytes.Equal(b, newer) {
				t.Fatalf("file of %d bytes, %v; want rank 1's later write", len(b), err)
			}
		})
	}
}

// TestCacheSyncFailureKeepsJournal: when the fsync of the shared file
// fails (NFS reports a lost write-back, ENOSPC or EDQUOT, at fsync), the
// cached writes are not known to be on the file, so the journal must keep
// them for replay. Close removed the journal pair all the same (and a
// failed Sync left flushed records that made replay skip them): the
// acknowledged writes were lost, the file kept its old bytes.
func TestCacheSyncFailureKeepsJournal(t *testing.T) {
	for _, viaSync := range []bool{false, true} {
		t.Run(fmt.Sprintf("sync=%v", viaSync), func(t *testing.T) {
			dir := t.TempDir()
			path, cdir := filepath.Join(dir, "f"), filepath.Join(dir, "cache")
			old, neu := bytes.Repeat([]byte{'o'}, 8192), bytes.Repeat([]byte{'n'}, 8192)
			if err := os.WriteFile(path, old, 0o644); err != nil {
				t.Fatal(err)
			}
			lost := errors.New("write-back lost (test)")
			restore := mpiio.SetTestSyncFail(lost)
			defer restore()
			runRanks(t, 1, func(c *mpi.Comm) error {
				f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeRdwr, mpiio.Hints{"gompi_cache_dir": cdir})
				if err != nil {
					return err
				}
				if _, err := f.WriteAt(neu[:4096], 0); err != nil {
					return err
				}
				if _, err := f.WriteAt(neu[4096:], 4096); err != nil {
					return err
				}
				if viaSync {
					if err := f.Sync(); !errors.Is(err, lost) {
						return fmt.Errorf("Sync: %v, want the fsync error", err)
					}
				}
				if err := f.Close(); !errors.Is(err, lost) {
					return fmt.Errorf("Close: %v, want the fsync error", err)
				}
				return nil
			})
			restore()
			// What the failed write-back left on the file system.
			if err := os.WriteFile(path, old, 0o644); err != nil {
				t.Fatal(err)
			}
			runRanks(t, 1, func(c *mpi.Comm) error {
				f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeRdonly, mpiio.Hints{"gompi_cache_dir": cdir})
				if err != nil {
					return err
				}
				got := make([]byte, len(neu))
				if _, err := f.ReadAt(got, 0); err != nil {
					return err
				}
				if !bytes.Equal(got, neu) {
					return fmt.Errorf("read back %q... after replay, want the acknowledged %q...", got[:8], neu[:8])
				}
				return f.Close()
			})
		})
	}
}

// TestCacheJournalOfRemovedFile: a crashed run's journal of a file that
// has been removed since (a user cleaning up before a rerun) is not
// replayed into the file a new Open creates: it was, so the rerun's file
// held the crashed run's bytes wherever the rerun did not write, and was
// as long as the old one. Open is an error naming the journal, which is
// kept; a file that still exists is replayed as before.
func TestCacheJournalOfRemovedFile(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mode   mpiio.Mode
		exists bool
		rank   int // the journal's rank: 1 is an orphan of a 1-rank job
	}{
		{"create", mpiio.ModeCreate | mpiio.ModeRdwr, false, 0},
		{"excl", mpiio.ModeCreate | mpiio.ModeExcl | mpiio.ModeWronly, false, 0},
		{"orphan", mpiio.ModeCreate | mpiio.ModeRdwr, false, 1},
		{"exists", mpiio.ModeCreate | mpiio.ModeRdwr, true, 0},
		{"exists-orphan", mpiio.ModeRdwr, true, 1},
		// ModeExcl without ModeCreate opens an existing file (as ROMIO's
		// open(2) with O_EXCL alone): it created nothing, so the journal
		// is of this file. It was taken for a new file's stale journal.
		{"exists-excl-without-create", mpiio.ModeExcl | mpiio.ModeRdwr, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path, cdir := filepath.Join(dir, "out"), filepath.Join(dir, "cache")
			os.Mkdir(cdir, 0o700)
			if tc.exists {
				os.WriteFile(path, nil, 0o644)
			}
			stale := []byte("stale")
			h := sha256.Sum256([]byte(path))
			jnl := filepath.Join(cdir, hex.EncodeToString(h[:12])+"-r"+strconv.Itoa(tc.rank)+journal.JournalSuffix)
			os.WriteFile(jnl, append(journal.Header(path), journal.ExtentRecord(journal.Extent{Seq: 1, FileOff: 1 << 20, Len: 5, CRC: journal.Checksum(stale)})...), 0o600)
			os.WriteFile(strings.TrimSuffix(jnl, journal.JournalSuffix)+journal.DataSuffix, stale, 0o600)
			var openErr error
			runRanks(t, 1, func(c *mpi.Comm) error {
				f, err := mpiio.Open(context.Background(), c, path, tc.mode, mpiio.Hints{"gompi_cache_dir": cdir})
				openErr = err
				if err != nil {
					return nil
				}
				return f.Close()
			})
			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if tc.exists {
				if openErr != nil || st.Size() != 1<<20+5 {
					t.Fatalf("existing file: Open %v, size %d after replay", openErr, st.Size())
				}
				return
			}
			if openErr == nil || !strings.Contains(openErr.Error(), jnl) {
				t.Fatalf("Open: %v, want an error naming %s", openErr, jnl)
			}
			if st.Size() != 0 {
				t.Fatalf("the new file has %d bytes: the removed file's journal was replayed into it", st.Size())
			}
			if _, err := os.Stat(jnl); err != nil {
				t.Fatalf("journal not kept: %v", err)
			}
		})
	}
}

// TestCacheOnSomeRanksOwnRead: cache hints may differ per rank; a rank's
// collective read still sees its own cached writes (MPI: one process's
// accesses through one file handle are sequentially consistent), also
// where another rank aggregates the read. Collective reads drained the
// caches only when every rank had one: rank 0's write of [0, 8192),
// cached, read back 4096 bytes of EOF from rank 1's domain.
func TestCacheOnSomeRanksOwnRead(t *testing.T) {
	for _, cb := range []string{"enable", "automatic"} {
		t.Run("romio_cb_read="+cb, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "f")
			cdir := t.TempDir()
			runRanks(t, 2, func(c *mpi.Comm) error {
				h := mpiio.Hints{"romio_cb_read": cb, "cb_nodes": "2", "striping_unit": "4096"}
				if c.Rank() == 0 {
					// The flusher waits: only a drain moves the bytes.
					h["gompi_cache_dir"], h["gompi_cache_flush_delay"] = cdir, "5s"
				}
				f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeCreate|mpiio.ModeRdwr, h)
				if err != nil {
					return err
				}
				defer f.Close()
				var b []byte
				if c.Rank() == 0 {
					b = bytes.Repeat([]byte{'x'}, 8192)
					if _, err := f.WriteAt(b, 0); err != nil {
						return err
					}
				}
				got := make([]byte, len(b))
				if n, err := f.ReadAtAll(got, 0); n != len(b) || err != nil || !bytes.Equal(got, b) {
					return fmt.Errorf("collective read of its own cached write: %d bytes, %v, %d of them right",
						n, err, bytes.Count(got, []byte{'x'}))
				}
				return nil
			})
		})
	}
}

// TestCacheCollectiveWriteOwnRead: a rank's independent read after its
// collective write sees what it wrote (MPI: one file handle's accesses are
// sequentially consistent), also where its pieces went to another rank's
// aggregator. Aggregators cached the pieces they received, where only
// their own drain moves them: rank 0's ReadAt of its [0, 8192) found
// 4096 bytes and EOF, with a cache on every rank of two hosts and with
// caches on some ranks.
func TestCacheCollectiveWriteOwnRead(t *testing.T) {
	for _, tc := range []struct {
		name     string
		twoHosts bool
		cached   []bool // per rank
	}{
		{"one host, rank 1 cached", false, []bool{false, true}},
		{"two hosts, all cached", true, []bool{true, true}},
		{"two hosts, rank 1 cached", true, []bool{false, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.twoHosts {
				defer mpiio.SetTestHosts(func(r int) string { return []string{"a", "b"}[r] })()
			}
			path := filepath.Join(t.TempDir(), "f")
			cdir := t.TempDir()
			runRanks(t, 2, func(c *mpi.Comm) error {
				h := mpiio.Hints{"romio_cb_write": "enable", "cb_nodes": "2", "striping_unit": "4096"}
				if tc.cached[c.Rank()] {
					// The flusher waits: only a drain moves the bytes.
					h["gompi_cache_dir"], h["gompi_cache_flush_delay"] = cdir, "1h"
				}
				f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeCreate|mpiio.ModeRdwr, h)
				if err != nil {
					return err
				}
				defer f.Close()
				var b []byte
				if c.Rank() == 0 { // over both aggregators' domains
					b = bytes.Repeat([]byte{'x'}, 8192)
				}
				if _, err := f.WriteAtAll(b, 0); err != nil {
					return err
				}
				got := make([]byte, len(b))
				if n, err := f.ReadAt(got, 0); n != len(b) || err != nil || !bytes.Equal(got, b) {
					return fmt.Errorf("independent read of its own collective write: %d bytes, %v, %d of them right",
						n, err, bytes.Count(got, []byte{'x'}))
				}
				return nil
			})
		})
	}
}

// TestCacheEarlierWriteBeforeTravellingPieces: a rank's cached write, then
// its collective write of the same bytes whose pieces go to another
// host's aggregator: the file ends with the later bytes (one file
// handle's accesses are sequentially consistent). The earlier extent
// waited in the rank's cache and was flushed after (over) the aggregator's
// write of the later one.
func TestCacheEarlierWriteBeforeTravellingPieces(t *testing.T) {
	defer mpiio.SetTestHosts(func(r int) string { return []string{"a", "b"}[r] })()
	path := filepath.Join(t.TempDir(), "f")
	cdir := t.TempDir()
	runRanks(t, 2, func(c *mpi.Comm) error {
		f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeCreate|mpiio.ModeRdwr,
			mpiio.Hints{"romio_cb_write": "enable", "cb_nodes": "2", "striping_unit": "4096",
				"gompi_cache_dir": cdir, "gompi_cache_flush_delay": "1h"})
		if err != nil {
			return err
		}
		var b []byte
		if c.Rank() == 0 {
			// [4096, 8192) is rank 1's (host b's) domain below.
			if _, err := f.WriteAt(bytes.Repeat([]byte{'o'}, 4096), 4096); err != nil {
				return err
			}
			b = bytes.Repeat([]byte{'x'}, 8192)
		}
		if _, err := f.WriteAtAll(b, 0); err != nil {
			return err
		}
		return f.Close()
	})
	got, _ := os.ReadFile(path)
	if len(got) != 8192 || bytes.Count(got, []byte{'x'}) != 8192 {
		t.Fatalf("file of %d bytes, %d of them the later write's (%d the earlier's)", len(got), bytes.Count(got, []byte{'x'}), bytes.Count(got, []byte{'o'}))
	}
}
