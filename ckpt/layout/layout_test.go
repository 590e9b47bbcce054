package layout

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"
)

// writeEpoch writes ranks files of epoch e with distinct contents and
// commits it when commit is set.
func writeEpoch(t *testing.T, prefix string, e, ranks int, commit bool) *Manifest {
	t.Helper()
	m := &Manifest{Epoch: e, Ranks: ranks}
	for r := 0; r < ranks; r++ {
		w, err := Create(prefix, e, r)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 100; i++ {
			w.Write([]byte{byte(e), byte(r), byte(i)})
		}
		f, err := w.Close()
		if err != nil {
			t.Fatal(err)
		}
		m.Files = append(m.Files, f)
	}
	if commit {
		if err := Commit(prefix, m); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

func TestCommitListVerify(t *testing.T) {
	prefix := t.TempDir()
	if _, err := Newest(prefix); !errors.Is(err, ErrNoEpoch) {
		t.Fatalf("empty prefix: %v, want ErrNoEpoch", err)
	}
	writeEpoch(t, prefix, 1, 3, true)
	writeEpoch(t, prefix, 2, 3, false) // a crash before commit
	eps, err := List(prefix)
	if err != nil || len(eps) != 2 || !eps[0].Committed() || eps[1].Committed() {
		t.Fatalf("List = %+v, %v", eps, err)
	}
	m, err := Newest(prefix)
	if err != nil || m.Epoch != 1 || m.Size() != 900 {
		t.Fatalf("Newest = %+v, %v; want epoch 1 of 900 bytes", m, err)
	}
	if n, _ := MaxEpoch(prefix); n != 2 {
		t.Fatalf("MaxEpoch = %d, want 2", n)
	}
	if bad, err := Verify(prefix, 1); err != nil || bad != nil {
		t.Fatalf("Verify intact epoch: %v %v", bad, err)
	}
	if _, err := Verify(prefix, 2); !errors.Is(err, ErrUncommitted) {
		t.Fatalf("Verify uncommitted: %v", err)
	}
}

func TestVerifyDamage(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(path string) error
		want   error
	}{
		{"missing", os.Remove, ErrMissing},
		{"one byte", func(p string) error {
			b, _ := os.ReadFile(p)
			b[len(b)/2] ^= 1
			return os.WriteFile(p, b, 0o644)
		}, ErrCorrupt},
		{"truncated", func(p string) error { return os.Truncate(p, 10) }, ErrCorrupt},
		{"longer", func(p string) error {
			f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			f.Write([]byte{0})
			return f.Close()
		}, ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := t.TempDir()
			writeEpoch(t, prefix, 4, 3, true)
			if err := tc.damage(RankPath(prefix, 4, 1)); err != nil {
				t.Fatal(err)
			}
			bad, err := Verify(prefix, 4)
			if err != nil || len(bad) != 1 || !errors.Is(bad[0], tc.want) {
				t.Fatalf("Verify = %v, %v; want one %v", bad, err, tc.want)
			}
		})
	}
}

func TestPrune(t *testing.T) {
	prefix := t.TempDir()
	for e := 1; e <= 5; e++ {
		writeEpoch(t, prefix, e, 2, e != 3)
	}
	writeEpoch(t, prefix, 6, 2, false) // in progress: kept
	if err := Prune(prefix, 2); err != nil {
		t.Fatal(err)
	}
	eps, _ := List(prefix)
	var got []int
	for _, e := range eps {
		got = append(got, e.Epoch)
	}
	if len(got) != 3 || got[0] != 4 || got[1] != 5 || got[2] != 6 {
		t.Fatalf("after Prune(2) epochs %v, want [4 5 6]", got)
	}
}

func TestRemoveUncommitsFirst(t *testing.T) {
	prefix := t.TempDir()
	writeEpoch(t, prefix, 1, 2, true)
	// A removal interrupted after the manifest went leaves an uncommitted
	// directory: make the rest of the removal fail.
	dir := EpochDir(prefix, 1)
	os.Remove(filepath.Join(dir, ManifestName))
	if m, err := Newest(prefix); err == nil {
		t.Fatalf("epoch without manifest counted as committed: %+v", m)
	}
	if err := Remove(prefix, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s still there: %v", dir, err)
	}
}

func TestCopyFile(t *testing.T) {
	cache, prefix := t.TempDir(), t.TempDir()
	m := writeEpoch(t, cache, 7, 2, true)
	for _, f := range m.Files {
		got, err := CopyFile(cache, prefix, 7, f)
		if err != nil || got != f {
			t.Fatalf("copy %+v: %+v %v", f, got, err)
		}
	}
	if err := Commit(prefix, m); err != nil {
		t.Fatal(err)
	}
	if bad, err := Verify(prefix, 7); err != nil || bad != nil {
		t.Fatalf("flushed copy: %v %v", bad, err)
	}
	// A source damaged after commit is caught during the copy.
	b, _ := os.ReadFile(RankPath(cache, 7, 0))
	b[0] ^= 0xff
	os.WriteFile(RankPath(cache, 7, 0), b, 0o644)
	if _, err := CopyFile(cache, t.TempDir(), 7, m.Files[0]); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("copy of a damaged file: %v", err)
	}
}

// TestDeferredChecksum: a file written without a checksum (a cache epoch)
// commits with an empty crc32c, is verified by size until then, and the
// flush's copy supplies the checksum of its bytes.
func TestDeferredChecksum(t *testing.T) {
	cache, prefix := t.TempDir(), t.TempDir()
	w, err := Create(cache, 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	w.NoChecksum()
	data := bytes.Repeat([]byte("abc"), 5000)
	w.Write(data)
	f, err := w.Close()
	if err != nil || f.CRC32C != "" || f.Size != int64(len(data)) {
		t.Fatalf("entry %+v %v; want no checksum, %d bytes", f, err, len(data))
	}
	m := &Manifest{Epoch: 3, Ranks: 1, Files: []File{f}}
	if err := Commit(cache, m); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadManifest(cache, 3); err != nil {
		t.Fatalf("a manifest without checksums: %v", err)
	}
	if err := VerifyFile(cache, 3, f); err != nil {
		t.Fatal(err)
	}
	got, err := CopyFile(cache, prefix, 3, f)
	want := FormatCRC(crc32.Checksum(data, crcTable()))
	if err != nil || got.CRC32C != want || got.Size != f.Size {
		t.Fatalf("flushed entry %+v %v; want crc32c %s", got, err, want)
	}
	if err := VerifyFile(prefix, 3, got); err != nil {
		t.Fatal(err)
	}
	// What the size check still catches: a truncated or missing file.
	os.Truncate(RankPath(cache, 3, 0), 10)
	if err := VerifyFile(cache, 3, f); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("truncated file: %v", err)
	}
	os.Remove(RankPath(cache, 3, 0))
	if err := VerifyFile(cache, 3, f); !errors.Is(err, ErrMissing) {
		t.Fatalf("missing file: %v", err)
	}
}

func TestParseManifestRejects(t *testing.T) {
	good := `{"version":1,"epoch":2,"ranks":1,"time":"2026-01-01T00:00:00Z","files":[{"rank":0,"name":"rank.00000","size":3,"crc32c":"0000abcd"}]}`
	if _, err := ParseManifest([]byte(good), "m"); err != nil {
		t.Fatalf("good manifest: %v", err)
	}
	for name, bad := range map[string]string{
		"version":   `{"version":2,"epoch":2,"ranks":1,"files":[{"rank":0,"name":"rank.00000","size":3,"crc32c":"0000abcd"}]}`,
		"count":     `{"version":1,"epoch":2,"ranks":2,"files":[{"rank":0,"name":"rank.00000","size":3,"crc32c":"0000abcd"}]}`,
		"crc":       `{"version":1,"epoch":2,"ranks":1,"files":[{"rank":0,"name":"rank.00000","size":3,"crc32c":"xyz"}]}`,
		"name":      `{"version":1,"epoch":2,"ranks":1,"files":[{"rank":0,"name":"../etc/passwd","size":3,"crc32c":"0000abcd"}]}`,
		"negative":  `{"version":1,"epoch":2,"ranks":1,"files":[{"rank":0,"name":"rank.00000","size":-3,"crc32c":"0000abcd"}]}`,
		"unknown":   `{"version":1,"epoch":2,"ranks":1,"extra":1,"files":[{"rank":0,"name":"rank.00000","size":3,"crc32c":"0000abcd"}]}`,
		"trailing":  good + `{}`,
		"truncated": good[:40],
	} {
		if _, err := ParseManifest([]byte(bad), "m"); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: ParseManifest = %v, want ErrCorrupt", name, err)
		}
	}
}

func FuzzParseManifest(f *testing.F) {
	f.Add([]byte(`{"version":1,"epoch":2,"ranks":1,"time":"2026-01-01T00:00:00Z","files":[{"rank":0,"name":"rank.00000","size":3,"crc32c":"0000abcd"}]}`))
	f.Add([]byte(`{"version":1,"epoch":0,"ranks":0,"files":[]}`))
	f.Add([]byte(`{"version":1,"epoch":3,"ranks":1,"files":[{"rank":0,"name":"rank.00000","size":3,"crc32c":""}]}`))
	f.Add([]byte(`{`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseManifest(data, "fuzz")
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error not ErrCorrupt: %v", err)
			}
			return
		}
		// Whatever parses must name only the files the layout writes.
		if len(m.Files) != m.Ranks {
			t.Fatalf("%d files for %d ranks", len(m.Files), m.Ranks)
		}
		for i, fl := range m.Files {
			if fl.Name != RankName(i) || fl.Size < 0 {
				t.Fatalf("bad file entry accepted: %+v", fl)
			}
		}
	})
}

// TestLargeFile writes a file past several chunk boundaries
// in odd-sized writes; its checksum, a verification and a copy agree with
// the bytes.
func TestLargeFile(t *testing.T) {
	prefix, to := t.TempDir(), t.TempDir()
	data := make([]byte, 3*writeChunk+12345)
	for i := range data {
		data[i] = byte(i * 7 >> 3)
	}
	w, err := Create(prefix, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	for p, step := data, 1; len(p) > 0; step = step*3 + 1 {
		n := min(len(p), step)
		if _, err := w.Write(p[:n]); err != nil {
			t.Fatal(err)
		}
		p = p[n:]
	}
	f, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	if want := FormatCRC(crc32.Checksum(data, crcTable())); f.Size != int64(len(data)) || f.CRC32C != want {
		t.Fatalf("wrote %+v, want %d bytes crc32c %s", f, len(data), want)
	}
	if err := VerifyFile(prefix, 1, f); err != nil {
		t.Fatal(err)
	}
	if _, err := CopyFile(prefix, to, 1, f); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(RankPath(to, 1, 0)); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("copy differs (%v)", err)
	}
}

func TestRanks(t *testing.T) {
	prefix := t.TempDir()
	writeEpoch(t, prefix, 3, 3, false)
	os.WriteFile(filepath.Join(EpochDir(prefix, 3), "rank.00007.tmp"), nil, 0o644)
	os.WriteFile(filepath.Join(EpochDir(prefix, 3), "rank.7"), nil, 0o644)
	os.Mkdir(filepath.Join(EpochDir(prefix, 3), "rank.00009"), 0o755)
	if rs, err := Ranks(prefix, 3); err != nil || fmt.Sprint(rs) != "[0 1 2]" {
		t.Fatalf("Ranks = %v %v, want [0 1 2]", rs, err)
	}
	if rs, err := Ranks(prefix, 4); err != nil || rs != nil {
		t.Fatalf("Ranks of a missing epoch = %v %v", rs, err)
	}
}

// TestSkip: ranges Skip leaves are filled later with WriteAt (as a
// snapshot writer does with pwrite), on a new file and over a longer
// spare; Entry names the final size; Skip needs NoChecksum.
func TestSkip(t *testing.T) {
	for _, spare := range []bool{false, true} {
		t.Run(fmt.Sprintf("spare=%v", spare), func(t *testing.T) {
			dir := t.TempDir()
			var w *Writer
			var err error
			if spare {
				sp := filepath.Join(t.TempDir(), "spare")
				os.WriteFile(sp, bytes.Repeat([]byte{0xff}, 1<<16), 0o644)
				w, err = Reuse(dir, 1, 0, sp)
			} else {
				w, err = Create(dir, 1, 0)
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Skip(10); err == nil {
				t.Fatal("Skip with a checksum accepted")
			}
			w.Abort()
			if spare {
				sp := filepath.Join(t.TempDir(), "spare")
				os.WriteFile(sp, bytes.Repeat([]byte{0xff}, 1<<16), 0o644)
				w, err = Reuse(dir, 2, 0, sp)
			} else {
				w, err = Create(dir, 2, 0)
			}
			if err != nil {
				t.Fatal(err)
			}
			w.NoChecksum()
			w.Write([]byte("head"))
			off, err := w.Skip(5)
			if err != nil || off != 4 {
				t.Fatalf("Skip = %d, %v; want offset 4", off, err)
			}
			w.Write([]byte("tail"))
			if e := w.Entry(); e.Size != 13 || e.Rank != 0 {
				t.Fatalf("Entry %+v, want 13 bytes", e)
			}
			if err := w.WriteAt([]byte("12345"), off); err != nil {
				t.Fatal(err)
			}
			f, err := w.Close()
			if err != nil || f.Size != 13 {
				t.Fatalf("Close %+v %v", f, err)
			}
			got, _ := os.ReadFile(RankPath(dir, 2, 0))
			if string(got) != "head12345tail" {
				t.Fatalf("file %q, want head12345tail", got)
			}
		})
	}
}

// TestManifestModeLikeRankFiles: a manifest is created with the rank
// files' mode (0644 less the umask). It was 0600 (os.CreateTemp), so on a
// group's shared prefix another user's `gompiexec ckpt verify` or restart
// found every epoch's rank files readable but not its manifest, and listed
// the epochs as bad ("permission denied") instead of committed.
func TestManifestModeLikeRankFiles(t *testing.T) {
	prefix := t.TempDir()
	writeEpoch(t, prefix, 3, 2, true)
	var modes []os.FileMode
	for _, name := range []string{ManifestName, RankName(0)} {
		st, err := os.Stat(filepath.Join(EpochDir(prefix, 3), name))
		if err != nil {
			t.Fatal(err)
		}
		modes = append(modes, st.Mode().Perm())
	}
	if modes[0] != modes[1] {
		t.Fatalf("manifest mode %v, rank file mode %v", modes[0], modes[1])
	}
}

// TestParseEpochDir: only EpochDir's own names are epochs. "epoch.7" was
// listed as epoch 7 (incomplete) by gompiexec ckpt list, while every
// reader and Remove looked for epoch.000007, so it was never removed.
func TestParseEpochDir(t *testing.T) {
	for _, tc := range []struct {
		name string
		e    int
		ok   bool
	}{
		{"epoch.000007", 7, true}, {"epoch.1234567", 1234567, true}, {"epoch.000000", 0, true},
		{"epoch.7", 0, false}, {"epoch.0000007", 0, false}, {"epoch.", 0, false},
		{"epoch.00000a", 0, false}, {"epoch.-00001", 0, false}, {"rank.00001", 0, false},
	} {
		e, ok := ParseEpochDir(tc.name)
		if e != tc.e || ok != tc.ok {
			t.Errorf("ParseEpochDir(%q) = %d, %v; want %d, %v", tc.name, e, ok, tc.e, tc.ok)
		}
	}
}
