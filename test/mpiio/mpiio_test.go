// Package mpiio checks gompi's runtime/mpiio against ROMIO, MPICH's MPI-IO,
// as an oracle: progs/viewio.c (built with Debian's mpicc) and
// progs/goviewio (the same program on runtime/mpiio) write the same views;
// the files must be byte-identical, and each program reads and verifies the
// other's file. Both run under gompiexec.
package mpiio

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gompi/gompi/internal/testkit"
)

var (
	binDir   string
	setupErr error
)

func TestMain(m *testing.M) {
	os.Exit(testkit.MainLocalMPICH(m, "gompi-mpiio-", func(dir string) {
		binDir = dir
		setupErr = setup(dir)
	}))
}

func setup(dir string) error {
	if err := testkit.Build(dir, testkit.Pkg("cmd/gompiexec"), testkit.Pkg("cmd/gompi-proxy"),
		testkit.Pkg("test/mpiio/progs/goviewio"), testkit.Pkg("test/mpiio/progs/gosnapkill")); err != nil {
		return err
	}
	if _, err := exec.LookPath("mpicc"); err != nil {
		return fmt.Errorf("mpicc not found (run test/setup.sh as root to install mpich and libmpich-dev)")
	}
	if b, err := exec.Command("mpicc", "-O2", "-o", filepath.Join(dir, "viewio"), "progs/viewio.c").CombinedOutput(); err != nil {
		return fmt.Errorf("mpicc progs/viewio.c: %v\n%s", err, b)
	}
	return nil
}

func needSetup(t *testing.T) {
	t.Helper()
	if setupErr == nil {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatal(setupErr)
	}
	t.Skip(setupErr)
}

// run runs prog (viewio or goviewio) on n ranks under gompiexec.
func run(t *testing.T, n int, prog string, args ...string) error {
	t.Helper()
	full := append([]string{"-n", fmt.Sprint(n), filepath.Join(binDir, prog)}, args...)
	j := testkit.NewJob("", "", filepath.Join(binDir, "gompiexec"), full...)
	if err := j.Start(); err != nil {
		t.Fatal(err)
	}
	r, err := j.Wait(2 * time.Minute)
	if err != nil {
		t.Fatalf("%s %s hung: %q %q", prog, strings.Join(args, " "), r.Stdout, r.Stderr)
	}
	if r.Code != 0 {
		return fmt.Errorf("%s %s on %d ranks: exit %d\n%s%s", prog, strings.Join(args, " "), n, r.Code, r.Stdout, r.Stderr)
	}
	return nil
}

// progs are the programs compared: ROMIO's first, the reference.
var progs = []string{"viewio", "goviewio"}

// views are the file views both programs know (see progs/viewio.c), each
// with small block sizes so that blocks of different ranks share file
// system pages, and sizes not multiples of one another.
var views = []string{
	"contig:1000",
	"contig:0",
	"vector:3,100,4",
	"vector:17,1,3",
	"hvector:5,333,2",
	"indexed:7,13,3",
	"subarray-c:10,13",
	"subarray-f:10,13",
	"subarray-c:64,33",
	"struct:5,3,4",
}

// TestInterop writes every view with each program, collectively and
// independently, on 1 to 4 ranks (one run writes every view): all files of
// a view must be byte-identical to ROMIO's collective one, and each program
// reads and verifies every program's files, collectively the collectively
// written ones and independently the others.
func TestInterop(t *testing.T) {
	needSetup(t)
	ranks := []int{1, 2, 3, 4}
	if testing.Short() {
		ranks = []int{2, 4}
	}
	for _, n := range ranks {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			dir := t.TempDir()
			file := func(prog, mode string, v int) string {
				return filepath.Join(dir, fmt.Sprintf("%s-%s-%d", prog, mode, v))
			}
			pairs := func(prog, mode string) []string {
				var args []string
				if mode == "indep" {
					args = append(args, "-i")
				}
				for i, v := range views {
					args = append(args, file(prog, mode, i), v)
				}
				return args
			}
			// A failed run is an error; the other combinations are still
			// compared and read.
			failed := map[string]bool{}
			for _, prog := range progs {
				for _, mode := range []string{"coll", "indep"} {
					if err := run(t, n, prog, pairs(prog, mode)...); err != nil {
						t.Error(err)
						failed[prog+" "+mode] = true
					}
				}
			}
			if failed[progs[0]+" coll"] {
				return
			}
			for i, v := range views {
				want, err := os.ReadFile(file(progs[0], "coll", i))
				if err != nil {
					t.Fatal(err)
				}
				for _, prog := range progs {
					for _, mode := range []string{"coll", "indep"} {
						if failed[prog+" "+mode] {
							continue
						}
						got, err := os.ReadFile(file(prog, mode, i))
						if err != nil {
							t.Fatal(err)
						}
						if off := firstDiff(got, want); off >= 0 {
							t.Errorf("%s: %s %s: %d bytes, ROMIO's collective %d; first difference at offset %d",
								v, prog, mode, len(got), len(want), off)
						}
					}
				}
			}
			for _, reader := range progs {
				for _, writer := range progs {
					for _, mode := range []string{"coll", "indep"} {
						if failed[writer+" "+mode] {
							continue
						}
						if err := run(t, n, reader, append([]string{"-r"}, pairs(writer, mode)...)...); err != nil {
							t.Errorf("%s reading %s's files: %v", reader, writer, err)
						}
					}
				}
			}
		})
	}
}

// TestOracleCatchesDifferences guards the comparison itself: a file that
// differs from ROMIO's in one byte is reported, and the oracle's reader
// rejects a file with one wrong byte.
func TestOracleCatchesDifferences(t *testing.T) {
	needSetup(t)
	dir := t.TempDir()
	f := filepath.Join(dir, "f")
	if err := run(t, 3, "viewio", f, "vector:3,100,4"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	c := bytes.Clone(b)
	c[700] ^= 1
	if off := firstDiff(c, b); off != 700 {
		t.Fatalf("firstDiff = %d, want 700", off)
	}
	if err := os.WriteFile(f, c, 0o644); err != nil {
		t.Fatal(err)
	}
	err = run(t, 3, "viewio", "-r", f, "vector:3,100,4")
	if err == nil || !strings.Contains(err.Error(), "view byte") {
		t.Fatalf("viewio -r accepted a corrupted file: %v", err)
	}
}

// firstDiff is the first offset where a and b differ (a length difference
// counts at the shorter length), or -1.
func firstDiff(a, b []byte) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return n
	}
	return -1
}
