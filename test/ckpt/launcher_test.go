package ckpt_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gompi/gompi/ckpt/layout"
	"github.com/gompi/gompi/internal/testkit"
)

func TestMaxRestartsResumes(t *testing.T) {
	prefix := t.TempDir()
	r := run(t, append([]string{"-max-restarts", "1"}, heat(prefix, "-crash-at", "60")...)...)
	if got := checksum(t, r); got != baseline(t) {
		t.Fatalf("checksum after a restart %s, uninterrupted %s", got, baseline(t))
	}
	if !strings.Contains(r.Stderr, "restart 1 of 1 from the newest complete checkpoint (epoch 6 in "+prefix+")") {
		t.Fatalf("no restart message naming epoch 6:\n%s", r.Stderr)
	}
	if e := restored(r); e != 6 {
		t.Fatalf("relaunch restored epoch %d, want 6", e)
	}
}

func TestMaxRestartsWithoutCheckpoints(t *testing.T) {
	// No prefix: the relaunch starts from the beginning, says so, and
	// (being a relaunch) does not crash again.
	r := run(t, append([]string{"-max-restarts", "2"}, heat("", "-crash-at", "60")...)...)
	if got := checksum(t, r); got != baseline(t) {
		t.Fatalf("checksum %s, uninterrupted %s", got, baseline(t))
	}
	if !strings.Contains(r.Stderr, "restart 1 of 2 from the beginning (no -ckpoint-prefix)") {
		t.Fatalf("no restart-from-beginning message:\n%s", r.Stderr)
	}
	// Out of restarts: the failure is the job's exit code.
	r = run(t, append([]string{"-max-restarts", "0"}, heat("", "-crash-at", "60")...)...)
	if r.Code == 0 || strings.Contains(r.Stderr, "restart 1") {
		t.Fatalf("crash without restarts: exit %d\n%s", r.Code, r.Stderr)
	}
}

// TestSIGUSR1RequestsCheckpoint: with checkpointing on, SIGUSR1 to
// gompiexec becomes one checkpoint on every rank (heat saves nothing by
// itself with -ckpt-every 0) and never reaches the ranks as a signal
// (which would kill them: heat does not catch it).
func TestSIGUSR1RequestsCheckpoint(t *testing.T) {
	prefix := t.TempDir()
	j := start(t, heat(prefix, "-ckpt-every", "0", "-delay", "10ms", "-steps", "300")...)
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(j.Stdout.String(), "heat: no checkpoint") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	j.Cmd.Process.Signal(syscall.SIGUSR1)
	for {
		if m, err := layout.Newest(prefix); err == nil {
			if m.Epoch != 1 || m.Step <= 0 || m.Step >= 300 {
				t.Fatalf("epoch after SIGUSR1: %+v", m)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no epoch committed after SIGUSR1")
		}
		time.Sleep(20 * time.Millisecond)
	}
	r := j.MustWait(t, 60*time.Second)
	if r.Code != 0 {
		t.Fatalf("exit %d after SIGUSR1:\n%s", r.Code, r.Stderr)
	}
	eps, _ := layout.List(prefix)
	if len(eps) != 1 {
		t.Fatalf("%d epochs after one request, want 1", len(eps))
	}
}

func TestCkptCommand(t *testing.T) {
	prefix := t.TempDir()
	crashed(t, prefix)
	os.MkdirAll(layout.EpochDir(prefix, 9), 0o755) // an interrupted epoch
	r := ckptCmd(t, "list", prefix)
	for _, want := range []string{`(?m)^6 +committed +4 +78\.7 KiB +60 `, `(?m)^9 +incomplete`} {
		if !regexp.MustCompile(want).MatchString(r.Stdout) {
			t.Fatalf("ckpt list lacks %q:\n%s", want, r.Stdout)
		}
	}
	flipByte(t, layout.RankPath(prefix, 6, 3))
	r = ckptCmd(t, "verify", prefix)
	if r.Code != 1 || !strings.Contains(r.Stdout, "epoch 6: BAD") || !strings.Contains(r.Stdout, "rank 3:") ||
		!strings.Contains(r.Stdout, "a restart would resume from epoch 5") {
		t.Fatalf("ckpt verify: exit %d\n%s", r.Code, r.Stdout)
	}
	// rm without epochs removes only leftovers older than the newest
	// committed epoch: the interrupted epoch 9 is newer, so it stays.
	r = ckptCmd(t, "rm", prefix, "6")
	if r.Code != 0 || !strings.Contains(r.Stdout, "removed epoch 6") {
		t.Fatalf("ckpt rm 6: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	r = ckptCmd(t, "rm", "-keep", "2", prefix)
	eps, _ := layout.List(prefix)
	var got []int
	for _, e := range eps {
		got = append(got, e.Epoch)
	}
	if len(got) != 3 || got[0] != 4 || got[1] != 5 || got[2] != 9 {
		t.Fatalf("after rm -keep 2: epochs %v, want [4 5 9]", got)
	}
	r = ckptCmd(t, "rm", prefix, "77")
	if r.Code == 0 || !strings.Contains(r.Stderr, "no epoch 77") {
		t.Fatalf("rm of a missing epoch: exit %d %s", r.Code, r.Stderr)
	}
	r = ckptCmd(t, "list", filepath.Join(prefix, "nope"))
	if r.Code == 0 || !strings.Contains(r.Stderr, "nope") {
		t.Fatalf("list of a missing prefix: exit %d %s", r.Code, r.Stderr)
	}
	r = run(t, "-ckpoint-prefix", prefix, "-ckpoint-num", "3", "-n", "1", "/bin/true")
	if r.Code == 0 || !strings.Contains(r.Stderr, "-ckpoint-num 3") {
		t.Fatalf("-ckpoint-num of a removed epoch: exit %d %s", r.Code, r.Stderr)
	}
}

func TestCkpointNum(t *testing.T) {
	prefix := t.TempDir()
	crashed(t, prefix)
	r := run(t, append([]string{"-ckpoint-num", "4"}, heat(prefix)...)...)
	if e := restored(r); e != 4 {
		t.Fatalf("-ckpoint-num 4 restored %d", e)
	}
	if got := checksum(t, r); got != baseline(t) {
		t.Fatalf("checksum %s, uninterrupted %s", got, baseline(t))
	}
}

// ckptCmd runs `gompiexec ckpt ARGS`.
func ckptCmd(t *testing.T, args ...string) testkit.Result {
	t.Helper()
	j := testkit.NewJob("", "", bin("gompiexec"), append([]string{"ckpt"}, args...)...)
	if err := j.Start(); err != nil {
		t.Fatal(err)
	}
	return j.MustWait(t, 30*time.Second)
}

func flipByte(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x80
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestInterval: -ckpoint-interval alone (heat saves nothing by itself
// with -ckpt-every 0) makes the ranks checkpoint.
func TestInterval(t *testing.T) {
	prefix := t.TempDir()
	r := run(t, append([]string{"-ckpoint-interval", "0.3"}, heat(prefix, "-ckpt-every", "0", "-delay", "10ms")...)...)
	if got := checksum(t, r); got != baseline(t) {
		t.Fatalf("checksum %s, uninterrupted %s", got, baseline(t))
	}
	eps, _ := layout.List(prefix)
	if len(eps) < 2 {
		t.Fatalf("%d epochs in a 1.2 s run with a 0.3 s interval, want several", len(eps))
	}
}
