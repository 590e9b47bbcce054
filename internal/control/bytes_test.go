package control

import (
	"encoding/json"
	"fmt"
	"net"
	"reflect"
	"strings"
	"testing"

	"github.com/gompi/gompi/pmi"
)

// Bytes that are not UTF-8 cross the control protocol unchanged in every
// field that carries Unix bytes: arguments, environment, paths, PMI keys
// and values, name-service strings.
func TestBytesCrossExactly(t *testing.T) {
	const bad = "caf\xe9\xff\x00\"\\{}"
	job := &Job{Version: Version, JobID: "j", Size: 1, KVSName: "kvs_j", GraceMS: 5,
		Env:       []string{"A=" + bad, "B=plain"},
		ProxyPath: "/opt/" + bad,
		Apps:      []App{{Argv: []string{"/bin/" + bad, bad, ""}, Env: []string{bad + "=x"}, Wdir: "/tmp/" + bad}},
		Ranks:     []RankSpec{{Rank: 0}},
		Children:  []Subtree{{Index: 1, Host: "h", Ranks: []RankSpec{{Rank: 1}}}},
	}
	msgs := []Msg{
		{T: MsgJob, Job: job},
		{T: MsgFence, Host: 2, KVS: []pmi.KV{{Key: "k" + bad, Value: bad}, {Key: "plain", Value: "v"}}},
		{T: MsgName, ReqID: 4, Op: "publish", Service: bad, Port: bad},
		{T: MsgExit, Rank: 3, Code: 7, At: 12345},
	}
	a, b := net.Pipe()
	ca, cb := NewConn(a), NewConn(b)
	go func() {
		for _, m := range msgs {
			ca.Send(m)
		}
	}()
	for _, want := range msgs {
		f, err := cb.Recv()
		if err != nil || !reflect.DeepEqual(f.Msg, want) {
			t.Fatalf("got %+v (job %+v) %v,\nwant %+v (job %+v)", f.Msg, f.Msg.Job, err, want, want.Job)
		}
	}
	// Valid UTF-8 stays a readable JSON string.
	enc, _ := json.Marshal(App{Argv: []string{"héllo"}, Wdir: "/tmp"})
	if !strings.Contains(string(enc), `"argv":["héllo"]`) || !strings.Contains(string(enc), `"wdir":"/tmp"`) {
		t.Fatalf("UTF-8 not kept as a string: %s", enc)
	}
	var app App
	if err := json.Unmarshal([]byte(`{"argv":[{"b64":"!!"}]}`), &app); err == nil {
		t.Fatal("bad base64 accepted")
	}
}

// A message encoded ahead (Encode, as gompiexec does with each proxy's job
// while the proxy starts) arrives as Send would deliver it; an empty
// Encoded is refused rather than sent as an empty frame.
func TestSendEncoded(t *testing.T) {
	job := &Job{Version: Version, JobID: "j", Size: 2, KVSName: "kvs_j", Index: 1,
		Env: []string{"A=caf\xe9", "B=plain"}, Apps: []App{{Argv: []string{"/bin/true"}, Wdir: "/"}},
		Ranks: []RankSpec{{Rank: 1, LocalRank: 0}}}
	jobEnc, err := EncodeJob(job)
	if err != nil {
		t.Fatal(err)
	}
	exitEnc, err := Encode(Msg{T: MsgExit, Rank: 3, Code: 7})
	if err != nil {
		t.Fatal(err)
	}
	a, b := net.Pipe()
	ca, cb := NewConn(a), NewConn(b)
	errc := make(chan error, 1)
	go func() {
		if err := ca.SendEncoded(jobEnc); err != nil {
			errc <- err
			return
		}
		errc <- ca.SendEncoded(exitEnc)
	}()
	for _, want := range []Msg{{T: MsgJob, Host: 1, Job: job}, {T: MsgExit, Rank: 3, Code: 7}} {
		f, err := cb.Recv()
		if err != nil || f.Type != FrameMsg || !reflect.DeepEqual(f.Msg, want) {
			t.Fatalf("got %+v %v, want %+v", f.Msg, err, want)
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if err := ca.SendEncoded(Encoded{}); err == nil {
		t.Fatal("empty Encoded sent")
	}
}

// BenchmarkEncodeJob is the job message of a proxy with 8 ranks and a
// 60-variable environment: the work gompiexec now does while the proxy
// starts rather than after it has connected back.
func BenchmarkEncodeJob(b *testing.B) {
	var env []string
	for i := 0; i < 60; i++ {
		env = append(env, fmt.Sprintf("VARIABLE_%d=/some/path/%d:/usr/local/bin:/usr/bin:/bin", i, i))
	}
	job := &Job{Version: Version, JobID: "0123456789abcdef", Host: "n1", Size: 24, Env: env, KVSName: "kvs",
		Apps: []App{{Argv: []string{"/bin/true"}, Wdir: "/"}}, ProxyPath: "/usr/bin/gompi-proxy"}
	for i := 0; i < 8; i++ {
		job.Ranks = append(job.Ranks, RankSpec{Rank: i, LocalRank: i})
	}
	for i := 0; i < b.N; i++ {
		if _, err := EncodeJob(job); err != nil {
			b.Fatal(err)
		}
	}
}
