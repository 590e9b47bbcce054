package pmi

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

type client2 struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
}

func (c *client2) do(body string) string {
	c.t.Helper()
	c.conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.conn.Write([]byte(formatRaw2(body))); err != nil {
		c.t.Fatal(err)
	}
	b, err := readFrame2(c.r)
	if err != nil {
		c.t.Fatalf("reply to %q: %v", body, err)
	}
	return b
}

// formatRaw2 frames a body the way MPICH's client does (left-aligned).
func formatRaw2(body string) string { return fmt.Sprintf("%-6d%s", len(body), body) }

func startPMI2(t *testing.T, ranks []int, size int) (map[int]*client2, map[int]chan error) {
	t.Helper()
	cl, errs := startNode(t, NodeConfig{KVSName: "kvs_2", Size: size, Ranks: ranks, ProcessMapping: "(vector,(0,1,2))",
		Uplink: &jobUplink{job: NewJob(1)}})
	out := map[int]*client2{}
	for r, c := range cl {
		if got := c.do("cmd=init pmi_version=2 pmi_subversion=0"); got != "cmd=response_to_init pmi_version=2 pmi_subversion=0 rc=0" {
			t.Fatalf("init: %q", got)
		}
		out[r] = &client2{t: t, conn: c.conn, r: c.r}
	}
	return out, errs
}

func TestPMI2Commands(t *testing.T) {
	cl, errs := startPMI2(t, []int{0, 1}, 2)
	c := cl[0]
	steps := []struct{ req, want string }{
		{"cmd=fullinit;pmirank=0;threaded=FALSE;", "cmd=fullinit-response;pmi-version=2;pmi-subversion=0;rank=0;size=2;appnum=0;debugged=FALSE;pmiverbose=FALSE;rc=0;"},
		{"cmd=job-getid;thrid=7f;", "cmd=job-getid-response;thrid=7f;jobid=kvs_2;rc=0;"},
		{"cmd=kvs-put;key=a;value=x;;y;", "cmd=kvs-put-response;rc=0;"},
		{"cmd=kvs-get;jobid=kvs_2;srcid=-1;key=a;", "cmd=kvs-get-response;found=TRUE;value=x;;y;rc=0;"},
		{"cmd=kvs-get;jobid=kvs_2;srcid=-1;key=zz;", "cmd=kvs-get-response;found=FALSE;rc=0;"},
		{"cmd=info-getjobattr;key=PMI_process_mapping;", "cmd=info-getjobattr-response;found=TRUE;value=(vector,(0,1,2));rc=0;"},
		{"cmd=info-getjobattr;key=universeSize;", "cmd=info-getjobattr-response;found=FALSE;rc=0;"},
		{"cmd=info-putnodeattr;key=shm;value=seg1;", "cmd=info-putnodeattr-response;rc=0;"},
		{"cmd=info-getnodeattr;key=shm;wait=FALSE;", "cmd=info-getnodeattr-response;found=TRUE;value=seg1;rc=0;"},
		{"cmd=info-getnodeattr;key=none;wait=FALSE;", "cmd=info-getnodeattr-response;found=FALSE;rc=0;"},
		{"cmd=name-publish;name=svc;port=p;infokeycount=0;", "cmd=name-publish-response;rc=0;"},
		{"cmd=name-lookup;name=svc;infokeycount=0;", "cmd=name-lookup-response;port=p;found=TRUE;rc=0;"},
		{"cmd=spawn;ncmds=1;", "cmd=spawn-response;rc=-1;errmsg=spawn is not supported by gompi;"},
	}
	for _, s := range steps {
		if got := c.do(s.req); got != s.want {
			t.Fatalf("%q:\n got %q\nwant %q", s.req, got, s.want)
		}
	}
	// A waiting getnodeattr is answered when another local rank puts it.
	got := make(chan string, 1)
	go func() { got <- cl[1].do("cmd=info-getnodeattr;key=late;wait=TRUE;") }()
	time.Sleep(20 * time.Millisecond)
	c.do("cmd=info-putnodeattr;key=late;value=v;")
	if g := <-got; g != "cmd=info-getnodeattr-response;found=TRUE;value=v;rc=0;" {
		t.Fatalf("waiting get: %q", g)
	}
	// kvs-fence is a barrier over both local ranks.
	fenced := make(chan string, 1)
	go func() { fenced <- cl[1].do("cmd=kvs-fence;") }()
	if g := c.do("cmd=kvs-fence;"); g != "cmd=kvs-fence-response;rc=0;" || <-fenced != g {
		t.Fatalf("fence: %q", g)
	}
	if g := c.do("cmd=finalize;"); g != "cmd=finalize-response;rc=0;" {
		t.Fatal(g)
	}
	c.conn.Close()
	if err := <-errs[0]; err != nil {
		t.Fatalf("after finalize: %v", err)
	}
}

func TestPMI2Errors(t *testing.T) {
	for _, body := range []string{"cmd=frob;", "key=a;", "cmd=kvs-put;key=a;value=b", "cmd=kvs-put;key=" + strings.Repeat("k", 70) + ";value=b;"} {
		cl, errs := startPMI2(t, []int{0}, 1)
		c := cl[0]
		c.conn.Write([]byte(formatRaw2(body)))
		go readFrame2(c.r)
		select {
		case err := <-errs[0]:
			if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "rank 0") {
				t.Fatalf("%q: %v", body, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%q: Serve did not fail", body)
		}
	}
}

func TestFrame2Alignment(t *testing.T) {
	for _, hdr := range []string{"12    ", "    12", "  12  "} {
		r := bufio.NewReader(strings.NewReader(hdr + "cmd=finalize"))
		if b, err := readFrame2(r); err != nil || b != "cmd=finalize" {
			t.Fatalf("%q: %q %v", hdr, b, err)
		}
	}
	if _, err := readFrame2(bufio.NewReader(strings.NewReader("abcdef"))); !errors.Is(err, ErrProtocol) {
		t.Fatalf("bad length: %v", err)
	}
}

func FuzzPMI2Parse(f *testing.F) {
	for _, s := range []string{"cmd=fullinit;pmirank=0;threaded=FALSE;", "cmd=kvs-put;key=a;value=x;;y;", "cmd=;", "x", "cmd=a;k=v"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseFrame2(s)
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatal(err)
			}
			return
		}
		// What we parse, we can render and parse back to the same pairs.
		var kv []string
		for k, v := range c.Args {
			kv = append(kv, k, v)
		}
		again, err := ParseFrame2(formatFrame2(c.Name, kv...)[6:])
		if err != nil || again.Name != c.Name || len(again.Args) != len(c.Args) {
			t.Fatalf("round trip of %q: %+v %v", s, again, err)
		}
		for k, v := range c.Args {
			if again.Args[k] != v {
				t.Fatalf("round trip of %q: %s=%q became %q", s, k, v, again.Args[k])
			}
		}
	})
}
