package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gompi/gompi/pmi"
)

type uplink struct{ job *pmi.Job }

func (u uplink) Fence(ctx context.Context, p []pmi.KV) (map[string]string, error) {
	return u.job.Fence(ctx, 0, p)
}
func (u uplink) Abort(int, int, string) error                   { return nil }
func (u uplink) Publish(context.Context, string, string) error  { return nil }
func (u uplink) Unpublish(context.Context, string) error        { return nil }
func (u uplink) Lookup(context.Context, string) (string, error) { return "", pmi.ErrNotFound }

func TestClientAgainstNode(t *testing.T) {
	const size = 4
	node, err := pmi.NewNode(pmi.NodeConfig{KVSName: "kvs_t", Size: size, Ranks: []int{0, 1, 2, 3}, Uplink: uplink{pmi.NewJob(1)}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	for r := 0; r < size; r++ {
		a, b := net.Pipe()
		go node.Serve(ctx, r, b)
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			c, err := NewFromConn(ctx, a, r, size)
			if err != nil {
				t.Error(err)
				return
			}
			if c.Rank() != r || c.Size() != size || c.KVSName() != "kvs_t" {
				t.Errorf("rank %d: got %d/%d %s", r, c.Rank(), c.Size(), c.KVSName())
			}
			if err := c.Put(fmt.Sprintf("k%d", r), fmt.Sprintf("v%d", r)); err != nil {
				t.Error(err)
			}
			if err := c.Fence(ctx); err != nil {
				t.Error(err)
			}
			for o := 0; o < size; o++ {
				v, err := c.Get(ctx, fmt.Sprintf("k%d", o))
				if err != nil || v != fmt.Sprintf("v%d", o) {
					t.Errorf("rank %d get k%d: %q %v", r, o, v, err)
				}
			}
			if _, err := c.Get(ctx, "missing"); !errors.Is(err, ErrNotFound) {
				t.Errorf("missing key: %v", err)
			}
			if err := c.Put("bad key", "x"); err == nil {
				t.Error("key with a space accepted")
			}
			if err := c.Finalize(); err != nil {
				t.Error(err)
			}
		}(r)
	}
	wg.Wait()
}

func TestServerGoneAndCancel(t *testing.T) {
	a, b := net.Pipe()
	go func() { // answers init then dies
		buf := make([]byte, 256)
		for _, reply := range []string{"cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n",
			"cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n", "cmd=appnum appnum=0\n", "cmd=my_kvsname kvsname=k\n"} {
			b.Read(buf)
			b.Write([]byte(reply))
		}
		b.Read(buf) // the barrier_in; then hang until cancelled
	}()
	c, err := NewFromConn(context.Background(), a, 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := c.Fence(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("cancelled fence: %v", err)
	}
	b.Close()
	if _, err := c.Get(context.Background(), "x"); !errors.Is(err, ErrServerGone) {
		t.Fatalf("after server close: %v", err)
	}
}

func TestSingleton(t *testing.T) {
	t.Setenv("PMI_FD", "")
	t.Setenv("PMI_PORT", "")
	t.Setenv("SLURM_STEP_NUM_TASKS", "") // the test itself may run under srun
	c, err := New(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !c.Singleton() || c.Rank() != 0 || c.Size() != 1 {
		t.Fatalf("singleton: %d/%d", c.Rank(), c.Size())
	}
	c.Put("a", "b")
	if v, err := c.Get(context.Background(), "a"); v != "b" || err != nil {
		t.Fatalf("get: %q %v", v, err)
	}
}

// A call cancelled while the server has not answered yet (the runtime
// cancels a peer-address lookup when Finalize starts) must leave the
// client usable: no past deadline left on the socket, and the late reply
// is skipped rather than taken as the next call's answer. Cancelling at
// each point (before the request, after it, after a partial reply) and
// then finalizing must work.
func TestCancelledCallLeavesClientUsable(t *testing.T) {
	for _, tc := range []struct {
		name    string
		partial string // bytes of the reply sent before the cancel
	}{
		{"no reply yet", ""},
		{"partial reply", "cmd=get_res"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := net.Pipe()
			cancelled := make(chan struct{})
			served := make(chan error, 1)
			go func() {
				r := bufio.NewReader(b)
				reply := func(s string) { b.Write([]byte(s)) }
				for _, s := range []string{"cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n",
					"cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n", "cmd=appnum appnum=0\n", "cmd=my_kvsname kvsname=k\n"} {
					r.ReadString('\n')
					reply(s)
				}
				r.ReadString('\n') // the get
				if tc.partial != "" {
					reply(tc.partial)
				}
				<-cancelled
				reply(strings.TrimPrefix("cmd=get_result rc=0 value=late\n", tc.partial))
				for _, want := range []string{"cmd=get", "cmd=finalize"} {
					line, err := r.ReadString('\n')
					if err != nil || !strings.HasPrefix(line, want) {
						served <- fmt.Errorf("server got %q %v, want %s", line, err, want)
						return
					}
					if want == "cmd=get" {
						reply("cmd=get_result rc=0 value=v2\n")
					} else {
						reply("cmd=finalize_ack\n")
					}
				}
				served <- nil
			}()
			c, err := NewFromConn(context.Background(), a, 0, 2)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			go func() { time.Sleep(50 * time.Millisecond); cancel() }()
			if _, err := c.Get(ctx, "x"); !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled get: %v", err)
			}
			close(cancelled)
			if v, err := c.Get(context.Background(), "y"); err != nil || v != "v2" {
				t.Fatalf("get after a cancelled one: %q %v", v, err)
			}
			if err := c.Finalize(); err != nil {
				t.Fatalf("finalize after a cancelled call: %v", err)
			}
			if err := <-served; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// The cancel's deadline may land after the reply was read (the
// AfterFunc races with the call's end); the next call must not see it.
func TestCancelAfterReplyLeavesNoDeadline(t *testing.T) {
	a, b := net.Pipe()
	go func() {
		r := bufio.NewReader(b)
		for _, s := range []string{"cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n",
			"cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n", "cmd=appnum appnum=0\n", "cmd=my_kvsname kvsname=k\n"} {
			r.ReadString('\n')
			b.Write([]byte(s))
		}
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			if strings.HasPrefix(line, "cmd=finalize") {
				b.Write([]byte("cmd=finalize_ack\n"))
				continue
			}
			b.Write([]byte("cmd=get_result rc=0 value=v\n"))
		}
	}()
	c, err := NewFromConn(context.Background(), a, 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); c.Get(ctx, "x") }()
		cancel()
		<-done
	}
	if v, err := c.Get(context.Background(), "x"); err != nil || v != "v" {
		t.Fatalf("get after cancelled ones: %q %v", v, err)
	}
	if err := c.Finalize(); err != nil {
		t.Fatalf("finalize: %v", err)
	}
}

// A task of a multi-task srun step that got no PMI (srun --mpi=none, the
// usual MpiDefault) is refused rather than run as rank 0 of 1, unless
// GOMPI_SINGLETON=1 asks for that; one task, or no srun, is a singleton.
func TestSrunWithoutPMI(t *testing.T) {
	for _, tc := range []struct {
		name, tasks, procid, single string
		fail                        bool
	}{
		{"srun -n 4 --mpi=none", "4", "2", "", true},
		{"opted into singletons", "4", "2", "1", false},
		{"srun -n 1", "1", "0", "", false},
		{"not a step task", "", "", "", false},
		{"step tasks without SLURM_PROCID", "4", "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("PMI_FD", "")
			t.Setenv("PMI_PORT", "")
			t.Setenv("SLURM_STEP_NUM_TASKS", tc.tasks)
			t.Setenv("SLURM_PROCID", tc.procid)
			t.Setenv(SingletonEnv, tc.single)
			c, err := New(context.Background())
			if tc.fail {
				if !errors.Is(err, ErrNoPMI) || !strings.Contains(err.Error(), "task 2 of 4") || !strings.Contains(err.Error(), "--mpi=pmi2") {
					t.Fatalf("New = %v; want ErrNoPMI naming task 2 of 4 and --mpi=pmi2", err)
				}
				return
			}
			if err != nil || !c.Singleton() {
				t.Fatalf("New = %v, %v; want a singleton", c, err)
			}
		})
	}
}
