package mpiio_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	mpi "github.com/gompi/gompi/runtime"
	"github.com/gompi/gompi/runtime/mpiio"
)

// BenchmarkIORHard: every rank writes 47008-byte records interleaved with
// the other ranks' (IOR's "hard" pattern), collectively, with in-process
// ranks; perRecords records per WriteAtAll call. GOMPI_BENCH_DIR picks
// the file system (default: the test's temporary directory).
func BenchmarkIORHard(b *testing.B) {
	const rec = 47008
	total := int64(100 << 20)
	for _, p := range []int{2, 4} {
		for _, per := range []int{0, 64} {
			for _, cb := range []string{"enable", "disable"} {
				b.Run(fmt.Sprintf("ranks=%d/per=%d/cb=%s", p, per, cb), func(b *testing.B) {
					dir := os.Getenv("GOMPI_BENCH_DIR")
					if dir == "" {
						dir = b.TempDir()
					}
					nrec := int(total / rec / int64(p))
					b.SetBytes(int64(nrec * rec * p))
					for i := 0; i < b.N; i++ {
						path := filepath.Join(dir, "ior-hard-"+strconv.Itoa(i))
						runRanks(b, p, func(c *mpi.Comm) error {
							f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeCreate|mpiio.ModeWronly|mpiio.ModeDeleteOnClose,
								mpiio.Hints{"romio_cb_write": cb, "cb_nodes": os.Getenv("CBN")})
							if err != nil {
								return err
							}
							ct, _ := mpi.Contiguous(rec, mpi.Byte)
							ft, _ := mpi.Resized(ct, 0, int64(rec*p))
							if err := f.SetView(int64(rec*c.Rank()), mpi.Byte, ft); err != nil {
								return err
							}
							buf := make([]byte, nrec*rec)
							step := nrec
							if per > 0 {
								step = per
							}
							for k := 0; k < nrec; k += step {
								m := min(step, nrec-k)
								if _, err := f.WriteAtAll(buf[k*rec:(k+m)*rec], int64(k*rec)); err != nil {
									return err
								}
							}
							return f.Close()
						})
					}
				})
			}
		}
	}
}

// BenchmarkCachedWrite: the time a collective write blocks, direct
// (fsync'd) and through a node-local cache in /dev/shm (flushed after the
// timer, at Close).
func BenchmarkCachedWrite(b *testing.B) {
	const per = 32 << 20
	for _, mode := range []string{"direct", "cached"} {
		b.Run(mode, func(b *testing.B) {
			dir := os.Getenv("GOMPI_BENCH_DIR")
			if dir == "" {
				dir = b.TempDir()
			}
			cache, err := os.MkdirTemp("/dev/shm", "gompi-mpiio-bench-")
			if err != nil {
				b.Skip("no /dev/shm")
			}
			defer os.RemoveAll(cache)
			b.SetBytes(2 * per)
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				path := filepath.Join(dir, "cached-"+strconv.Itoa(i))
				h := mpiio.Hints{"cb_nodes": "2"}
				if mode == "cached" {
					h["gompi_cache_dir"] = cache
				}
				runRanks(b, 2, func(c *mpi.Comm) error {
					f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeCreate|mpiio.ModeWronly|mpiio.ModeDeleteOnClose, h)
					if err != nil {
						return err
					}
					buf := make([]byte, per)
					c.Barrier()
					if c.Rank() == 0 {
						b.StartTimer()
					}
					if _, err := f.WriteAtAll(buf, int64(c.Rank()*per)); err != nil {
						return err
					}
					if c.Rank() == 0 {
						b.StopTimer()
					}
					return f.Close()
				})
			}
		})
	}
}

// BenchmarkWriteShared: 4 in-process ranks call WriteShared (64-byte
// records) b.N times each, all at once; calls/s counts every rank's calls.
// "claim" is the shared pointer's round trip alone (PositionShared).
func BenchmarkWriteShared(b *testing.B) {
	const p = 4
	for _, what := range []string{"write", "claim"} {
		b.Run(what, func(b *testing.B) {
			dir := os.Getenv("GOMPI_BENCH_DIR")
			if dir == "" {
				dir = b.TempDir()
			}
			path := filepath.Join(dir, "write-shared")
			var start, end time.Time
			runRanks(b, p, func(c *mpi.Comm) error {
				f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeCreate|mpiio.ModeWronly|mpiio.ModeDeleteOnClose, nil)
				if err != nil {
					return err
				}
				if err := c.Barrier(); err != nil {
					return err
				}
				if c.Rank() == 0 {
					b.ResetTimer()
					start = time.Now()
				}
				rec := make([]byte, 64)
				for i := 0; i < b.N; i++ {
					if what == "write" {
						_, err = f.WriteShared(rec)
					} else {
						_, err = f.PositionShared()
					}
					if err != nil {
						return err
					}
				}
				if err := c.Barrier(); err != nil {
					return err
				}
				if c.Rank() == 0 {
					end = time.Now()
					b.StopTimer()
				}
				return f.Close()
			})
			b.ReportMetric(float64(p*b.N)/end.Sub(start).Seconds(), "calls/s")
		})
	}
}
