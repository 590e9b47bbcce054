package pmi

import (
	"bufio"
	"context"
	"net"
	"testing"
)

// PMI_dead_processes lists the ranks MarkDead was told of, sorted, in the
// ranges MPICH parses, over PMI-1 and PMI-2 alike.
func TestDeadProcesses(t *testing.T) {
	n, err := NewNode(NodeConfig{KVSName: "kvs_d", Size: 8, Ranks: []int{0, 2}, Uplink: &jobUplink{job: NewJob(1)}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	serve := func(r int) *client {
		a, b := net.Pipe()
		go n.Serve(ctx, r, b)
		t.Cleanup(func() { a.Close() })
		return &client{t: t, conn: a, r: bufio.NewReader(a)}
	}
	v1 := serve(0)
	v1.do("cmd=init pmi_version=1 pmi_subversion=1")
	v2c := serve(2)
	v2c.do("cmd=init pmi_version=2 pmi_subversion=0")
	v2 := &client2{t: t, conn: v2c.conn, r: v2c.r}
	v2.do("cmd=fullinit;pmirank=2;threaded=FALSE;")
	check := func(want string) {
		t.Helper()
		if got := v1.do("cmd=get kvsname=kvs_d key=PMI_dead_processes"); got != "cmd=get_result rc=0 msg=success value="+want {
			t.Errorf("PMI-1: %q, want value %q", got, want)
		}
		if got := v2.do("cmd=info-getjobattr;key=PMI_dead_processes;"); got != "cmd=info-getjobattr-response;found=TRUE;value="+want+";rc=0;" {
			t.Errorf("PMI-2: %q, want value %q", got, want)
		}
	}
	check("")
	n.MarkDead(5)
	check("5")
	for _, r := range []int{3, 4, 1, 4, 99, -1} {
		n.MarkDead(r)
	}
	check("1,3-5")
	n.MarkDead(7)
	check("1,3-5,7")
}
