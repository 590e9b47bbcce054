package launcher

import (
	"errors"
	"io"
	"testing"
)

// readErrProc is a Proc whose stream ends with err.
type readErrProc struct {
	Proc
	err error
}

func (p readErrProc) Read([]byte) (int, error) { return 0, p.err }

func TestRecordingReason(t *testing.T) {
	sess := errors.New("session shutdown")
	keepalive := errors.New("ssh: keepalive timeout to node2")
	for _, tc := range []struct {
		name   string
		stream error // nil: never read
		want   error
	}{
		{"not read", nil, sess},
		{"end of file", io.EOF, sess},
		{"wrapped end of file", errors.Join(io.EOF), sess},
		{"transport error", keepalive, keepalive},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &Recording{Proc: readErrProc{err: tc.stream}}
			if tc.stream != nil {
				p.Read(make([]byte, 1))
				p.Read(make([]byte, 1)) // the first error stays
			}
			if got := p.Reason(sess); !errors.Is(got, tc.want) {
				t.Fatalf("Reason = %v, want %v", got, tc.want)
			}
		})
	}
}
