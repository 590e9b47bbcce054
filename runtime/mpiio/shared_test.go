package mpiio_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	mpi "github.com/gompi/gompi/runtime"
	"github.com/gompi/gompi/runtime/mpiio"
)

// A shared-pointer record: rank, goroutine, sequence number, then a payload
// derived from them, so that a torn or overlapped record shows.
const recSize = 40

func shRecord(rank, g, seq int) []byte {
	b := make([]byte, recSize)
	binary.LittleEndian.PutUint32(b[0:], uint32(rank))
	binary.LittleEndian.PutUint32(b[4:], uint32(g))
	binary.LittleEndian.PutUint64(b[8:], uint64(seq))
	for i := 16; i < recSize; i++ {
		b[i] = byte(rank*31+g*17+seq*7+i) | 1 // never 0: a hole shows
	}
	return b
}

type recID struct{ rank, g, seq int }

func parseRecord(b []byte) (recID, bool) {
	id := recID{int(binary.LittleEndian.Uint32(b[0:])), int(binary.LittleEndian.Uint32(b[4:])), int(binary.LittleEndian.Uint64(b[8:]))}
	return id, bytes.Equal(b, shRecord(id.rank, id.g, id.seq))
}

// sharedLayouts: where the shared pointer's records go. "strided" leaves
// a record-sized hole after each record (filetype of extent 2 records, etype a record).
var sharedLayouts = []struct {
	name    string
	disp    int64
	strided bool
}{
	{"records", 24, false},
	{"strided", 8, true},
}

func recordView() (etype, ft mpi.Datatype, err error) {
	etype, err = mpi.Contiguous(recSize, mpi.Byte)
	return etype, etype, err
}

func setRecordView(f *mpiio.File, disp int64, strided bool) error {
	et, ft, err := recordView()
	if err != nil {
		return err
	}
	if strided {
		if ft, err = mpi.Resized(et, 0, 2*recSize); err != nil {
			return err
		}
	}
	return f.SetView(disp, et, ft)
}

// TestWriteSharedConcurrent: every rank (and two goroutines per rank)
// writes many records at the shared pointer at once; the file then holds
// each record exactly once, whole, in distinct slots with no gap, each
// writer's records in its program order, and every rank sees the pointer
// at the total.
func TestWriteSharedConcurrent(t *testing.T) {
	const perG, goroutines = 60, 2
	for _, lay := range sharedLayouts {
		for _, p := range []int{1, 2, 3, 4, 8} {
			t.Run(fmt.Sprintf("%s/np=%d", lay.name, p), func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "f")
				runRanks(t, p, func(c *mpi.Comm) error {
					f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeCreate|mpiio.ModeRdwr, nil)
					if err != nil {
						return err
					}
					if err := setRecordView(f, lay.disp, lay.strided); err != nil {
						return err
					}
					var wg sync.WaitGroup
					errs := make([]error, goroutines)
					for g := 0; g < goroutines; g++ {
						wg.Add(1)
						go func(g int) {
							defer wg.Done()
							for s := 0; s < perG; s++ {
								n, err := f.WriteShared(shRecord(c.Rank(), g, s))
								if err != nil || n != recSize {
									errs[g] = fmt.Errorf("write shared %d: %d, %v", s, n, err)
									return
								}
							}
						}(g)
					}
					wg.Wait()
					if err := errors.Join(errs...); err != nil {
						return err
					}
					if err := f.Sync(); err != nil { // durable, and every rank done
						return err
					}
					if pos, err := f.PositionShared(); err != nil || pos != int64(p*goroutines*perG) {
						return fmt.Errorf("position shared %d, %v; want %d", pos, err, p*goroutines*perG)
					}
					return f.Close()
				})
				checkRecords(t, path, lay.disp, lay.strided, p*goroutines*perG, func(id recID) bool {
					return id.rank < p && id.g < goroutines && id.seq < perG
				})
			})
		}
	}
}

// checkRecords reads n record slots and checks each is whole and seen
// once, and that every writer's sequence numbers increase along the file.
func checkRecords(t *testing.T, path string, disp int64, strided bool, n int, valid func(recID) bool) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	stride := int64(recSize)
	if strided {
		stride *= 2
	}
	if want := disp + int64(n-1)*stride + recSize; int64(len(b)) != want {
		t.Fatalf("file is %d bytes, want %d (%d records)", len(b), want, n)
	}
	seen := map[recID]bool{}
	last := map[[2]int]int{}
	for i := 0; i < n; i++ {
		o := disp + int64(i)*stride
		id, ok := parseRecord(b[o : o+recSize])
		if !ok || !valid(id) {
			t.Fatalf("slot %d (offset %d) holds no whole record: % x", i, o, b[o:o+recSize])
		}
		if seen[id] {
			t.Fatalf("record %+v twice (slot %d)", id, i)
		}
		seen[id] = true
		k := [2]int{id.rank, id.g}
		if prev, ok := last[k]; ok && id.seq <= prev {
			t.Fatalf("writer %v: record %d after %d (slot %d)", k, id.seq, prev, i)
		}
		last[k] = id.seq
		if strided && i < n-1 {
			if hole := b[o+recSize : o+2*recSize]; !bytes.Equal(hole, make([]byte, recSize)) {
				t.Fatalf("hole after slot %d written: % x", i, hole)
			}
		}
	}
}

// TestOrderedAndShared: WriteOrdered puts the ranks' data in rank order at
// the shared pointer, after what WriteShared calls wrote before it;
// SeekShared and ReadOrdered read it back; ReadShared at end of file is
// short; SetView resets the shared pointer; explicit-offset and
// individual-pointer calls leave it alone.
func TestOrderedAndShared(t *testing.T) {
	for _, lay := range sharedLayouts {
		for _, p := range []int{1, 2, 3, 4, 8} {
			t.Run(fmt.Sprintf("%s/np=%d", lay.name, p), func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "f")
				// Rank r writes r+1 records in each ordered call.
				per := func(r int) int { return r + 1 }
				total := 0
				for r := 0; r < p; r++ {
					total += per(r)
				}
				runRanks(t, p, func(c *mpi.Comm) error {
					return orderedRank(c, path, lay.disp, lay.strided, per, total)
				})
				// Slots: 1 record by each rank (WriteShared), then two
				// ordered rounds in rank order.
				b, _ := os.ReadFile(path)
				stride := int64(recSize)
				if lay.strided {
					stride *= 2
				}
				slot := p
				for round := 0; round < 2; round++ {
					for r := 0; r < p; r++ {
						for k := 0; k < per(r); k++ {
							o := lay.disp + int64(slot)*stride
							if got, want := b[o:o+recSize], shRecord(r, 9, round*100+k); !bytes.Equal(got, want) {
								t.Fatalf("slot %d: % x, want rank %d's record %d of round %d", slot, got, r, k, round)
							}
							slot++
						}
					}
				}
				checkRecords(t, path, lay.disp, lay.strided, slot, func(id recID) bool { return id.rank < p })
			})
		}
	}
}

func orderedRank(c *mpi.Comm, path string, disp int64, strided bool, per func(int) int, total int) error {
	r, p := c.Rank(), c.Size()
	f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeCreate|mpiio.ModeRdwr, mpiio.Hints{"cb_buffer_size": "4096", "striping_unit": "4096"})
	if err != nil {
		return err
	}
	defer f.Close()
	if err := setRecordView(f, disp, strided); err != nil {
		return err
	}
	want := func(pos int64) error {
		got, err := f.PositionShared()
		if err != nil || got != pos {
			return fmt.Errorf("shared position %d, %v; want %d", got, err, pos)
		}
		return nil
	}
	if _, err := f.WriteShared(shRecord(r, 0, 0)); err != nil {
		return err
	}
	// Individual-pointer and explicit-offset calls do not move it.
	if _, err := f.Seek(5, mpiio.SeekSet); err != nil {
		return err
	}
	if _, err := f.ReadAt(make([]byte, recSize), 0); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	if err := f.Sync(); err != nil { // every rank's claim done
		return err
	}
	if err := want(int64(p)); err != nil {
		return err
	}
	var rounds [2][]byte
	for round := 0; round < 2; round++ {
		for k := 0; k < per(r); k++ {
			rounds[round] = append(rounds[round], shRecord(r, 9, round*100+k)...)
		}
		if n, err := f.WriteOrdered(rounds[round]); err != nil || n != len(rounds[round]) {
			return fmt.Errorf("write ordered: %d, %v", n, err)
		}
		if err := want(int64(p + (round+1)*total)); err != nil {
			return fmt.Errorf("after ordered round %d: %w", round, err)
		}
	}
	// Back to the first ordered round, and read both.
	if pos, err := f.SeekShared(int64(p), mpiio.SeekSet); err != nil || pos != int64(p) {
		return fmt.Errorf("seek shared: %d, %v", pos, err)
	}
	for round := 0; round < 2; round++ {
		got := make([]byte, len(rounds[round]))
		if _, err := f.ReadOrdered(got); err != nil {
			return err
		}
		if !bytes.Equal(got, rounds[round]) {
			return fmt.Errorf("read ordered round %d differs", round)
		}
	}
	end := int64(p + 2*total)
	if pos, err := f.SeekShared(0, mpiio.SeekEnd); err != nil || pos != end {
		return fmt.Errorf("seek shared end: %d, %v; want %d", pos, err, end)
	}
	// Back two records from the end; rank 0 alone reads 3 at the shared
	// pointer: 2 there, EOF, and the pointer past the whole claim.
	if _, err := f.SeekShared(-2, mpiio.SeekCur); err != nil {
		return err
	}
	if r == 0 {
		n, err := f.ReadShared(make([]byte, 3*recSize))
		if n != 2*recSize || !errors.Is(err, io.EOF) {
			return fmt.Errorf("short read shared: %d, %v", n, err)
		}
		if err := want(end + 1); err != nil {
			return err
		}
	}
	// A negative target fails on every rank and moves nothing.
	if _, err := f.SeekShared(-1, mpiio.SeekSet); !errors.Is(err, mpi.ErrArg) {
		return fmt.Errorf("seek shared to -1: %v", err)
	}
	// Rank 0 finds this one; the others learn it.
	if _, err := f.SeekShared(-end-2, mpiio.SeekCur); !errors.Is(err, mpi.ErrArg) && (r == 0 || !errors.Is(err, mpiio.ErrRemote)) {
		return fmt.Errorf("seek shared to -1 from the pointer: %v", err)
	}
	// Different arguments are an error on every rank.
	if p > 1 {
		if _, err := f.SeekShared(int64(r), mpiio.SeekSet); !errors.Is(err, mpi.ErrArg) {
			return fmt.Errorf("seek shared with different offsets: %v", err)
		}
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := want(end + 1); err != nil {
		return err
	}
	if err := setRecordView(f, disp, strided); err != nil {
		return err
	}
	if err := want(0); err != nil {
		return fmt.Errorf("after SetView: %w", err)
	}
	return f.Close()
}

// TestSharedAfterSetView: ranks claim at the shared pointer right after
// SetView, racing rank 0's reset of it (rank 0 is slow to leave SetView):
// the claims count from 0 in the new view, none is lost or doubled.
func TestSharedAfterSetView(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	const p = 4
	// Rank 0 resets the pointer 100 ms after the others left SetView.
	defer mpiio.SetTestBeforeReset(func(rank int) {
		if rank == 0 {
			time.Sleep(100 * time.Millisecond)
		}
	})()
	runRanks(t, p, func(c *mpi.Comm) error {
		f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeCreate|mpiio.ModeRdwr, nil)
		if err != nil {
			return err
		}
		if _, err := f.WriteShared(make([]byte, 100)); err != nil {
			return err
		}
		if err := setRecordView(f, 100*p, false); err != nil {
			return err
		}
		if _, err := f.WriteShared(shRecord(c.Rank(), 0, 0)); err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
		if pos, err := f.PositionShared(); err != nil || pos != p {
			return fmt.Errorf("position %d, %v; want %d", pos, err, p)
		}
		return f.Close()
	})
	checkRecords(t, path, 100*p, false, p, func(id recID) bool { return id.rank < p && id.g == 0 && id.seq == 0 })
}

// TestSharedDifferentViews: with different views on the ranks, shared
// pointer calls fail with ErrView (MPI requires the same view), the
// ordered ones on every rank.
func TestSharedDifferentViews(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	runRanks(t, 2, func(c *mpi.Comm) error {
		f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeCreate|mpiio.ModeRdwr, nil)
		if err != nil {
			return err
		}
		if err := f.SetView(int64(c.Rank()*8), mpi.Byte, mpi.Byte); err != nil {
			return err
		}
		if _, err := f.WriteShared([]byte("x")); !errors.Is(err, mpiio.ErrView) {
			return fmt.Errorf("write shared: %v, want ErrView", err)
		}
		if _, err := f.WriteOrdered([]byte("x")); !errors.Is(err, mpiio.ErrView) {
			return fmt.Errorf("write ordered: %v, want ErrView", err)
		}
		return f.Close()
	})
}

// TestSharedCloseAtDifferentTimes: ranks close while others still claim
// at the shared pointer; Close stops rank 0's service only when every
// rank is in it, and nothing hangs or is left running.
func TestSharedCloseAtDifferentTimes(t *testing.T) {
	for _, late := range []int{0, 1, 3} {
		t.Run(fmt.Sprintf("late=%d", late), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "f")
			const p = 4
			runRanks(t, p, func(c *mpi.Comm) error {
				f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeCreate|mpiio.ModeRdwr, nil)
				if err != nil {
					return err
				}
				k := 5
				if c.Rank() == late {
					k = 200
				}
				for i := 0; i < k; i++ {
					if _, err := f.WriteShared([]byte("0123456789")); err != nil {
						return err
					}
				}
				if err := f.Close(); err != nil {
					return err
				}
				if mpiio.SharedServing(f) {
					return fmt.Errorf("shared pointer service still running after Close")
				}
				return nil
			})
			st, err := os.Stat(path)
			if err != nil || st.Size() != int64(10*(5*3+200)) {
				t.Fatalf("file: %v, %v; want %d bytes", st, err, 10*(5*3+200))
			}
		})
	}
}
