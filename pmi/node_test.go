package pmi

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// jobUplink connects a Node straight to a Job, as the launcher does over the
// control protocol.
type jobUplink struct {
	job    *Job
	node   int
	mu     sync.Mutex
	aborts []string
}

func (u *jobUplink) Fence(ctx context.Context, puts []KV) (map[string]string, error) {
	return u.job.Fence(ctx, u.node, puts)
}
func (u *jobUplink) Abort(rank, code int, msg string) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.aborts = append(u.aborts, fmt.Sprintf("%d:%d:%s", rank, code, msg))
	return nil
}
func (u *jobUplink) Publish(_ context.Context, s, p string) error { return u.job.Publish(s, p) }
func (u *jobUplink) Unpublish(_ context.Context, s string) error  { return u.job.Unpublish(s) }
func (u *jobUplink) Lookup(_ context.Context, s string) (string, error) {
	return u.job.Lookup(s)
}

type client struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
}

func (c *client) do(req string) string {
	c.t.Helper()
	c.conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.conn.Write([]byte(req + "\n")); err != nil {
		c.t.Fatalf("write %q: %v", req, err)
	}
	line, err := c.r.ReadString('\n')
	if err != nil {
		c.t.Fatalf("reply to %q: %v", req, err)
	}
	return strings.TrimSuffix(line, "\n")
}

// startNode serves ranks on net.Pipe connections; errs receives Serve's
// result per rank.
func startNode(t *testing.T, cfg NodeConfig) (map[int]*client, map[int]chan error) {
	t.Helper()
	n, err := NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	clients, errs := map[int]*client{}, map[int]chan error{}
	for _, r := range cfg.Ranks {
		a, b := net.Pipe()
		ch := make(chan error, 1)
		go func(r int) { ch <- n.Serve(ctx, r, b) }(r)
		clients[r] = &client{t: t, conn: a, r: bufio.NewReader(a)}
		errs[r] = ch
	}
	return clients, errs
}

func oneNode(t *testing.T, ranks []int, size int) (*jobUplink, map[int]*client, map[int]chan error) {
	up := &jobUplink{job: NewJob(1)}
	cl, errs := startNode(t, NodeConfig{KVSName: "kvs_1", Size: size, Ranks: ranks, UniverseSize: 8,
		ProcessMapping: "(vector,(0,1,2))", Uplink: up, AppNum: func(r int) int { return r % 2 }})
	return up, cl, errs
}

func TestCommands(t *testing.T) {
	_, cl, errs := oneNode(t, []int{0}, 1)
	c := cl[0]
	steps := []struct{ req, want string }{
		{"cmd=init pmi_version=1 pmi_subversion=1", "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0"},
		{"cmd=get_maxes", "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024"},
		{"cmd=get_appnum", "cmd=appnum appnum=0"},
		{"cmd=get_my_kvsname", "cmd=my_kvsname kvsname=kvs_1"},
		{"cmd=get_universe_size", "cmd=universe_size size=8"},
		{"cmd=get kvsname=kvs_1 key=PMI_process_mapping", "cmd=get_result rc=0 msg=success value=(vector,(0,1,2))"},
		{"cmd=get kvsname=kvs_1 key=PMI_dead_processes", "cmd=get_result rc=0 msg=success value="},
		{"cmd=put kvsname=kvs_1 key=a value=x=y", "cmd=put_result rc=0 msg=success"},
		{"cmd=get kvsname=kvs_1 key=a", "cmd=get_result rc=0 msg=success value=x=y"},
		{"cmd=put kvsname=kvs_1 key=empty value=", "cmd=put_result rc=0 msg=success"},
		{"cmd=get kvsname=kvs_1 key=nope", "cmd=get_result rc=-1 msg=key_nope_not_found value=unknown"},
		{"cmd=barrier_in", "cmd=barrier_out"},
		{"cmd=publish_name service=svc port=p1", "cmd=publish_result info=ok rc=0 msg=success"},
		{"cmd=publish_name service=svc port=p2", "cmd=publish_result info=fail rc=1 msg=key_already_present"},
		{"cmd=lookup_name service=svc", "cmd=lookup_result port=p1 info=ok rc=0 msg=success"},
		{"cmd=unpublish_name service=svc", "cmd=unpublish_result info=ok rc=0 msg=success"},
		{"cmd=unpublish_name service=svc", "cmd=unpublish_result info=fail rc=1 msg=service_not_found"},
		{"cmd=lookup_name service=svc", "cmd=lookup_result rc=1 msg=service_not_found"},
		{"mcmd=spawn\nnprocs=1\nexecname=x\ntotspawns=1\nspawnssofar=1\nargcnt=0\npreput_num=0\ninfo_num=0\nendcmd", "cmd=spawn_result rc=-1 msg=spawn_not_supported_by_gompi"},
		{"cmd=finalize", "cmd=finalize_ack"},
	}
	for _, s := range steps {
		if got := c.do(s.req); got != s.want {
			t.Fatalf("%q: got %q, want %q", s.req, got, s.want)
		}
	}
	c.conn.Close()
	if err := <-errs[0]; err != nil {
		t.Fatalf("Serve after finalize: %v", err)
	}
}

func TestPortModeInitack(t *testing.T) {
	up := &jobUplink{job: NewJob(1)}
	n, _ := NewNode(NodeConfig{KVSName: "k", Size: 4, Ranks: []int{2, 3}, Uplink: up})
	a, b := net.Pipe()
	go n.Serve(context.Background(), -1, b)
	c := &client{t: t, conn: a, r: bufio.NewReader(a)}
	if got := c.do("cmd=initack pmiid=3"); got != "cmd=initack" {
		t.Fatalf("got %q", got)
	}
	for _, want := range []string{"cmd=set size=4", "cmd=set rank=3", "cmd=set debug=0"} {
		line, _ := c.r.ReadString('\n')
		if strings.TrimSpace(line) != want {
			t.Fatalf("got %q want %q", line, want)
		}
	}
	if got := c.do("cmd=init pmi_version=1 pmi_subversion=1"); !strings.Contains(got, "rc=0") {
		t.Fatal(got)
	}
}

func TestProtocolErrors(t *testing.T) {
	tests := []struct {
		name, req, wantErr string
		init               bool
	}{
		{"unknown command", "cmd=frobnicate x=1", `unknown command "cmd=frobnicate x=1"`, true},
		{"not key=value", "hello world", "does not start with cmd=", true},
		{"before init", "cmd=get_maxes", "before init", false},
		{"wrong version", "cmd=init pmi_version=3 pmi_subversion=0", "PMI version 3.0", false},
		{"wrong kvsname", "cmd=put kvsname=other key=a value=b", `kvsname "other" is not this job's`, true},
		{"long key", "cmd=put kvsname=kvs_1 key=" + strings.Repeat("k", 65) + " value=b", "bad key", true},
		{"long value", "cmd=put kvsname=kvs_1 key=a value=" + strings.Repeat("v", 900), "", true},
		{"value over the limit", "cmd=put kvsname=kvs_1 key=a value=" + strings.Repeat("v", 1025), "1025 bytes exceeds the limit of 1024", true},
		{"long line", "cmd=put kvsname=kvs_1 key=a value=" + strings.Repeat("v", 2000), "line longer than 1373", true},
		{"duplicate key", "cmd=put kvsname=kvs_1 key=a key=b value=c", `key "key" given twice`, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, cl, errs := oneNode(t, []int{0}, 1)
			c := cl[0]
			if tc.init {
				c.do("cmd=init pmi_version=1 pmi_subversion=1")
			}
			c.conn.SetDeadline(time.Now().Add(5 * time.Second))
			c.conn.Write([]byte(tc.req + "\n"))
			if tc.wantErr == "" { // a value up to the limit is fine
				if line, _ := c.r.ReadString('\n'); !strings.Contains(line, "rc=0") {
					t.Fatalf("got %q", line)
				}
				return
			}
			go c.r.ReadString('\n') // the error reply, so Serve is not blocked
			select {
			case err := <-errs[0]:
				if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "rank 0") {
					t.Fatalf("got %v, want ErrProtocol naming rank 0 and %q", err, tc.wantErr)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Serve did not fail")
			}
		})
	}
}

// TestPutAtAdvertisedLimits: a put whose kvsname, key and value are as
// long as get_maxes allows is longer than the client's 1024-byte line
// (MPICH 4.1+ clients size their lines to fit, as Hydra reads them); it
// must be stored and read back, not end the job as a protocol error.
func TestPutAtAdvertisedLimits(t *testing.T) {
	kvs := "kvs_" + strings.Repeat("n", MaxKVSName-4)
	key, val := strings.Repeat("k", MaxKey), strings.Repeat("v", MaxValue)
	cl, errs := startNode(t, NodeConfig{KVSName: kvs, Size: 1, Ranks: []int{0}, Uplink: &jobUplink{job: NewJob(1)}})
	c := cl[0]
	c.do("cmd=init pmi_version=1 pmi_subversion=1")
	put := "cmd=put kvsname=" + kvs + " key=" + key + " value=" + val
	done := make(chan string, 1)
	go func() { done <- c.do(put) }()
	select {
	case got := <-done:
		if got != "cmd=put_result rc=0 msg=success" {
			t.Fatalf("put of a %d-byte line: got %q", len(put)+1, got)
		}
	case err := <-errs[0]:
		t.Fatalf("put of a %d-byte line within get_maxes ended the rank: %v", len(put)+1, err)
	}
	if got := c.do("cmd=barrier_in"); got != "cmd=barrier_out" {
		t.Fatalf("barrier: %q", got)
	}
	if got, want := c.do("cmd=get kvsname="+kvs+" key="+key), "cmd=get_result rc=0 msg=success value="+val; got != want {
		t.Fatalf("get: got %d bytes %.60q, want the %d-byte value", len(got), got, len(val))
	}
}

func TestNoFinalizeAndAbort(t *testing.T) {
	up, cl, errs := oneNode(t, []int{0, 1}, 2)
	cl[0].do("cmd=init pmi_version=1 pmi_subversion=1")
	cl[0].conn.Close()
	if err := <-errs[0]; !errors.Is(err, ErrNoFinalize) {
		t.Fatalf("close without finalize: %v", err)
	}
	cl[1].do("cmd=init pmi_version=1 pmi_subversion=1")
	cl[1].conn.Write([]byte("cmd=abort exitcode=7\n"))
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		up.mu.Lock()
		n := len(up.aborts)
		up.mu.Unlock()
		if n > 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if len(up.aborts) != 1 || up.aborts[0] != "1:7:" {
		t.Fatalf("aborts %v", up.aborts)
	}
}

// TestFenceAcrossNodes runs several nodes with several ranks each against
// one Job: after a fence every rank sees every other rank's key.
func TestFenceAcrossNodes(t *testing.T) {
	const nodes, per = 4, 3
	job := NewJob(nodes)
	size := nodes * per
	var wg sync.WaitGroup
	for nd := 0; nd < nodes; nd++ {
		var ranks []int
		for k := 0; k < per; k++ {
			ranks = append(ranks, nd*per+k)
		}
		cl, _ := startNode(t, NodeConfig{KVSName: "kvs_j", Size: size, Ranks: ranks, Uplink: &jobUplink{job: job, node: nd}})
		for r, c := range cl {
			wg.Add(1)
			go func(r int, c *client) {
				defer wg.Done()
				c.do("cmd=init pmi_version=1 pmi_subversion=1")
				for round := 0; round < 3; round++ {
					c.do(fmt.Sprintf("cmd=put kvsname=kvs_j key=k%d-%d value=v%d", round, r, r*10+round))
					c.do("cmd=barrier_in")
					for o := 0; o < size; o++ {
						want := fmt.Sprintf("cmd=get_result rc=0 msg=success value=v%d", o*10+round)
						if got := c.do(fmt.Sprintf("cmd=get kvsname=kvs_j key=k%d-%d", round, o)); got != want {
							t.Errorf("rank %d round %d: get k%d-%d = %q", r, round, round, o, got)
						}
					}
				}
				c.do("cmd=finalize")
			}(r, c)
		}
	}
	wg.Wait()
	if v, ok := job.Get("k2-11"); !ok || v != "v112" {
		t.Fatalf("launcher KVS: %q %v", v, ok)
	}
}

func TestJobCloseReleasesFence(t *testing.T) {
	job := NewJob(2)
	done := make(chan error, 1)
	go func() {
		_, err := job.Fence(context.Background(), 0, nil)
		done <- err
	}()
	time.Sleep(10 * time.Millisecond)
	job.Close(nil)
	if err := <-done; !errors.Is(err, ErrJobClosed) {
		t.Fatalf("got %v", err)
	}
	if _, err := job.Fence(context.Background(), 1, nil); !errors.Is(err, ErrJobClosed) {
		t.Fatalf("after close: %v", err)
	}
}

func TestNewNodeValidates(t *testing.T) {
	up := &jobUplink{job: NewJob(1)}
	bad := []NodeConfig{
		{Size: 1, Ranks: []int{0}, Uplink: up},
		{KVSName: "a b", Size: 1, Ranks: []int{0}, Uplink: up},
		{KVSName: "k", Size: 1, Ranks: []int{1}, Uplink: up},
		{KVSName: "k", Size: 1, Ranks: []int{0}},
	}
	for i, c := range bad {
		if _, err := NewNode(c); err == nil {
			t.Errorf("config %d accepted", i)
		}
	}
}

func FuzzParseLine(f *testing.F) {
	for _, s := range []string{"cmd=init pmi_version=1 pmi_subversion=1", "cmd=put kvsname=k key=a value=b=c", "mcmd=spawn", "x", "cmd= a=", "cmd=get key=a key=b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseLine(s)
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("error not ErrProtocol: %v", err)
			}
			return
		}
		if c.Name == "" {
			t.Fatal("empty name accepted")
		}
	})
}

// FuzzServe feeds arbitrary bytes to the engine: it must answer or fail with
// an error, never hang or panic.
func FuzzServe(f *testing.F) {
	f.Add([]byte("cmd=init pmi_version=1 pmi_subversion=1\ncmd=get_maxes\ncmd=barrier_in\ncmd=finalize\n"))
	f.Add([]byte("cmd=init pmi_version=1 pmi_subversion=1\nmcmd=spawn\nendcmd\n"))
	f.Add([]byte("cmd=initack pmiid=0\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		up := &jobUplink{job: NewJob(1)}
		n, _ := NewNode(NodeConfig{KVSName: "k", Size: 1, Ranks: []int{0}, Uplink: up})
		a, b := net.Pipe()
		// Short: an abort waits for the job to end it, and every input
		// that waits this long slows the fuzzer down.
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		done := make(chan error, 1)
		go func() {
			err := n.Serve(ctx, 0, b)
			b.Close() // a Serve that stopped early must not leave our Write blocked
			done <- err
		}()
		go func() {
			buf := make([]byte, 4096)
			for {
				if _, err := a.Read(buf); err != nil {
					return
				}
			}
		}()
		a.Write(in)
		a.Close()
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			t.Fatal("Serve hung")
		}
	})
}

// BenchmarkFence4096 times one fence of 4096 simulated ranks behind 64
// nodes sharing one Job, in process: every rank has put one key (untimed:
// puts are answered locally), then the timer runs from the moment ranks send
// barrier_in until every rank has its barrier_out, with all 4096 keys
// distributed to every node.
func BenchmarkFence4096(b *testing.B) {
	const nodes, per = 64, 64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		job := NewJob(nodes)
		type rk struct {
			c *bufio.Reader
			w net.Conn
		}
		var all []rk
		ctx, cancel := context.WithCancel(context.Background())
		var lastNode *Node
		for nd := 0; nd < nodes; nd++ {
			var ranks []int
			for k := 0; k < per; k++ {
				ranks = append(ranks, nd*per+k)
			}
			n, _ := NewNode(NodeConfig{KVSName: "k", Size: nodes * per, Ranks: ranks, Uplink: &jobUplink{job: job, node: nd}})
			lastNode = n
			for _, r := range ranks {
				x, y := net.Pipe()
				go n.Serve(ctx, r, y)
				c := bufio.NewReader(x)
				x.Write([]byte("cmd=init pmi_version=1 pmi_subversion=1\n"))
				c.ReadString('\n')
				fmt.Fprintf(x, "cmd=put kvsname=k key=addr-%d value=tcp://10.0.0.1:%d\n", r, r)
				c.ReadString('\n')
				all = append(all, rk{c, x})
			}
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for _, k := range all {
			wg.Add(1)
			go func(k rk) {
				defer wg.Done()
				<-start
				k.w.Write([]byte("cmd=barrier_in\n"))
				k.c.ReadString('\n')
			}(k)
		}
		// The setup's garbage (4096 pipes, readers, goroutines) is
		// collected before the clock starts: it is not the fence's.
		runtime.GC()
		b.StartTimer()
		close(start)
		wg.Wait()
		b.StopTimer()
		if v, ok := lastNode.get("addr-7"); !ok || v != "tcp://10.0.0.1:7" {
			b.Fatalf("key not distributed: %q %v", v, ok)
		}
		cancel()
	}
}
