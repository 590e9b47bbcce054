package mpiio_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	mpi "github.com/gompi/gompi/runtime"
	"github.com/gompi/gompi/runtime/mpiio"
)

// runRanks runs body on n in-process ranks and fails on any error.
func runRanks(t *testing.T, n int, body func(c *mpi.Comm) error) {
	t.Helper()
	job := mpi.NewMemJob(n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			c, err := mpi.InitConfig(context.Background(), mpi.Config{Bootstrap: job.Rank(r), Host: "127.0.0.1"})
			if err != nil {
				errs[r] = err
				return
			}
			errs[r] = body(c)
			if errs[r] != nil {
				c.Abort(1)
				return
			}
			c.Finalize()
		}(r)
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

func TestSmokeWriteAll(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	const n = 4
	runRanks(t, n, func(c *mpi.Comm) error {
		f, err := mpiio.Open(context.Background(), c, path, mpiio.ModeCreate|mpiio.ModeRdwr, mpiio.Hints{"cb_nodes": "2", "cb_buffer_size": "8192", "striping_unit": "4096"})
		if err != nil {
			return err
		}
		ft, _ := mpi.Contiguous(10, mpi.Byte)
		ft, _ = mpi.Resized(ft, 0, 10*n)
		if err := f.SetView(int64(10*c.Rank()), mpi.Byte, ft); err != nil {
			return err
		}
		buf := bytes.Repeat([]byte{byte('a' + c.Rank())}, 10000)
		if _, err := f.WriteAtAll(buf, 0); err != nil {
			return err
		}
		got := make([]byte, 10000)
		if _, err := f.ReadAtAll(got, 0); err != nil {
			return err
		}
		if !bytes.Equal(got, buf) {
			return fmt.Errorf("read back differs")
		}
		return f.Close()
	})
	b, _ := os.ReadFile(path)
	if len(b) != 40000 {
		t.Fatalf("size %d", len(b))
	}
	for i, x := range b {
		if want := byte('a' + (i/10)%n); x != want {
			t.Fatalf("byte %d = %c want %c", i, x, want)
		}
	}
	_ = errors.Is
	_ = io.EOF
}
