package mpiexec

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gompi/gompi/hostfile"
)

// routeJob is a job of n ranks on hosts a and b (alternating) whose
// output goes through a router, as runOnce sets it up.
func routeJob(t *testing.T, n int, c OutputConfig, prepend bool) (*job, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	layout, err := hostfile.Place([]hostfile.Host{{Name: "a", Slots: 1}, {Name: "b", Slots: 1}}, []int{n}, hostfile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var out, errw bytes.Buffer
	j := &job{cfg: Config{Output: c}, layout: layout, out: newOutput(&out, &errw, prepend || c.Prepend != nil), outErr: make(chan error, 2)}
	if c.Prepend != nil {
		vars := j.patternVars(fixedStart)
		j.out.prefix = func(dst []byte, rank int) []byte { return c.Prepend.Expand(dst, vars(rank)) }
	}
	j.route = j.newRouter(fixedStart)
	return j, &out, &errw
}

// fixedStart is the tests' job start.
var fixedStart = time.Now()

func mustPattern(t *testing.T, s string) *Pattern {
	t.Helper()
	p, err := ParsePattern(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestRouterFiles(t *testing.T) {
	dir := t.TempDir()
	// An older, longer file keeps its tail: no O_TRUNC, as Hydra.
	os.WriteFile(filepath.Join(dir, "out.0"), []byte("0123456789abcdef\n"), 0o644)
	j, out, errw := routeJob(t, 3, OutputConfig{
		OutFile: mustPattern(t, filepath.Join(dir, "out.%r")),
		ErrFile: mustPattern(t, filepath.Join(dir, "err.%h")), // ranks 0 and 2 share host a's file
	}, false)
	r := j.route
	r.write(0, 1, []byte("zero\n"))
	r.write(0, 2, []byte("e0 first half "))
	r.write(2, 2, []byte("e2 whole\n"))
	r.write(0, 2, []byte("second half\n"))
	r.write(1, 2, []byte("e1"))
	r.flush(0)
	r.flush(1)
	r.flush(2)
	r.flushAll()
	if out.Len() != 0 || errw.Len() != 0 {
		t.Errorf("terminal got %q %q", out, errw)
	}
	for name, want := range map[string]string{
		"out.0": "zero\n56789abcdef\n",
		"err.a": "e0 first half second half\ne2 whole\n",
		"err.b": "e1",
	} {
		if got := readFile(t, filepath.Join(dir, name)); got != want {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "out.1")); !os.IsNotExist(err) {
		t.Errorf("out.1 of a rank without stdout exists (%v); Hydra creates files at the first output", err)
	}
	if st, err := os.Stat(filepath.Join(dir, "err.b")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("err.b: %v %v, want mode 0600 as Hydra's", st.Mode(), err)
	}
	select {
	case err := <-j.outErr:
		t.Errorf("error reported: %v", err)
	default:
	}
}

func TestRouterOutputFromAndPrefix(t *testing.T) {
	dir := t.TempDir()
	j, out, errw := routeJob(t, 3, OutputConfig{
		From: 1, FromSet: true, Prepend: mustPattern(t, "%h:%p:%r> "),
		ErrFile: mustPattern(t, filepath.Join(dir, "err.%r")),
	}, false)
	for r := 0; r < 3; r++ {
		j.route.write(r, 1, []byte("line\n"))
		j.route.write(r, 2, []byte("oops\n"))
	}
	j.route.flushAll()
	if out.String() != "b:1:1> line\n" || errw.Len() != 0 {
		t.Errorf("stdout %q stderr %q, want rank 1's line only", out, errw)
	}
	if got := readFile(t, filepath.Join(dir, "err.1")); got != "b:1:1> oops\n" {
		t.Errorf("err.1: %q", got)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "err.[02]")); len(m) != 0 {
		t.Errorf("files of filtered ranks: %v", m)
	}
}

func TestRouterOpenFailureEndsJob(t *testing.T) {
	j, _, _ := routeJob(t, 1, OutputConfig{OutFile: mustPattern(t, "/nonexistent-dir/out.%r")}, false)
	j.route.write(0, 1, []byte("x\n"))
	j.route.write(0, 1, []byte("y\n"))
	j.route.flushAll()
	select {
	case err := <-j.outErr:
		if !strings.Contains(err.Error(), "/nonexistent-dir/out.0") || !strings.Contains(err.Error(), "rank 0") {
			t.Errorf("error does not name file and rank: %v", err)
		}
	default:
		t.Fatal("no error reported")
	}
	select {
	case err := <-j.outErr:
		t.Errorf("reported twice: %v", err)
	default:
	}
}

func TestNoRouterWithoutOptions(t *testing.T) {
	// The plain path (no files, no filter) writes straight to the
	// terminal's output; a prefix pattern alone needs no router either.
	j, _, _ := routeJob(t, 1, OutputConfig{Prepend: mustPattern(t, "%r")}, false)
	if j.route != nil {
		t.Fatal("router set up for a job that needs none")
	}
}
