package proxy

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The reaper delivers each child's status, in the group or not, including
// one that ended before it was registered.
func TestReaper(t *testing.T) {
	r := newReaper()
	defer r.close()
	lead := exec.Command("sleep", "30")
	lead.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := lead.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := lead.Process.Pid
	r.setGroup(pgid)
	start := func(args []string, group bool) int {
		c := exec.Command(args[0], args[1:]...)
		if group {
			c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: pgid}
		}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		pid := c.Process.Pid
		c.Process.Release()
		return pid
	}
	quick := start([]string{"sh", "-c", "exit 3"}, true)
	time.Sleep(100 * time.Millisecond) // ends before it is registered
	inGroup := r.register(quick)
	outside := start([]string{"sh", "-c", "kill -9 $$"}, false) // found by the per-second scan
	outCh := r.register(outside)
	for _, c := range []struct {
		ch        <-chan reaped
		code, sig int
	}{{inGroup, 3, 0}, {outCh, 0, 9}} {
		select {
		case st := <-c.ch:
			if code, sig := statusOf(st.ws); code != c.code || sig != c.sig || st.at == 0 {
				t.Errorf("status %d/%d, want %d/%d", code, sig, c.code, c.sig)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("status never delivered")
		}
	}
	if m := groupMembers(pgid); len(m) != 0 {
		t.Errorf("group members besides the leader: %v", m)
	}
	lead.Process.Kill()
	lead.Wait()
}

func TestStartFailureNamesLimit(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{syscall.EMFILE, "RLIMIT_NOFILE"},
		{syscall.EAGAIN, "RLIMIT_NPROC"},
		{syscall.ENOENT, "no such file"},
	} {
		msg := startFailure(7, "nodeA", 3, 10, &exec.Error{Name: "x", Err: c.err})
		if !strings.Contains(msg, "rank 7 on nodeA could not start") || !strings.Contains(msg, c.want) || !strings.Contains(msg, "3 of 10 ranks") {
			t.Errorf("%v: %s", c.err, msg)
		}
	}
}

// The guard leads a group of its own, outlives the signals the proxy sends
// the group, and when its pipe ends becomes "path -guard job dirs..." (here
// a script that records its arguments, then kills the group as GuardMain
// does); when path cannot be run it kills the group itself.
func TestGuard(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name   string
		script string // the stand-in for gompi-proxy; "" means missing
	}{
		{"becomes the proxy's guard", "#!/bin/sh\necho \"$@\" > " + dir + "/args\nkill -KILL 0\n"},
		{"proxy executable gone", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := dir + "/gompi-proxy-missing"
			if c.script != "" {
				path = dir + "/gompi-proxy"
				if err := os.WriteFile(path, []byte(c.script), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			pid, w, err := startGuard(path, "job1", []string{"/d1", "/d 2"})
			if err != nil {
				t.Fatal(err)
			}
			if g, _ := syscall.Getpgid(pid); g != pid {
				t.Fatalf("guard %d leads group %d", pid, g)
			}
			member := exec.Command("sleep", "60")
			member.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: pid}
			if err := member.Start(); err != nil {
				t.Fatal(err)
			}
			memberDone := make(chan error, 1)
			go func() { memberDone <- member.Wait() }()
			// Forwarded signals reach the group; the guard stays.
			time.Sleep(100 * time.Millisecond) // the shell has set its traps
			syscall.Kill(pid, syscall.SIGTERM)
			syscall.Kill(pid, syscall.SIGINT)
			time.Sleep(100 * time.Millisecond)
			if err := syscall.Kill(pid, 0); err != nil {
				t.Fatalf("guard gone after SIGTERM and SIGINT: %v", err)
			}
			var ws syscall.WaitStatus
			if p, _ := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); p == pid {
				t.Fatalf("guard exited after SIGTERM and SIGINT: %v", ws)
			}
			w.Close() // the proxy is gone
			select {
			case <-memberDone:
			case <-time.After(10 * time.Second):
				member.Process.Kill()
				t.Fatal("the group's member outlived the proxy")
			}
			if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil || ws.Signal() != syscall.SIGKILL {
				t.Errorf("guard: %v %v, want killed by SIGKILL", ws, err)
			}
			if c.script != "" {
				b, err := os.ReadFile(dir + "/args")
				if got := strings.TrimSpace(string(b)); err != nil || got != GuardArg+" job1 /d1 /d 2" {
					t.Errorf("guard ran the proxy with %q (%v)", got, err)
				}
			}
		})
	}
}
