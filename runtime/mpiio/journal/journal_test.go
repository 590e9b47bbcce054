package journal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func build(target string, recs ...[]byte) []byte {
	b := Header(target)
	for _, r := range recs {
		b = append(b, r...)
	}
	return b
}

func TestParse(t *testing.T) {
	e1 := Extent{Seq: 1, FileOff: 10, Len: 3, DataOff: 0, CRC: Checksum([]byte("abc"))}
	e2 := Extent{Seq: 2, FileOff: 0, Len: 2, DataOff: 3, CRC: Checksum([]byte("xy"))}
	j := build("/s/f", ExtentRecord(e1), FlushedRecord(1), ExtentRecord(e2))
	target, pend, err := Parse(j)
	if err != nil || target != "/s/f" || len(pend) != 1 || !reflect.DeepEqual(pend[0], e2) {
		t.Fatalf("got %q %v %v", target, pend, err)
	}
	// A torn tail ends the journal without error.
	_, pend, err = Parse(j[:len(j)-5])
	if err != nil || len(pend) != 0 {
		t.Fatalf("torn: %v %v", pend, err)
	}
	if _, _, err := Parse([]byte("nonsense")); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("bad header: %v", err)
	}
}

// A vectored extent: one record for many pieces; torn anywhere (in its
// fixed part or in its piece list) it was never acknowledged.
func TestParseVector(t *testing.T) {
	e1 := Extent{Seq: 1, Len: 5, DataOff: 0, CRC: Checksum([]byte("abcde")), Pieces: []Piece{{10, 2}, {20, 3}}}
	e2 := Extent{Seq: 2, FileOff: 7, Len: 1, DataOff: 5, CRC: Checksum([]byte("z"))}
	e3 := Extent{Seq: 3, Len: 4, DataOff: 6, Pieces: []Piece{{0, 1}, {4, 1}, {8, 2}}}
	j := build("/s/f", ExtentRecord(e1), ExtentRecord(e2), ExtentRecord(e3))
	_, pend, err := Parse(j)
	if err != nil || !reflect.DeepEqual(pend, []Extent{e1, e2, e3}) {
		t.Fatalf("got %+v %v", pend, err)
	}
	full := len(j)
	for _, cut := range []int{1, PieceSize, 3 * PieceSize, 3*PieceSize + 1, 3*PieceSize + RecordSize - 1} {
		_, pend, err := Parse(j[:full-cut])
		if err != nil || !reflect.DeepEqual(pend, []Extent{e1, e2}) {
			t.Fatalf("cut %d: got %+v %v", cut, pend, err)
		}
	}
	// A piece count beyond the journal's end is a torn tail, not a panic.
	bad := ExtentRecord(e3)
	bad[16] = 0xff
	if _, pend, err := Parse(build("/s/f", ExtentRecord(e1), bad)); err != nil || len(pend) != 1 {
		t.Fatalf("huge count: %+v %v", pend, err)
	}
	// Pieces that do not add up to the length: corrupt.
	e4 := e3
	e4.Len = 99
	if _, _, err := Parse(build("/s/f", ExtentRecord(e4))); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("pieces not adding up: %v", err)
	}
}

// Replay of a vectored extent writes each piece where it belongs, across
// several reads of the data file (pieces larger than the read size).
func TestReplayVector(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "shared")
	data := make([]byte, 3*chunk+100)
	for i := range data {
		data[i] = byte(i*7 + i/4096)
	}
	var ps []Piece
	want := make([]byte, 2*len(data))
	for d, i := int64(0), 0; d < int64(len(data)); i++ {
		n := min(int64(len(data))-d, int64(1000+i*997)%(chunk+3000))
		off := 2*d + int64(i%3) // gaps between the pieces, unaligned
		ps = append(ps, Piece{off, n})
		copy(want[off:], data[d:d+n])
		d += n
	}
	e := Extent{Seq: 1, Len: int64(len(data)), CRC: Checksum(data), Pieces: ps}
	os.WriteFile(target, nil, 0o644)
	os.WriteFile(filepath.Join(dir, "k"+JournalSuffix), build(target, ExtentRecord(e)), 0o600)
	os.WriteFile(filepath.Join(dir, "k"+DataSuffix), data, 0o600)
	if ts, err := ReplayDir(dir); err != nil || len(ts) != 1 {
		t.Fatal(ts, err)
	}
	got, _ := os.ReadFile(target)
	last := ps[len(ps)-1]
	if !bytes.Equal(got, want[:last.FileOff+last.Len]) {
		t.Fatalf("replayed file differs (%d bytes, want %d)", len(got), last.FileOff+last.Len)
	}
}

func TestReplay(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "shared")
	os.WriteFile(target, []byte("0123456789"), 0o644)
	data := []byte("abcXY")
	j := build(target, ExtentRecord(Extent{Seq: 1, FileOff: 2, Len: 3, DataOff: 0, CRC: Checksum(data[:3])}),
		ExtentRecord(Extent{Seq: 2, FileOff: 8, Len: 2, DataOff: 3, CRC: Checksum(data[3:])}))
	os.WriteFile(filepath.Join(dir, "k"+JournalSuffix), j, 0o600)
	os.WriteFile(filepath.Join(dir, "k"+DataSuffix), data, 0o600)
	ts, err := ReplayDir(dir)
	if err != nil || len(ts) != 1 {
		t.Fatal(ts, err)
	}
	if b, _ := os.ReadFile(target); !bytes.Equal(b, []byte("01abc567XY")) {
		t.Fatalf("replayed %q", b)
	}
	if _, err := os.Stat(filepath.Join(dir, "k"+JournalSuffix)); !os.IsNotExist(err) {
		t.Fatal("journal not removed")
	}
	// Corrupt data is an error, not silent garbage.
	os.WriteFile(filepath.Join(dir, "k"+JournalSuffix), j, 0o600)
	os.WriteFile(filepath.Join(dir, "k"+DataSuffix), []byte("zzzzz"), 0o600)
	if _, err := ReplayDir(dir); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("corrupt data: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(build("/x", ExtentRecord(Extent{Seq: 1, Len: 4}), FlushedRecord(1)))
	f.Add([]byte("GMPIJNL1"))
	sx := Extent{Seq: 1, Len: 4, Snapshot: true, NoCRC: true}
	f.Add(build("/x", committed(ExtentRecord(sx), sx), ExtentRecord(Extent{Seq: 2, Len: 1, Snapshot: true})))
	f.Add(build("/x", ExtentRecord(Extent{Seq: 1, Len: 3, Pieces: []Piece{{5, 1}, {9, 2}}}), FlushedRecord(1),
		ExtentRecord(Extent{Seq: 2, Len: 1, Pieces: []Piece{{0, 1}}})))
	f.Fuzz(func(t *testing.T, b []byte) {
		target, pend, err := Parse(b)
		if err != nil {
			return
		}
		// Re-encoding what was understood parses to the same.
		var recs [][]byte
		for _, e := range pend {
			recs = append(recs, committed(ExtentRecord(e), e))
		}
		t2, p2, err := Parse(build(target, recs...))
		if err != nil || t2 != target || len(p2) != len(pend) || (len(pend) > 0 && !reflect.DeepEqual(p2, pend)) {
			t.Fatalf("round trip: %v %v %v", t2, p2, err)
		}
	})
}

// A journal whose writer holds its lock is a running job's: ReplayDir
// leaves it alone (replaying it would race the job's flusher), Replay
// says so, and once the lock is gone it is replayed.
func TestReplaySkipsLiveJournal(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "shared")
	data := []byte("live")
	os.WriteFile(target, nil, 0o644)
	jp := filepath.Join(dir, "k"+JournalSuffix)
	os.WriteFile(jp, build(target, ExtentRecord(Extent{Seq: 1, Len: 4, CRC: Checksum(data)})), 0o600)
	os.WriteFile(filepath.Join(dir, "k"+DataSuffix), data, 0o600)
	live, err := os.OpenFile(jp, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := Lock(live); err != nil {
		t.Fatal(err)
	}
	if ts, err := ReplayDir(dir); err != nil || len(ts) != 0 {
		t.Fatalf("live journal replayed: %v %v", ts, err)
	}
	if st, err := os.Stat(target); err != nil || st.Size() != 0 {
		t.Fatalf("target written under a live journal: %v", err)
	}
	if _, _, err := Replay(jp); !errors.Is(err, ErrInUse) {
		t.Fatalf("Replay of a live journal: %v", err)
	}
	live.Close()
	if ts, err := ReplayDir(dir); err != nil || len(ts) != 1 {
		t.Fatalf("after the writer's end: %v %v", ts, err)
	}
	if b, _ := os.ReadFile(target); !bytes.Equal(b, data) {
		t.Fatalf("replayed %q", b)
	}
}

// An extent without a data checksum (a cache on tmpfs) is replayed
// without the check; unknown flags are corruption.
func TestNoCRC(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "shared")
	data := []byte("tmpfs")
	os.WriteFile(target, nil, 0o644) // the crashed job's Open created it
	e := Extent{Seq: 1, Len: 5, NoCRC: true, Pieces: []Piece{{3, 2}, {0, 3}}}
	j := build(target, ExtentRecord(e))
	if _, pend, err := Parse(j); err != nil || len(pend) != 1 || !reflect.DeepEqual(pend[0], e) {
		t.Fatalf("parse: %+v %v", pend, err)
	}
	os.WriteFile(filepath.Join(dir, "k"+JournalSuffix), j, 0o600)
	os.WriteFile(filepath.Join(dir, "k"+DataSuffix), data, 0o600)
	if _, err := ReplayDir(dir); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(target); string(b) != "pfstm" {
		t.Fatalf("replayed %q", b)
	}
	bad := ExtentRecord(Extent{Seq: 1, Len: 1})
	bad[44] = 8 // no such flag
	binary.LittleEndian.PutUint32(bad[4:], Checksum(bad[8:]))
	if _, _, err := Parse(build(target, bad)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("unknown flags: %v", err)
	}
}

// committed is rec with a snapshot extent's commit mark set, as its
// writer sets it.
func committed(rec []byte, e Extent) []byte {
	if e.Snapshot {
		off, b := CommitMark(e)
		rec[off] = b
	}
	return rec
}

// A snapshot extent's record counts only once committed (a one-byte write
// into it, outside the record's CRC); an uncommitted one is skipped and
// the records after it still count; a commit mark on another record is
// corruption.
func TestSnapshotCommit(t *testing.T) {
	e1 := Extent{Seq: 1, FileOff: 10, Len: 3, DataOff: 0, Snapshot: true, NoCRC: true}
	e2 := Extent{Seq: 2, FileOff: 0, Len: 2, DataOff: 3, CRC: Checksum([]byte("xy"))}
	e3 := Extent{Seq: 3, Len: 3, DataOff: 5, Snapshot: true, CRC: Checksum([]byte("pqr")), Pieces: []Piece{{20, 1}, {30, 2}}}
	r1, r3 := ExtentRecord(e1), ExtentRecord(e3)
	j := build("/s/f", r1, ExtentRecord(e2), r3)
	_, pend, err := Parse(j)
	if err != nil || len(pend) != 1 || pend[0].Seq != 2 {
		t.Fatalf("uncommitted snapshot extents: %v %v, want only extent 2", pend, err)
	}
	_, pend, err = Parse(build("/s/f", committed(r1, e1), ExtentRecord(e2), committed(r3, e3)))
	if err != nil || len(pend) != 3 || !reflect.DeepEqual(pend[0], e1) || !reflect.DeepEqual(pend[2], e3) {
		t.Fatalf("committed: %+v %v", pend, err)
	}
	bad := ExtentRecord(e2)
	bad[flagsOffset] |= flagCommitted
	if _, _, err := Parse(build("/s/f", bad)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("commit mark on a plain extent: %v, want ErrCorrupt", err)
	}

	// Replay writes committed snapshot extents and leaves out the rest.
	dir := t.TempDir()
	target := filepath.Join(dir, "shared")
	os.WriteFile(target, []byte("................................."), 0o644)
	r1, r3 = ExtentRecord(e1), ExtentRecord(e3)
	os.WriteFile(filepath.Join(dir, "k"+JournalSuffix), build(target, r1, ExtentRecord(e2), committed(r3, e3)), 0o600)
	os.WriteFile(filepath.Join(dir, "k"+DataSuffix), []byte("abcxypqr"), 0o600)
	if _, n, err := Replay(filepath.Join(dir, "k"+JournalSuffix)); err != nil || n != 2 {
		t.Fatalf("replay: %d extents, %v", n, err)
	}
	if b, _ := os.ReadFile(target); string(b) != "xy..................p.........qr." {
		t.Fatalf("replayed %q", b)
	}
}

// TestReplayMissingTarget: a journal whose shared file no longer exists
// (removed since the crash, or its file system not mounted where the
// launcher replays) is an error naming both, and the journal is kept.
// Replay created the file: a sparse file holding only the crashed job's
// unflushed extents (a rerun with ModeExcl then failed), or, under a
// missing mount, a file in the mount point's directory, the journal
// removed and the writes lost to the real file system.
func TestReplayMissingTarget(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "removed")
	data := []byte("abc")
	j := build(target, ExtentRecord(Extent{Seq: 1, FileOff: 4096, Len: 3, CRC: Checksum(data)}))
	jnl := filepath.Join(dir, "k"+JournalSuffix)
	os.WriteFile(jnl, j, 0o600)
	os.WriteFile(filepath.Join(dir, "k"+DataSuffix), data, 0o600)
	_, err := ReplayDir(dir)
	if err == nil || !strings.Contains(err.Error(), target) || !strings.Contains(err.Error(), jnl) {
		t.Fatalf("ReplayDir: %v, want an error naming %s and %s", err, target, jnl)
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Fatalf("replay created the removed file (%v)", err)
	}
	if _, err := os.Stat(jnl); err != nil {
		t.Fatalf("journal not kept: %v", err)
	}
}

// TestUnflush: after Unflush every extent of the journal is pending again
// (the shared file's fsync failed, so flushed records promised nothing).
func TestUnflush(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "k"+JournalSuffix))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.Write(build("/x", ExtentRecord(Extent{Seq: 1, Len: 4}), FlushedRecord(1),
		ExtentRecord(Extent{Seq: 2, Len: 1, Pieces: []Piece{{0, 1}}}), FlushedRecord(2), ExtentRecord(Extent{Seq: 3, Len: 2})))
	for _, want := range []int{1, 3} {
		b, _ := os.ReadFile(f.Name())
		if _, pend, err := Parse(b); err != nil || len(pend) != want {
			t.Fatalf("%d pending (%v), want %d", len(pend), err, want)
		}
		if err := Unflush(f); err != nil {
			t.Fatal(err)
		}
	}
}
