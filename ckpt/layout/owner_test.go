package layout

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestClaimCache(t *testing.T) {
	prefix := t.TempDir()
	other := t.TempDir()
	tests := []struct {
		name    string
		setup   func(t *testing.T, cache string)
		wantErr string // "" for success
	}{
		{name: "new cache", setup: func(*testing.T, string) {}},
		{name: "missing cache dir", setup: func(t *testing.T, cache string) { os.Remove(cache) }, wantErr: "no such file"},
		{name: "own record", setup: func(t *testing.T, cache string) { writeFile(t, filepath.Join(cache, OwnerFile), prefix+"\n") }},
		{name: "another prefix's record", setup: func(t *testing.T, cache string) {
			writeFile(t, filepath.Join(cache, OwnerFile), other+"\n")
		}, wantErr: other},
		{name: "epochs without a record", setup: func(t *testing.T, cache string) {
			mkdir(t, EpochDir(cache, 3))
		}, wantErr: "no PREFIX record"},
		{name: "partner epochs without a record", setup: func(t *testing.T, cache string) {
			mkdir(t, EpochDir(PartnerDir(cache), 1))
		}, wantErr: "no PREFIX record"},
		{name: "epochs with the record written by hand", setup: func(t *testing.T, cache string) {
			mkdir(t, EpochDir(cache, 3))
			writeFile(t, filepath.Join(cache, OwnerFile), prefix)
		}},
		{name: "other files only", setup: func(t *testing.T, cache string) { writeFile(t, filepath.Join(cache, "notes"), "x") }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cache := filepath.Join(t.TempDir(), "cache")
			mkdir(t, cache)
			tc.setup(t, cache)
			err := ClaimCache(cache, prefix)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				b, err := os.ReadFile(filepath.Join(cache, OwnerFile))
				if err != nil || strings.TrimSpace(string(b)) != prefix {
					t.Fatalf("record %q, %v; want %s", b, err, prefix)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err %v, want one containing %q", err, tc.wantErr)
			}
			if tc.wantErr != "no such file" && !errors.Is(err, ErrForeignCache) {
				t.Fatalf("err %v is not ErrForeignCache", err)
			}
			if _, err := os.Stat(filepath.Join(cache, OwnerFile)); tc.wantErr == "no PREFIX record" && err == nil {
				t.Fatal("a refused cache was claimed")
			}
		})
	}
}

func mkdir(t *testing.T, d string) {
	t.Helper()
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}
