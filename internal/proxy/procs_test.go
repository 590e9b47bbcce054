package proxy

import (
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
