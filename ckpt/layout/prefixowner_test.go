package layout

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestClaimPrefix: a prefix has one owner job; a second job is refused
// with an error naming the owner, unless the owner is dead (its process
// gone on this node, or its record not refreshed on another), when the
// record is taken over with a message. Nothing locked the prefix: two
// jobs on different nodes numbered, committed and pruned epochs over
// each other's.
func TestClaimPrefix(t *testing.T) {
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	me := ThisProcess("jobB")
	elsewhere := Owner{Job: "jobA", Host: "node7", Node: "other-boot/pid:[1]", Pid: 4242, Start: "1"}
	dead := ThisProcess("jobA")
	dead.Pid, dead.Start = gone.Process.Pid, "12345"
	earlier := elsewhere
	earlier.Launch = "run1"
	relaunch := ThisProcess("jobB")
	relaunch.Launch = "run1"
	for _, tc := range []struct {
		name    string
		me      Owner
		holder  Owner
		refresh bool   // the holder refreshes its record while B waits
		inUse   bool   // B is refused
		says    string // B's message (taken over) or error (refused) contains
	}{
		{"alive on this node", me, ThisProcess("jobA"), false, true, "job jobA, pid " + itoa(os.Getpid())},
		{"dead on this node", me, dead, false, false, "its process is gone"},
		{"stale on another node", me, elsewhere, false, false, "not refreshed for"},
		{"refreshed on another node", me, elsewhere, true, true, "job jobA, pid 4242 on host node7"},
		{"previous launch on another node", relaunch, earlier, true, false, "a previous launch of this run"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := t.TempDir()
			said := ""
			say := func(s string) { said += s }
			a, err := ClaimPrefix(context.Background(), prefix, tc.holder, 300*time.Millisecond, say)
			if err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			if tc.refresh {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						case <-time.After(50 * time.Millisecond):
							if err := a.Refresh(); err != nil {
								t.Error(err)
								return
							}
						}
					}
				}()
			}
			b, err := ClaimPrefix(context.Background(), prefix, tc.me, 300*time.Millisecond, say)
			close(stop)
			wg.Wait()
			// Watching another node's record holds the job's start for up
			// to the stale time: it is said before, not only after.
			if watched := tc.holder.Node != me.Node && tc.me.Launch == ""; watched != strings.Contains(said, "watching it for up to 300ms") {
				t.Fatalf("said %q: watching another node's record announced %v, want %v", said, !watched, watched)
			}
			if tc.inUse {
				if !errors.Is(err, ErrPrefixInUse) || !strings.Contains(err.Error(), tc.says) {
					t.Fatalf("second claim: %v, want ErrPrefixInUse naming %q", err, tc.says)
				}
				return
			}
			if err != nil || !strings.Contains(said, tc.says) || !strings.Contains(said, "jobA") {
				t.Fatalf("second claim: %v, said %q; want it taken over, saying %q", err, said, tc.says)
			}
			// The record is B's now; A, if alive, learns it at its next refresh.
			if err := a.Refresh(); !errors.Is(err, ErrPrefixInUse) || !strings.Contains(err.Error(), "jobB") {
				t.Fatalf("the old owner's refresh: %v, want ErrPrefixInUse naming jobB", err)
			}
			if err := b.Refresh(); err != nil {
				t.Fatal(err)
			}
			b.Release()
			if _, err := os.Stat(filepath.Join(prefix, PrefixOwnerFile)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("record after Release: %v", err)
			}
			a.Release() // not A's: left alone (nothing to remove either)
		})
	}
}

// TestClaimPrefixRecordIsJSON: the record names job, host and pid for
// people reading it too.
func TestClaimPrefixRecordIsJSON(t *testing.T) {
	prefix := t.TempDir()
	l, err := ClaimPrefix(context.Background(), prefix, ThisProcess("j1"), time.Second, func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	b, err := os.ReadFile(filepath.Join(prefix, PrefixOwnerFile))
	if err != nil {
		t.Fatal(err)
	}
	var o Owner
	if err := json.Unmarshal(b, &o); err != nil || o.Job != "j1" || o.Pid != os.Getpid() || o.Seq != 1 {
		t.Fatalf("record %q: %+v %v", b, o, err)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestClaimPrefixBadRecord: a record nobody can parse (empty: a crash
// between the O_EXCL create and its write where links are not supported;
// damaged) is watched like another host's, the wait said before it, and
// taken over once unchanged for the stale time. The empty one was watched
// without a word (the job's start looked hung for a minute), and a
// damaged one failed every start with a bare JSON error naming no way out.
func TestClaimPrefixBadRecord(t *testing.T) {
	for _, tc := range []struct{ name, record string }{
		{"empty", ""},
		{"damaged", `{"job":"3f9c", "host":` + "\x00\x17garbage"},
		{"not json", "hello\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := t.TempDir()
			path := filepath.Join(prefix, PrefixOwnerFile)
			if err := os.WriteFile(path, []byte(tc.record), 0o644); err != nil {
				t.Fatal(err)
			}
			var said []string
			say := func(s string) { said = append(said, s) }
			l, err := ClaimPrefix(context.Background(), prefix, ThisProcess("jobB"), 300*time.Millisecond, say)
			if err != nil {
				t.Fatalf("claim over a %s record: %v, want it taken over after 300ms", tc.name, err)
			}
			defer l.Release()
			if len(said) != 2 || !strings.Contains(said[0], path) || !strings.Contains(said[0], "watching it for up to 300ms") {
				t.Fatalf("said %q: want the wait announced (naming %s) before the takeover", said, path)
			}
			if !strings.Contains(said[1], "took over") || !strings.Contains(said[1], "not refreshed for 300ms") {
				t.Fatalf("said %q: want the takeover said, with why", said)
			}
			if o, _, err := ReadOwner(prefix); err != nil || o.Job != "jobB" {
				t.Fatalf("record after the takeover: %+v %v", o, err)
			}
		})
	}
}
