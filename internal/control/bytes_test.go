package control

import (
	"encoding/json"
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
		Apps:      []App{{Argv: []string{"/bin/" + bad, bad, ""}, Path: "/usr/" + bad, Env: []string{bad + "=x"}, Wdir: "/tmp/" + bad}},
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
