package proxy

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gompi/gompi/internal/control"
	"github.com/gompi/gompi/internal/launcher"
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
// the group, learns its job on its pipe (tellGuard: a directory with a
// space stays one argument, one with a newline is left out), and when the
// pipe ends becomes "path -guard job dirs..." (here a script that records
// its arguments, then kills the group as GuardMain does); when path cannot
// be run it kills the group itself. Told nothing (the proxy died before
// its job came), it becomes "path -guard".
func TestGuard(t *testing.T) {
	dir := t.TempDir()
	record := "#!/bin/sh\necho \"$#:$@\" > " + dir + "/args\nkill -KILL 0\n"
	for _, c := range []struct {
		name   string
		script string // the stand-in for gompi-proxy; "" means missing
		untold bool   // the pipe ends before the job is told
		want   string // "argc:args" it records
	}{
		{"becomes the proxy's guard", record, false, "4:" + GuardArg + " job1 /d1 /d 2"},
		{"proxy gone before its job", record, true, "1:" + GuardArg},
		{"proxy executable gone", "", false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := dir + "/gompi-proxy-missing"
			if c.script != "" {
				path = dir + "/gompi-proxy"
				if err := os.WriteFile(path, []byte(c.script), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			pid, w, err := startGuard(path)
			if err != nil {
				t.Fatal(err)
			}
			if !c.untold {
				if err := tellGuard(w, "job1", []string{"/d1", "/d 2", "/new\nline"}); err != nil {
					t.Fatal(err)
				}
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
				if got := strings.TrimSpace(string(b)); err != nil || got != c.want {
					t.Errorf("guard ran the proxy with %q (%v), want %q", got, err, c.want)
				}
				os.Remove(dir + "/args")
			}
		})
	}
}

// A guard started before its job (StartGuard) that no job adopts is ended
// and reaped by Abandon, and so is the one Run was given when the job is
// refused before any rank starts: nothing of it is left, and it never
// became "path -guard" (a second program's start).
func TestStartedGuardAbandoned(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/gompi-proxy"
	if err := os.WriteFile(path, []byte("#!/bin/sh\ntouch "+dir+"/ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	gone := func(g *Guard) {
		t.Helper()
		pid, _, err := g.wait()
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("guard %d still exists after Abandon", pid)
		}
		if _, err := os.Stat(dir + "/ran"); err == nil {
			t.Error("an abandoned guard ran the proxy's guard mode")
		}
	}
	g := StartGuard(path)
	g.Abandon()
	gone(g)

	// Refused job: wrong protocol version.
	g = StartGuard(path)
	errc, sess, st := runOverPipe(t, Config{Guard: path, Started: g})
	defer sess.Close()
	job := &control.Job{Version: control.Version + 100, JobID: "refused", Host: "h", Size: 1,
		Apps: []control.App{{Argv: []string{"/bin/true"}, Wdir: "/"}}, Ranks: []control.RankSpec{{Rank: 0}}, KVSName: "kvs"}
	// Send may report the session shut: Run can read the job, refuse it and
	// close the session before yamux has told this side its frame went out.
	// Run's error below is what counts.
	sendErr := control.NewConn(st).Send(control.Msg{T: control.MsgJob, Job: job})
	select {
	case err := <-errc:
		if err == nil || !strings.Contains(err.Error(), "protocol version") {
			t.Fatalf("Run: %v (job sent: %v), want the version refused", err, sendErr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	gone(g)
}

// The guard (forked without os/exec) holds only its pipe and /dev/null:
// not the session (stdout), not the connect-back address and secret, not
// any other descriptor of the proxy's.
func TestGuardInherits(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(launcher.ConnectSecretEnv, "00112233445566778899aabbccddeeff")
	t.Setenv(launcher.ConnectEnv, "127.0.0.1:1")
	open, err := os.Open(dir) // a descriptor of the proxy's
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	script := "#!/bin/sh\nenv > " + dir + "/env\no=$(readlink /proc/$$/fd/1 /proc/$$/fd/2); f=$(readlink /proc/$$/fd/*)\necho \"$o\" > " + dir + "/out\necho \"$f\" > " + dir + "/fds\nkill -KILL 0\n"
	path := dir + "/gompi-proxy"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	pid, w, err := startGuard(path)
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil {
		t.Fatal(err)
	}
	read := func(name string) string {
		b, err := os.ReadFile(dir + "/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if env := read("env"); strings.Contains(env, "GOMPI_CONNECT") || !strings.Contains(env, "PATH=") {
		t.Errorf("guard's environment:\n%s", env)
	}
	if out := read("out"); out != "/dev/null\n/dev/null\n" {
		t.Errorf("guard's stdout and stderr: %q, want /dev/null", out)
	}
	if fds := read("fds"); strings.Contains(fds, dir+"\n") {
		t.Errorf("guard holds the proxy's descriptor of %s:\n%s", dir, fds)
	}
}
