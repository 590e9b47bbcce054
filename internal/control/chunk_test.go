package control

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gompi/gompi/pmi"
)

// A round's pairs larger than a frame split into frames under MaxFrame,
// even when JSON escapes every byte, and join back in order.
func TestSplitKVSJoin(t *testing.T) {
	tests := []struct {
		name  string
		pairs int
		value string
	}{
		{"empty", 0, ""},
		{"one small", 1, "v"},
		{"5 MB of hex", 5000, strings.Repeat("A", 1000)},
		{"escaped bytes", 3000, strings.Repeat("\x01", 1000)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := Msg{T: MsgFenceDone, Host: 3, Error: "e"}
			for i := 0; i < tc.pairs; i++ {
				m.KVS = append(m.KVS, pmi.KV{Key: fmt.Sprint("k", i), Value: tc.value})
			}
			parts := SplitKVS(m)
			var j KVSJoin
			for i, p := range parts {
				b, err := p.MarshalJSON()
				if err != nil || len(b) > MaxFrame {
					t.Fatalf("part %d: %d bytes (max %d), %v", i, len(b), MaxFrame, err)
				}
				var back Msg
				if err := back.UnmarshalJSON(b); err != nil {
					t.Fatal(err)
				}
				got, whole := j.Add(back)
				if whole != (i == len(parts)-1) {
					t.Fatalf("part %d of %d: whole=%v", i, len(parts), whole)
				}
				if whole && (got.Error != "e" || got.Host != 3 || !slices.Equal(got.KVS, m.KVS)) {
					t.Fatalf("joined %d pairs (error %q), want the %d sent", len(got.KVS), got.Error, len(m.KVS))
				}
			}
		})
	}
}
