package mpiio

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gompi/gompi/internal/testkit"
	"github.com/gompi/gompi/runtime/mpiio/journal"
)

// gompiexec -io-cache DIR: before any rank starts, every host's proxy
// writes the extents a killed job's node-local cache acknowledged but had
// not flushed, so the job's first read sees them (here the rank is cat).
// A journal a live process holds is left to it (journal's tests).
func TestGompiexecReplaysCache(t *testing.T) {
	if _, err := os.Stat(filepath.Join(binDir, "gompi-proxy")); err != nil {
		t.Fatalf("binaries not built: %v", setupErr)
	}
	dir := t.TempDir()
	target, cdir := filepath.Join(dir, "shared"), filepath.Join(dir, "cache")
	os.Mkdir(cdir, 0o700)
	os.WriteFile(target, []byte("0123456789"), 0o644)
	data := []byte("abcXY")
	// What a rank killed after two acknowledged writes leaves behind.
	jnl := append(journal.Header(target),
		journal.ExtentRecord(journal.Extent{Seq: 1, FileOff: 2, Len: 3, DataOff: 0, CRC: journal.Checksum(data[:3])})...)
	jnl = append(jnl, journal.ExtentRecord(journal.Extent{Seq: 2, FileOff: 8, Len: 2, DataOff: 3, CRC: journal.Checksum(data[3:])})...)
	os.WriteFile(filepath.Join(cdir, "k-r0"+journal.JournalSuffix), jnl, 0o600)
	os.WriteFile(filepath.Join(cdir, "k-r0"+journal.DataSuffix), data, 0o600)

	gompiexec := filepath.Join(binDir, "gompiexec")
	j := testkit.NewJob("", "", gompiexec, "-io-cache", cdir, "-n", "1", "cat", target)
	if err := j.Start(); err != nil {
		t.Fatal(err)
	}
	r, err := j.Wait(time.Minute)
	if err != nil || r.Code != 0 {
		t.Fatalf("exit %d (%v): %q %q", r.Code, err, r.Stdout, r.Stderr)
	}
	if r.Stdout != "01abc567XY" {
		t.Fatalf("the rank read %q, want the replayed 01abc567XY", r.Stdout)
	}
	if _, err := os.Stat(filepath.Join(cdir, "k-r0"+journal.JournalSuffix)); !os.IsNotExist(err) {
		t.Fatalf("journal still there after replay: %v", err)
	}

	// A corrupt cache stops the job before it starts, naming the host
	// and the directory; a relative directory is a usage error.
	os.WriteFile(filepath.Join(cdir, "k-r0"+journal.JournalSuffix), jnl, 0o600)
	os.WriteFile(filepath.Join(cdir, "k-r0"+journal.DataSuffix), []byte("zzzzz"), 0o600)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-io-cache", cdir, "-n", "1", "true"}, "replaying the MPI-IO cache " + cdir},
		{[]string{"-io-cache", "cache", "-n", "1", "true"}, `-io-cache "cache": need an absolute directory`},
	} {
		j := testkit.NewJob("", "", gompiexec, tc.args...)
		if err := j.Start(); err != nil {
			t.Fatal(err)
		}
		r, err := j.Wait(time.Minute)
		if err != nil || r.Code == 0 || !strings.Contains(r.Stderr, tc.want) {
			t.Fatalf("%v: exit %d (%v), want an error with %q: %q", tc.args, r.Code, err, tc.want, r.Stderr)
		}
	}
	if b, _ := os.ReadFile(target); string(b) != "01abc567XY" {
		t.Fatalf("corrupt replay changed the file: %q", b)
	}
}
