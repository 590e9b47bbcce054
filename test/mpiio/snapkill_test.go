package mpiio

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gompi/gompi/internal/testkit"
	"github.com/gompi/gompi/runtime/mpiio/journal"
)

// A job whose rank 0 is killed (SIGKILL) the moment its cached collective
// write returned, through gompi_cache_snapshot (progs/gosnapkill):
// gompiexec ends the job (its proxy kills the ranks' process group), the
// snapshot writers finish anyway and commit their records, and `gompiexec
// -io-cache DIR` replays them before the next job: every rank's
// acknowledged bytes are in the file.
func TestSnapshotWriteSurvivesKilledJob(t *testing.T) {
	needSetup(t)
	dir := t.TempDir()
	shm, err := os.MkdirTemp("/dev/shm", "gompi-snapkill-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(shm) })
	path, cdir := filepath.Join(dir, "shared"), filepath.Join(shm, "cache")
	const np, per = 2, 48 << 20
	gompiexec := filepath.Join(binDir, "gompiexec")
	j := testkit.NewJob("", "", gompiexec, "-n", fmt.Sprint(np), filepath.Join(binDir, "gosnapkill"), path, cdir, fmt.Sprint(per))
	if err := j.Start(); err != nil {
		t.Fatal(err)
	}
	r, err := j.Wait(2 * time.Minute)
	if err != nil {
		t.Fatalf("job hung: %q %q", r.Stdout, r.Stderr)
	}
	if r.Code == 0 {
		t.Fatalf("job with a killed rank exited 0: %q", r.Stderr)
	}
	js, _ := filepath.Glob(filepath.Join(cdir, "*"+journal.JournalSuffix))
	if len(js) != np {
		t.Fatalf("journals after the kill: %v (stderr %q)", js, r.Stderr)
	}
	// The writers outlive the job; the launcher's replay leaves a journal
	// to a live writer, so wait for them as a user's next job would have.
	for _, jp := range js {
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
			f, err := os.Open(jp)
			if err != nil {
				t.Fatal(err)
			}
			err = journal.Lock(f)
			f.Close()
			if err == nil {
				break
			}
			if !errors.Is(err, journal.ErrInUse) || time.Now().After(deadline) {
				t.Fatalf("journal %s: %v", jp, err)
			}
		}
	}
	j = testkit.NewJob("", "", gompiexec, "-io-cache", cdir, "-n", "1", "true")
	if err := j.Start(); err != nil {
		t.Fatal(err)
	}
	if r, err := j.Wait(time.Minute); err != nil || r.Code != 0 {
		t.Fatalf("replaying job: exit %d (%v): %q", r.Code, err, r.Stderr)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != np*per {
		t.Fatalf("file has %d bytes after recovery, want %d", len(b), np*per)
	}
	for rk := 0; rk < np; rk++ {
		for i := int64(0); i < per; i += 4096 {
			if want := byte(int64(rk)*37 + i/4096 + 1); b[int64(rk)*per+i] != want {
				t.Fatalf("rank %d's acknowledged byte %d is %d after recovery, want %d", rk, i, b[int64(rk)*per+i], want)
			}
		}
	}
	if left, _ := filepath.Glob(filepath.Join(cdir, "*"+journal.JournalSuffix)); len(left) != 0 {
		t.Fatalf("journals left after the replay: %v", strings.Join(left, " "))
	}
}
