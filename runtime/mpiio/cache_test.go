package mpiio_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	mpi "github.com/gompi/gompi/runtime"
	"github.com/gompi/gompi/runtime/mpiio"
	"github.com/gompi/gompi/runtime/mpiio/journal"
)

const (
	crashEnv = "GOMPI_MPIIO_CRASH_CHILD" // "<file>|<cache dir>"
	recLen   = 4096
	records  = 64
)

func record(i int) []byte { return bytes.Repeat([]byte{byte(i + 1)}, recLen) }

// TestCrashChild is the process killed by TestCacheCrash: two ranks write
// records collectively through a slow-flushing cache and print each
// acknowledgement.
func TestCrashChild(t *testing.T) {
	spec := os.Getenv(crashEnv)
	if spec == "" {
		t.Skip("helper process of TestCacheCrash")
	}
	path, dir, _ := strings.Cut(spec, "|")
	out := bufio.NewWriter(os.Stdout)
	runRanks(t, 2, func(c *mpi.Comm) error {
		f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeCreate|mpiio.ModeWronly,
			mpiio.Hints{"gompi_cache_dir": dir, "gompi_cache_flush_delay": "3ms", "cb_nodes": "2", "striping_unit": "4096"})
		if err != nil {
			return err
		}
		for i := 0; i < records; i++ {
			// Each rank writes half of record i.
			h := recLen / 2
			if _, err := f.WriteAtAll(record(i)[:h], int64(i*recLen+c.Rank()*h)); err != nil {
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
// journal.ReplayDir as a launcher would).
func TestCacheCrash(t *testing.T) {
	points := []int{1, 2, 5, 9, 17, 33, 63}
	if testing.Short() {
		points = []int{2, 17}
	}
	for pi, k := range points {
		t.Run(strconv.Itoa(k), func(t *testing.T) {
			dir := t.TempDir()
			path, cdir := filepath.Join(dir, "shared"), filepath.Join(dir, "cache")
			cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), crashEnv+"="+path+"|"+cdir)
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
			if pi%2 == 0 {
				if _, err := journal.ReplayDir(cdir); err != nil {
					t.Fatal(err)
				}
			} else {
				runRanks(t, 2, func(c *mpi.Comm) error {
					f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeWronly, mpiio.Hints{"gompi_cache_dir": cdir})
					if err != nil {
						return err
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
		// The aggregator's own reads see its cache at once; other ranks'
		// after Sync (MPI's sync-barrier-sync rule).
		if c.Rank() == 0 {
			if sz, err := f.Size(); err != nil || sz != 30000 {
				return fmt.Errorf("size %d, %v", sz, err)
			}
			got := make([]byte, 30000)
			if _, err := f.ReadAt(got, 0); err != nil || got[0] != 1 || got[29999] != 3 {
				return fmt.Errorf("aggregator read before sync: %d %d %v", got[0], got[29999], err)
			}
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
