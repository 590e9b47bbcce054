package rt

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gompi/gompi/internal/testkit"
)

// The collectives' programs and the examples that use them, built once
// into binDir on first use.
var (
	collBuild    sync.Once
	collBuildErr error
)

func collBins(t *testing.T) {
	t.Helper()
	collBuild.Do(func() {
		collBuildErr = testkit.Build(binDir, testkit.Pkg("test/rt/progs/collprog"),
			testkit.Pkg("examples/tutorial"), testkit.Pkg("examples/ringpipe"))
	})
	if collBuildErr != nil {
		t.Fatal(collBuildErr)
	}
}

// Every collective, small and large (across every algorithm switch), with
// checked results, as real processes (8 ranks oversubscribe 2 cores).
func TestCollectives(t *testing.T) {
	collBins(t)
	for _, n := range []int{1, 2, 3, 4, 8} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			out, err := run(t, 3*time.Minute, bin("gompiexec"), "-n", strconv.Itoa(n), bin("collprog"), "check")
			if err != nil {
				t.Fatalf("%v:\n%s", err, out)
			}
			wantOK(t, out, n)
		})
	}
}

func TestCollectivesHydra(t *testing.T) {
	hydra, err := exec.LookPath("mpiexec.hydra")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("mpiexec.hydra not installed (test/setup.sh installs Debian's mpich)")
		}
		t.Skip("mpiexec.hydra not installed (test/setup.sh installs Debian's mpich): skipping")
	}
	collBins(t)
	out, err := run(t, 3*time.Minute, hydra, "-n", "5", bin("collprog"), "check")
	if err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	wantOK(t, out, 5)
}

func TestTutorialExample(t *testing.T) {
	collBins(t)
	for _, n := range []int{1, 3, 4} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			out, err := run(t, 2*time.Minute, bin("gompiexec"), "-n", strconv.Itoa(n), bin("tutorial"), "-rows", "1001", "-cols", "33")
			if err != nil {
				t.Fatalf("%v:\n%s", err, out)
			}
			for _, step := range []string{"point-to-point of a map", "broadcast of a value", "scatter of values",
				"gather of values", "broadcast of an array", "scatter of matrix rows, gather of row sums"} {
				if !strings.Contains(out, "tutorial: "+step+": ok\n") {
					t.Fatalf("step %q not ok:\n%s", step, out)
				}
			}
			if want := fmt.Sprintf("1001×33 matrix over %d ranks: 1001 row sums checked", n); !strings.Contains(out, want) {
				t.Fatalf("no %q:\n%s", want, out)
			}
		})
	}
}

// ringpipe's summary must match totals computed here from its input files.
func TestRingpipeExample(t *testing.T) {
	collBins(t)
	for _, n := range []int{1, 2, 4, 8} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			dir := t.TempDir()
			out, err := run(t, 3*time.Minute, bin("gompiexec"), "-n", strconv.Itoa(n), bin("ringpipe"),
				"-dir", dir, "-gen", "300", "-maxrec", "5000", "-chunk", "20000", "-inflight", "8")
			if err != nil {
				t.Fatalf("%v:\n%s", err, out)
			}
			var records, bytes int64
			var sum uint64
			tab := crc32.MakeTable(crc32.Castagnoli)
			for r := 0; r < n; r++ {
				f, err := os.Open(filepath.Join(dir, fmt.Sprintf("rank-%d.dat", r)))
				if err != nil {
					t.Fatal(err)
				}
				br := bufio.NewReader(f)
				var l [4]byte
				for {
					if _, err := io.ReadFull(br, l[:]); err == io.EOF {
						break
					} else if err != nil {
						t.Fatal(err)
					}
					rec := make([]byte, binary.LittleEndian.Uint32(l[:]))
					if _, err := io.ReadFull(br, rec); err != nil {
						t.Fatal(err)
					}
					records++
					bytes += int64(len(rec))
					sum += uint64(crc32.Checksum(rec, tab))
				}
				f.Close()
			}
			if records != int64(300*n) {
				t.Fatalf("%d records in the files", records)
			}
			want := fmt.Sprintf("ringpipe: %d ranks, %d records, %d bytes, checksum %016x, every rank saw every record: ok\n",
				n, records, bytes, sum)
			if !strings.Contains(out, want) {
				t.Fatalf("want %q in:\n%s", want, out)
			}
		})
	}
}
