package testkit

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// startSleeper starts `sleep 60` with env added to this process's
// environment and kills and reaps it when the test ends.
func startSleeper(t *testing.T, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	// Start returns once the exec has begun, but the kernel shows the new
	// environment only a little later: wait for it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		env, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid), "environ"))
		if err == nil && len(env) > 0 {
			return cmd
		}
		if time.Now().After(deadline) {
			t.Fatalf("sleeper %d shows no environment: %v", cmd.Process.Pid, err)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestMarkedProcs(t *testing.T) {
	tests := []struct {
		name  string
		env   []string // the child's extra environment; marker replaces "%m"
		found bool
	}{
		{"marked", []string{MarkerVar + "=%m"}, true},
		{"marked among others", []string{"A=1", MarkerVar + "=%m", "B=2"}, true},
		{"unmarked", nil, false},
		{"other marker", []string{MarkerVar + "=%m-other"}, false},
		{"marker as a prefix only", []string{MarkerVar + "=%mx"}, false},
		{"marker in another variable", []string{"X_" + MarkerVar + "=%m"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := NewMarker("testkit")
			var env []string
			for _, e := range tc.env {
				env = append(env, strings.ReplaceAll(e, "%m", m))
			}
			cmd := startSleeper(t, env...)
			got := MarkedProcs(m)
			if has := slices.Contains(got, cmd.Process.Pid); has != tc.found || len(got) > 1 {
				t.Fatalf("MarkedProcs = %v, child %d, want found=%v", got, cmd.Process.Pid, tc.found)
			}
		})
	}
}

func TestMarkedProcsSkipsZombies(t *testing.T) {
	m := NewMarker("testkit")
	cmd := exec.Command("true")
	cmd.Env = append(os.Environ(), MarkerVar+"="+m)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	// Not reaped yet: once it has exited it is a zombie.
	deadline := time.Now().Add(10 * time.Second)
	for {
		p, err := ReadProc(cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		if p.State == "Z" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("child never became a zombie: %+v", p)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := MarkedProcs(m); len(got) != 0 {
		t.Fatalf("MarkedProcs listed the zombie: %v", got)
	}
}

func TestParseStat(t *testing.T) {
	tests := []struct {
		stat string
		want Proc
		err  bool
	}{
		{"12 (sleep) S 1 12 12 0", Proc{12, 1, "sleep", "S"}, false},
		{"13 (a) b) Z 7 13", Proc{13, 7, "a) b", "Z"}, false}, // ')' in the command name
		{"14 (x y) R 1", Proc{14, 1, "x y", "R"}, false},      // space in the command name
		{"15 (cut) S", Proc{}, true},                          // no parent
		{"16 (bad) S x", Proc{}, true},                        // parent not a number
		{"17 nothing", Proc{}, true},                          // no command name
	}
	for _, tc := range tests {
		pid, _ := strconv.Atoi(strings.Fields(tc.stat)[0])
		got, err := parseStat(pid, []byte(tc.stat))
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("parseStat(%q) = %+v, %v; want %+v, error %v", tc.stat, got, err, tc.want, tc.err)
		}
	}
}

func TestReadProc(t *testing.T) {
	cmd := startSleeper(t)
	p, err := ReadProc(cmd.Process.Pid)
	if err != nil || p.Pid != cmd.Process.Pid || p.PPid != os.Getpid() || p.Comm != "sleep" {
		t.Fatalf("ReadProc = %+v, %v; want sleep, child of %d", p, err, os.Getpid())
	}
	if !slices.Contains(Pids(), cmd.Process.Pid) {
		t.Fatalf("Pids misses %d", cmd.Process.Pid)
	}
}

func TestKillMarkedAndWaitGone(t *testing.T) {
	m := NewMarker("testkit")
	for i := 0; i < 3; i++ {
		startSleeper(t, MarkerVar+"="+m)
	}
	other := startSleeper(t, MarkerVar+"="+m+"-other")
	if got := MarkedProcs(m); len(got) != 3 {
		t.Fatalf("MarkedProcs = %v, want the 3 sleepers", got)
	}
	if left := WaitGone(50*time.Millisecond, func() []int { return MarkedProcs(m) }); len(left) != 3 {
		t.Fatalf("WaitGone with live processes = %v, want the 3 sleepers", left)
	}
	KillMarked(m)
	// The killed sleepers stay zombies until the cleanup reaps them:
	// MarkedProcs must not count them.
	if left := WaitGone(5*time.Second, func() []int { return MarkedProcs(m) }); left != nil {
		t.Fatalf("still alive after KillMarked: %v", left)
	}
	if err := syscall.Kill(other.Process.Pid, 0); err != nil {
		t.Fatalf("KillMarked killed a process of another marker: %v", err)
	}
}

func TestNewMarkerUnique(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 100; i++ {
		m := NewMarker("p")
		if seen[m] || !strings.HasPrefix(m, "p-"+strconv.Itoa(os.Getpid())+"-") {
			t.Fatalf("marker %q (seen before: %v)", m, seen[m])
		}
		seen[m] = true
	}
}

func TestBufferConcurrent(t *testing.T) {
	var b Buffer
	const writers, lines = 8, 500
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < lines; i++ {
				b.Write([]byte("w" + strconv.Itoa(w) + "\n"))
				_ = b.String()
			}
		}(w)
	}
	wg.Wait()
	out := b.String()
	for w := 0; w < writers; w++ {
		if n := strings.Count(out, "w"+strconv.Itoa(w)+"\n"); n != lines {
			t.Fatalf("writer %d: %d lines, want %d", w, n, lines)
		}
	}
}

func TestJob(t *testing.T) {
	tests := []struct {
		name    string
		stdin   string
		script  string
		limit   time.Duration
		timeout bool
		code    int
		stdout  string
		stderr  string
	}{
		{"exit code and output", "", "echo out; echo err >&2; exit 3", 10 * time.Second, false, 3, "out\n", "err\n"},
		{"stdin", "hello", "cat", 10 * time.Second, false, 0, "hello", ""},
		{"marker in environment", "", "echo $" + MarkerVar, 10 * time.Second, false, 0, "%m\n", ""},
		// The limit must leave sh time to start and print "started" on a
		// loaded machine; the sleeps outlast any limit anyway.
		{"timeout kills the group", "", "echo started; sleep 60 & sleep 60", 2 * time.Second, true, -1, "started\n", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := NewMarker("testkit")
			j := NewJob(m, tc.stdin, "/bin/sh", "-c", tc.script)
			if err := j.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(j.Kill)
			r, err := j.Wait(tc.limit)
			if again := j.MustWait(t, time.Second); !tc.timeout && (again.Stdout != r.Stdout || again.Stderr != r.Stderr || again.Code != r.Code) {
				t.Fatalf("MustWait after the end: %+v, Wait: %+v", again, r)
			}
			if (err != nil) != tc.timeout {
				t.Fatalf("Wait error %v, want timeout=%v", err, tc.timeout)
			}
			if tc.timeout && !strings.Contains(err.Error(), "sh did not finish within "+tc.limit.String()) {
				t.Fatalf("timeout error %q", err)
			}
			want := strings.ReplaceAll(tc.stdout, "%m", m)
			if r.Code != tc.code || r.Stdout != want || r.Stderr != tc.stderr {
				t.Fatalf("result %+v, want code %d stdout %q stderr %q", r, tc.code, want, tc.stderr)
			}
			if r.Elapsed <= 0 || (!tc.timeout && r.Elapsed > tc.limit) {
				t.Fatalf("elapsed %s", r.Elapsed)
			}
			select {
			case <-j.Done():
			default:
				t.Fatal("Done not closed after Wait")
			}
			if left := WaitGone(5*time.Second, func() []int { return MarkedProcs(m) }); left != nil {
				t.Fatalf("left after the job: %v", left)
			}
		})
	}
}

func TestBuild(t *testing.T) {
	dir, err := BuildTemp("", "testkit-", Pkg("internal/testkit/testdata/hello"))
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	out, err := exec.Command(filepath.Join(dir, "hello")).Output()
	if err != nil || string(out) != "hello\n" {
		t.Fatalf("built program: %v %q", err, out)
	}
	_, err = BuildTemp("", "testkit-", Pkg("internal/testkit/testdata/nosuch"))
	if err == nil || !strings.Contains(err.Error(), "building "+Pkg("internal/testkit/testdata/nosuch")) {
		t.Fatalf("error for a missing package: %v", err)
	}
}

type runner struct {
	dir  *string
	seen string // *dir while Run ran
	ran  bool
}

func (r *runner) Run() int {
	r.ran, r.seen = true, *r.dir
	return 3
}

func TestMainWithBinaries(t *testing.T) {
	tests := []struct {
		name string
		pkg  string
		code int
		ran  bool
	}{
		{"builds, runs, cleans up", Pkg("internal/testkit/testdata/hello"), 3, true},
		{"build error runs nothing", Pkg("internal/testkit/testdata/nosuch"), 1, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var dir string
			r := &runner{dir: &dir}
			if code := MainWithBinaries(r, &dir, "testkit-main-", tc.pkg); code != tc.code || r.ran != tc.ran {
				t.Fatalf("code %d ran %v, want %d %v", code, r.ran, tc.code, tc.ran)
			}
			if !tc.ran {
				return
			}
			if r.seen == "" {
				t.Fatal("dir not set before Run")
			}
			if _, err := os.Stat(r.seen); !os.IsNotExist(err) {
				t.Fatalf("%s not removed: %v", r.seen, err)
			}
		})
	}
}

func TestJobNotStarted(t *testing.T) {
	j := NewJob(NewMarker("testkit"), "", "/nonexistent/prog")
	if err := j.Start(); err == nil {
		t.Fatal("started a program that does not exist")
	}
	j.Kill() // must not wait for an exit that never comes
	if j := NewJob("", "", "/bin/true"); slices.ContainsFunc(j.Cmd.Env, func(e string) bool {
		return strings.HasPrefix(e, MarkerVar+"=")
	}) && os.Getenv(MarkerVar) == "" {
		t.Fatalf("an empty marker was put in the environment")
	}
}
