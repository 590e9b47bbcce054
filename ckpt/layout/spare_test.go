package layout

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRetireReuse: a retired epoch's files become spares (the epoch is
// uncommitted first), the next epoch overwrites a spare in place under a
// temporary name and Close cuts it to the new size; an overwrite that never
// reaches Close (a crash) leaves no committed file with mixed bytes.
func TestRetireReuse(t *testing.T) {
	cache := t.TempDir()
	spare := SpareDir(cache)
	m := writeEpoch(t, cache, 1, 2, true)
	if err := Retire(cache, 1, spare); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(EpochDir(cache, 1)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("retired epoch still there: %v", err)
	}
	old, err := os.Stat(SparePath(cache, 1))
	if err != nil || old.Size() != m.Files[1].Size {
		t.Fatalf("spare of rank 1: %v, %v; want %d bytes", old, err, m.Files[1].Size)
	}

	// Epoch 2, rank 1: shorter than the spare, overwritten in place.
	w, err := Reuse(cache, 2, 1, SparePath(cache, 1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(SparePath(cache, 1)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("spare still in place while it is overwritten: %v", err)
	}
	if _, err := os.Stat(RankPath(cache, 2, 1)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("rank file under its final name before Close: %v", err)
	}
	w.Write([]byte("new"))
	f, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(RankPath(cache, 2, 1))
	if err != nil || string(got) != "new" || f.Size != 3 {
		t.Fatalf("reused file holds %q (%v), entry %+v; want %q", got, err, f, "new")
	}
	now, _ := os.Stat(RankPath(cache, 2, 1))
	if !os.SameFile(old, now) {
		t.Fatal("the spare's storage was not reused")
	}
	if err := VerifyFile(cache, 2, f); err != nil {
		t.Fatal(err)
	}

	// A crash mid-overwrite: rank 0's spare half overwritten, no Close.
	w, err = Reuse(cache, 3, 0, SparePath(cache, 0))
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("half"))
	w.f.Close()
	if r, _ := Ranks(cache, 3); len(r) != 0 {
		t.Fatalf("an interrupted overwrite left rank files %v", r)
	}
	if _, err := ReadManifest(cache, 3); !errors.Is(err, ErrUncommitted) {
		t.Fatalf("epoch 3: %v, want uncommitted", err)
	}

	// No spare: a new file.
	w, err = Reuse(cache, 4, 5, SparePath(cache, 5))
	if err != nil {
		t.Fatal(err)
	}
	w.Write(bytes.Repeat([]byte{7}, 10))
	if f, err := w.Close(); err != nil || f.Size != 10 {
		t.Fatalf("%+v %v", f, err)
	}
}

// TestRetireKeepsExistingSpare: a rank with a spare keeps it; the retired
// file is dropped.
func TestRetireKeepsExistingSpare(t *testing.T) {
	cache := t.TempDir()
	if err := Preallocate(SparePath(cache, 0), 4096); err != nil {
		t.Fatal(err)
	}
	pre, err := os.Stat(SparePath(cache, 0))
	if err != nil || pre.Size() != 4096 {
		t.Fatalf("preallocated spare: %v %v", pre, err)
	}
	writeEpoch(t, cache, 1, 1, true)
	if err := Retire(cache, 1, SpareDir(cache)); err != nil {
		t.Fatal(err)
	}
	now, err := os.Stat(SparePath(cache, 0))
	if err != nil || !os.SameFile(pre, now) {
		t.Fatalf("the existing spare was replaced (%v)", err)
	}
	// Preallocate leaves an existing spare alone too.
	if err := Preallocate(SparePath(cache, 0), 1<<20); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(SparePath(cache, 0)); st.Size() != 4096 {
		t.Fatalf("spare resized to %d", st.Size())
	}
	ents, _ := os.ReadDir(SpareDir(cache))
	if len(ents) != 1 {
		t.Fatalf("spare directory holds %d entries, want 1", len(ents))
	}
}

func TestCleanSpares(t *testing.T) {
	cache := t.TempDir()
	dir := SpareDir(cache)
	for _, r := range []int{0, 1, 2} {
		if err := Preallocate(SparePath(cache, r), 10); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(dir, ".rank.00001.tmp"), nil, 0o644) // rank 1's preallocation
	os.WriteFile(filepath.Join(dir, ".rank.00002.tmp"), nil, 0o644) // rank 2's (in progress, or left by a crash)
	os.WriteFile(filepath.Join(dir, "rank.1"), nil, 0o644)          // not a rank name
	os.WriteFile(filepath.Join(dir, "x.tmp"), nil, 0o644)
	if err := CleanSpares(dir, func(r int) bool { return r != 1 }); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, de := range ents {
		names = append(names, de.Name())
	}
	if got := strings.Join(names, " "); got != ".rank.00002.tmp rank.00000 rank.00002" {
		t.Fatalf("spares left: %s", got)
	}
	if err := CleanSpares(filepath.Join(cache, "none"), func(int) bool { return true }); err != nil {
		t.Fatalf("missing directory: %v", err)
	}
}
