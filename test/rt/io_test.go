package rt

import (
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gompi/gompi/internal/testkit"
)

var (
	ioBuild    sync.Once
	ioBuildErr error
)

// examples/sharedarray under gompiexec: a 2-D array written by rows from
// every rank with a subarray view and WriteAtAll, verified by rank 0.
func TestSharedArray(t *testing.T) {
	ioBuild.Do(func() { ioBuildErr = testkit.Build(binDir, testkit.Pkg("examples/sharedarray")) })
	if ioBuildErr != nil {
		t.Fatal(ioBuildErr)
	}
	for _, tc := range []struct{ n, rows, cols, cb int }{{1, 64, 48, 0}, {2, 301, 77, 0}, {4, 1000, 256, 2}, {8, 123, 45, 3}} {
		t.Run(strconv.Itoa(tc.n), func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "a.dat")
			args := []string{"-n", strconv.Itoa(tc.n), bin("sharedarray"), "-file", file,
				"-rows", strconv.Itoa(tc.rows), "-cols", strconv.Itoa(tc.cols)}
			if tc.cb > 0 {
				args = append(args, "-cb_nodes", strconv.Itoa(tc.cb))
			}
			out, err := run(t, 2*time.Minute, bin("gompiexec"), args...)
			if err != nil {
				t.Fatalf("%v:\n%s", err, out)
			}
			want := "sharedarray: " + strconv.Itoa(tc.rows) + " x " + strconv.Itoa(tc.cols) + " array written by " + strconv.Itoa(tc.n) + " ranks: ok"
			if !strings.Contains(out, want) {
				t.Fatalf("no %q in:\n%s", want, out)
			}
		})
	}
}
