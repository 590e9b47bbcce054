package proxy

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// An app's executable is searched once, for its first rank; the others
// reuse the result, including a failed search.
func TestAppPathOncePerApp(t *testing.T) {
	bin := t.TempDir()
	prog := filepath.Join(bin, "myprog")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin)
	p := &proxy{}
	for _, tc := range []struct {
		app      int
		name     string
		want     string
		notFound bool
	}{
		{0, "myprog", prog, false},
		{1, "/bin/sh", "/bin/sh", false},
		{2, "./rel/prog", "./rel/prog", false}, // resolved against the rank's directory by exec
		{3, "nosuchprog", "nosuchprog", true},
	} {
		got, err := p.appPath(tc.app, tc.name)
		if got != tc.want || (err != nil) != tc.notFound || (tc.notFound && !errors.Is(err, exec.ErrNotFound)) {
			t.Errorf("app %d %q: %q, %v; want %q (not found %v)", tc.app, tc.name, got, err, tc.want, tc.notFound)
		}
	}
	// Later ranks of the same apps do not search again: a PATH where
	// myprog is missing and nosuchprog exists changes nothing.
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "nosuchprog"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", other)
	if got, err := p.appPath(0, "myprog"); got != prog || err != nil {
		t.Errorf("app 0 again: %q, %v", got, err)
	}
	if _, err := p.appPath(3, "nosuchprog"); !errors.Is(err, exec.ErrNotFound) {
		t.Errorf("app 3 again: %v, want the first search's error", err)
	}
}
