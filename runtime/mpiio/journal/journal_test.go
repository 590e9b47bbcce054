package journal

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
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
	if err != nil || target != "/s/f" || len(pend) != 1 || pend[0] != e2 {
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
	f.Fuzz(func(t *testing.T, b []byte) {
		target, pend, err := Parse(b)
		if err != nil {
			return
		}
		// Re-encoding what was understood parses to the same.
		var recs [][]byte
		for _, e := range pend {
			recs = append(recs, ExtentRecord(e))
		}
		t2, p2, err := Parse(build(target, recs...))
		if err != nil || t2 != target || len(p2) != len(pend) {
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
	if _, err := os.Stat(target); !os.IsNotExist(err) {
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
