package rankevent

import (
	"errors"
	"io"
	"strings"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	var sb strings.Builder
	for i, ev := range []Event{{T: Checkpoint, Seq: 1}, {T: "peer_exit", Rank: 3, Info: "signal 9"}} {
		b, err := Encode(ev)
		if err != nil {
			t.Fatal(i, err)
		}
		sb.Write(b)
	}
	sb.WriteString("not json\n")
	sb.WriteString(strings.Repeat("x", MaxRecord+10) + "\n")
	sb.WriteString(`{"t":"checkpoint","seq":2,"future":true}` + "\n")
	sb.WriteString(`{"t":"check`)
	r := NewReader(strings.NewReader(sb.String()))
	want := []struct {
		ev  Event
		err error
	}{
		{Event{T: Checkpoint, Seq: 1}, nil},
		{Event{T: "peer_exit", Rank: 3, Info: "signal 9"}, nil},
		{Event{}, ErrBadRecord},
		{Event{}, ErrBadRecord},
		{Event{T: Checkpoint, Seq: 2}, nil},
		{Event{}, ErrBadRecord},
		{Event{}, io.EOF},
	}
	for i, w := range want {
		ev, err := r.Next()
		if !errors.Is(err, w.err) || (w.err == nil && ev != w.ev) {
			t.Fatalf("record %d: %+v, %v; want %+v, %v", i, ev, err, w.ev, w.err)
		}
	}
	if _, err := Encode(Event{}); !errors.Is(err, ErrBadRecord) {
		t.Fatalf("Encode without kind: %v", err)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"t":"checkpoint","seq":1}`))
	f.Add([]byte(`{"t":""}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrBadRecord) {
				t.Fatalf("error not ErrBadRecord: %v", err)
			}
			return
		}
		if ev.T == "" {
			t.Fatal("record without kind accepted")
		}
		if _, err := Encode(ev); err != nil && len(b) < MaxRecord/2 {
			t.Fatalf("decoded record does not encode: %v", err)
		}
	})
}
