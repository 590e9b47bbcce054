package ckpt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

func TestRankFileRoundTrip(t *testing.T) {
	grid := []float64{1, 2, 3}
	step := 7
	var buf bytes.Buffer
	secs := []section{gobSection("step", &step), rawSection("grid", &grid)}
	if err := writeSections(&buf, secs, index{Epoch: 3, Rank: 1, Ranks: 2}); err != nil {
		t.Fatal(err)
	}
	rf, err := readIndex(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	if rf.ix.Epoch != 3 || len(rf.ix.Sections) != 2 || rf.ix.Sections[1].Size != 24 {
		t.Fatalf("index %+v", rf.ix)
	}
	for _, n := range []int{0, 7, buf.Len() - 1} {
		if _, err := readIndex(bytes.NewReader(buf.Bytes()[:n]), int64(n)); err == nil {
			t.Errorf("index of a file cut to %d bytes accepted", n)
		}
	}
}

func FuzzReadIndex(f *testing.F) {
	var buf bytes.Buffer
	g := []int32{1, 2}
	writeSections(&buf, []section{rawSection("g", &g)}, index{Epoch: 1, Ranks: 1})
	f.Add(buf.Bytes())
	f.Add(binary.BigEndian.AppendUint64([]byte(`{"sections":[{"name":"x","size":-1}]}`), 37))
	f.Fuzz(func(t *testing.T, b []byte) {
		rf, err := readIndex(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			if len(b) < 8 && !errors.Is(err, errBadIndex) {
				t.Fatalf("short file: %v, want errBadIndex", err)
			}
			return
		}
		// Every section the index accepts lies inside the data.
		var end int64
		for _, s := range rf.ix.Sections {
			if s.Size < 0 {
				t.Fatalf("negative section accepted: %+v", s)
			}
			end += s.Size
		}
		if end > int64(len(b)) {
			t.Fatalf("sections of %d bytes in a file of %d", end, len(b))
		}
	})
}
