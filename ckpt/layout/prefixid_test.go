package layout

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestAdoptPrefixID: a cache's epochs go only when its record names
// another id; a cache without a record, or with an empty one (a write a
// crash cut short), takes the prefix's id and keeps its epochs.
func TestAdoptPrefixID(t *testing.T) {
	for _, tc := range []struct {
		name    string
		record  *string // nil: none
		removed []int
	}{
		{"same id", ptr("abc\n"), nil},
		{"no record", nil, nil},
		{"empty record", ptr(""), nil},
		{"another id", ptr("old\n"), []int{1, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cache := t.TempDir()
			for e := 1; e <= 2; e++ {
				w, err := Create(cache, e, 0)
				if err != nil {
					t.Fatal(err)
				}
				f, err := w.Close()
				if err != nil {
					t.Fatal(err)
				}
				if err := Commit(cache, &Manifest{Epoch: e, Ranks: 1, Files: []File{f}}); err != nil {
					t.Fatal(err)
				}
			}
			if tc.record != nil {
				if err := os.WriteFile(filepath.Join(cache, CacheIDFile), []byte(*tc.record), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			removed, err := AdoptPrefixID(cache, "abc")
			if err != nil || !slices.Equal(removed, tc.removed) {
				t.Fatalf("removed %v, %v; want %v", removed, err, tc.removed)
			}
			eps, _ := List(cache)
			if len(eps) != 2-len(tc.removed) {
				t.Fatalf("%d epochs left, want %d", len(eps), 2-len(tc.removed))
			}
			if b, _ := os.ReadFile(filepath.Join(cache, CacheIDFile)); string(b) != "abc\n" {
				t.Fatalf("record %q after adopting, want abc", b)
			}
		})
	}
}

func ptr(s string) *string { return &s }
