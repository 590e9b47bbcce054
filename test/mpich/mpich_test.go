// Package mpich runs small C programs built with Debian's MPICH under
// gompiexec (or, with GOMPI_MPIEXEC, any mpiexec) and checks their output.
package mpich

import (
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
	progDir  string
	mpiexec  []string
	setupErr error
)

func TestMain(m *testing.M) {
	os.Exit(testkit.MainLocalMPICH(m, "gompi-mpich-", func(dir string) {
		progDir = dir
		setupErr = setup(dir)
	}))
}

func setup(dir string) error {
	if _, err := exec.LookPath("mpicc"); err != nil {
		return fmt.Errorf("mpicc not found (run test/setup.sh as root to install mpich and libmpich-dev)")
	}
	srcs, _ := filepath.Glob("progs/*.c")
	for _, src := range srcs {
		out := filepath.Join(dir, strings.TrimSuffix(filepath.Base(src), ".c"))
		cc := []string{"mpicc", "-O2", "-o", out, src}
		if filepath.Base(src) == "pmi2.c" { // Slurm's PMI-2 client library, not MPICH
			cc = []string{"cc", "-O2", "-o", out, src, "-lpmi2"}
		}
		if b, err := exec.Command(cc[0], cc[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("mpicc %s: %v\n%s", src, err, b)
		}
	}
	if err := testkit.Build(dir, testkit.Pkg("cmd/gompi-nameserver")); err != nil {
		return err
	}
	if m := os.Getenv("GOMPI_MPIEXEC"); m != "" {
		mpiexec = strings.Fields(m)
		return nil
	}
	if err := testkit.Build(dir, testkit.Pkg("cmd/gompiexec"), testkit.Pkg("cmd/gompi-proxy")); err != nil {
		return err
	}
	mpiexec = []string{filepath.Join(dir, "gompiexec")}
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

type run struct {
	out, err string
	code     int
}

func launch(t *testing.T, args ...string) run {
	t.Helper()
	j := testkit.NewJob("", "", mpiexec[0], append(mpiexec[1:], args...)...)
	if err := j.Start(); err != nil {
		t.Fatal(err)
	}
	r, err := j.Wait(90 * time.Second)
	if err != nil {
		t.Fatalf("%v hung; output %q %q", args, r.Stdout, r.Stderr)
	}
	return run{r.Stdout, r.Stderr, r.Code}
}

func prog(name string) string { return filepath.Join(progDir, name) }

var modes = []struct {
	name string
	args []string
}{{"pmi-fd", nil}, {"pmi-port", []string{"-pmi-port"}}}

func TestMPICHPrograms(t *testing.T) {
	needSetup(t)
	for _, mode := range modes {
		for _, n := range []int{1, 2, 4, 8} {
			ns := fmt.Sprint(n)
			args := func(p string) []string { return append(append([]string{}, mode.args...), "-n", ns, prog(p)) }
			t.Run(fmt.Sprintf("%s/n=%d", mode.name, n), func(t *testing.T) {
				r := launch(t, args("ranks")...)
				if r.code != 0 {
					t.Fatalf("ranks: exit %d\n%s%s", r.code, r.out, r.err)
				}
				// With PMI_FD alone a misconfigured launch makes every rank
				// "rank 0 of 1": check each rank and size really appear.
				for i := 0; i < n; i++ {
					if !strings.Contains(r.out, fmt.Sprintf("rank %d of %d on ", i, n)) {
						t.Fatalf("ranks: rank %d of %d missing:\n%s", i, n, r.out)
					}
				}
				r = launch(t, args("ring")...)
				if r.code != 0 || !strings.Contains(r.out, fmt.Sprintf("rank 0 of %d on", n)) || !strings.Contains(r.out, fmt.Sprintf("tok %d\n", n)) {
					t.Fatalf("ring: exit %d\n%s%s", r.code, r.out, r.err)
				}
				r = launch(t, args("allreduce")...)
				if r.code != 0 || !strings.Contains(r.out, fmt.Sprintf("allreduce ok size %d", n)) {
					t.Fatalf("allreduce: exit %d\n%s%s", r.code, r.out, r.err)
				}
				r = launch(t, args("abort")...)
				if r.code != 7 || !strings.Contains(r.out+r.err, "MPI_Abort") {
					t.Fatalf("abort: exit %d, want 7\n%s%s", r.code, r.out, r.err)
				}
			})
		}
	}
}

func TestMPICHMPMD(t *testing.T) {
	needSetup(t)
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			args := append(append([]string{}, mode.args...), "-n", "1", prog("mpmd"), ":", "-n", "3", prog("mpmd"))
			r := launch(t, args...)
			if r.code != 0 {
				t.Fatalf("exit %d\n%s%s", r.code, r.out, r.err)
			}
			for rank, app := range []int{0, 1, 1, 1} {
				if !strings.Contains(r.out, fmt.Sprintf("rank %d appnum %d universe", rank, app)) {
					t.Fatalf("rank %d appnum %d missing:\n%s", rank, app, r.out)
				}
			}
		})
	}
}

// TestGoClientUnderHydraAndGompi runs the Go PMI client example under
// Debian's mpiexec.hydra and under gompiexec; both must agree on rank, size
// and a fenced exchange.
func TestGoClientUnderHydraAndGompi(t *testing.T) {
	needSetup(t)
	hello := filepath.Join(progDir, "gohello")
	if b, err := exec.Command("go", "build", "-o", hello, "github.com/gompi/gompi/examples/hello").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, b)
	}
	launchers := [][]string{{filepath.Join(progDir, "gompiexec")}, {"mpiexec.hydra"}}
	if os.Getenv("GOMPI_MPIEXEC") != "" {
		launchers = [][]string{mpiexec, {"mpiexec.hydra"}}
	}
	for _, l := range launchers {
		if _, err := exec.LookPath(l[0]); err != nil {
			t.Fatalf("%s: %v", l[0], err)
		}
		saved := mpiexec
		mpiexec = l
		r := launch(t, "-n", "4", hello)
		mpiexec = saved
		if r.code != 0 {
			t.Fatalf("%s: exit %d\n%s%s", l[0], r.code, r.out, r.err)
		}
		for i := 0; i < 4; i++ {
			want := fmt.Sprintf("hello from rank %d of 4 (appnum 0) at ", i)
			if !strings.Contains(r.out, want) || !strings.Contains(r.out, fmt.Sprintf("; rank %d is at ", (i+1)%4)) {
				t.Fatalf("%s: rank %d line missing:\n%s", l[0], i, r.out)
			}
		}
	}
}

// TestPMI2Client runs Slurm's libpmi2, a real PMI-2 wire client, under
// gompiexec in both PMI_FD and PMI_PORT modes.
func TestPMI2Client(t *testing.T) {
	needSetup(t)
	for _, mode := range modes {
		for _, n := range []int{1, 3} {
			r := launch(t, append(append([]string{}, mode.args...), "-n", fmt.Sprint(n), prog("pmi2"))...)
			if r.code != 0 {
				t.Fatalf("%s n=%d: exit %d\n%s%s", mode.name, n, r.code, r.out, r.err)
			}
			for i := 0; i < n; i++ {
				if !strings.Contains(r.out, fmt.Sprintf("pmi2 rank %d of %d appnum 0 mapping (vector,(0,1,%d)) ok", i, n, n)) {
					t.Fatalf("%s n=%d: rank %d missing:\n%s", mode.name, n, i, r.out)
				}
			}
		}
	}
}

// TestAcrossProxies starts one proxy per named host (the fork launcher runs
// them all here), so every PMI fence is aggregated across proxies by the
// launcher, and MPICH sees a multi-node process mapping.
func TestAcrossProxies(t *testing.T) {
	needSetup(t)
	if os.Getenv("GOMPI_MPIEXEC") != "" {
		t.Skip("gompiexec-specific: -launcher fork with named hosts")
	}
	for _, mode := range modes {
		args := append(append([]string{"-launcher", "fork", "-hosts", "a:2,b:2,c:1"}, mode.args...), "-n", "5")
		r := launch(t, append(args, prog("ring"))...)
		if r.code != 0 || strings.Count(r.out, "tok 5\n") != 2 {
			t.Fatalf("%s ring: exit %d\n%s%s", mode.name, r.code, r.out, r.err)
		}
		r = launch(t, append(args, prog("pmi2"))...)
		if r.code != 0 || strings.Count(r.out, "mapping (vector,(0,2,2),(2,1,1)) ok") != 5 {
			t.Fatalf("%s pmi2: exit %d\n%s%s", mode.name, r.code, r.out, r.err)
		}
		// Through a launch tree (-fanout 2 over six hosts: proxies start
		// proxies), fences are folded at every level on the way up.
		args = append(append([]string{"-launcher", "fork", "-fanout", "2", "-hosts", "a:2,b,c,d,e,f"}, mode.args...), "-n", "7")
		r = launch(t, append(args, prog("ring"))...)
		if r.code != 0 || strings.Count(r.out, "tok 7\n") != 2 {
			t.Fatalf("%s ring over a tree: exit %d\n%s%s", mode.name, r.code, r.out, r.err)
		}
		r = launch(t, append(args, prog("allreduce"))...)
		if r.code != 0 || !strings.Contains(r.out, "allreduce ok size 7") {
			t.Fatalf("%s allreduce over a tree: exit %d\n%s%s", mode.name, r.code, r.out, r.err)
		}
	}
}

// TestMPICHUniverseSize: -usize decides what MPI_UNIVERSE_SIZE says, as
// under Hydra (GOMPI_MPIEXEC=mpiexec.hydra runs the same cases there):
// INFINITE, the default, leaves it unset; SYSTEM is the slots of the hosts
// that get ranks (-ppn's count per host when given).
func TestMPICHUniverseSize(t *testing.T) {
	needSetup(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "universe -1\n"},
		{[]string{"-usize", "INFINITE"}, "universe -1\n"},
		{[]string{"-usize", "SYSTEM", "-hosts", "localhost:5"}, "universe 5\n"},
		{[]string{"-usize", "SYSTEM", "-hosts", "localhost:5", "-ppn", "3"}, "universe 3\n"},
		{[]string{"-usize", "7"}, "universe 7\n"},
		// Over several hosts, Hydra counts the slots of the hosts that
		// get ranks (its proxies' core counts), not of every host listed:
		// both ranks fit on a's one slot and b's four.
		{[]string{"-launcher", "fork", "-usize", "SYSTEM", "-hosts", "a:1,b:4,c:2"}, "universe 5\n"},
		{[]string{"-launcher", "fork", "-usize", "SYSTEM", "-hosts", "a:3,b:1,c", "-ppn", "2"}, "universe 2\n"},
		// A host listed again after another is a further entry (Hydra's
		// node): the entries that get ranks count, here a's first and b.
		{[]string{"-launcher", "fork", "-usize", "SYSTEM", "-hosts", "a:1,b:4,a:3"}, "universe 5\n"},
		{[]string{"-launcher", "fork", "-usize", "SYSTEM", "-hosts", "a,b,a:3", "-ppn", "1"}, "universe 2\n"},
	} {
		r := launch(t, append(tc.args, "-n", "2", prog("mpmd"))...)
		if r.code != 0 || strings.Count(r.out, tc.want) != 2 {
			t.Errorf("%v: exit %d, want %q from both ranks\n%s%s", tc.args, r.code, tc.want, r.out, r.err)
		}
	}
}
