package privdir

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestEnsure(t *testing.T) {
	base := t.TempDir()
	open := filepath.Join(base, "open")
	os.Mkdir(open, 0o755)
	os.Chmod(open, 0o755)
	private := filepath.Join(base, "private")
	os.Mkdir(private, 0o700)
	link := filepath.Join(base, "link")
	os.Symlink(private, link)
	file := filepath.Join(base, "file")
	os.WriteFile(file, nil, 0o600)
	for _, d := range []string{open, link, file} {
		if err := Ensure(d); !errors.Is(err, ErrNotPrivate) {
			t.Errorf("%s: %v, want ErrNotPrivate", d, err)
		}
	}
	if os.Getuid() == 0 {
		// A directory of another user, even with the right mode.
		other := filepath.Join(base, "other")
		os.Mkdir(other, 0o700)
		os.Chown(other, 65534, 65534)
		if err := Ensure(other); !errors.Is(err, ErrNotPrivate) {
			t.Errorf("other user's directory: %v", err)
		}
	}
	fresh := filepath.Join(base, "new")
	if err := Ensure(fresh); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(fresh); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("new directory: %v %v", fi.Mode(), err)
	}
	if err := Ensure(private); err != nil {
		t.Fatal(err)
	}
	if err := Ensure(filepath.Join(base, "missing", "x")); err == nil || errors.Is(err, ErrNotPrivate) {
		t.Fatalf("missing parent: %v", err)
	}
}
