package launcher

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// readErrProc is a Proc whose stream ends with err and whose Wait
// returns wait.
type readErrProc struct {
	Proc
	err, wait error
}

func (p readErrProc) Read([]byte) (int, error) { return 0, p.err }
func (p readErrProc) Wait() error              { return p.wait }

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

// An rsh agent that cannot reach its host writes why to stderr and exits
// 3; its stream's end races its exit, and the reason always carries the
// status (it was "EOF" alone when the end won).
func TestRecordingReasonHasAgentExitStatus(t *testing.T) {
	agent := filepath.Join(t.TempDir(), "agent.sh")
	if err := os.WriteFile(agent, []byte("#!/bin/sh\necho \"cannot reach host $1\" >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	started, err := RSH{Agent: agent}.Start(context.Background(), Spec{Host: "far", Argv: []string{"gompi-proxy"}, Stderr: &stderr})
	if err != nil {
		t.Fatal(err)
	}
	p := &Recording{Proc: started}
	if _, err := io.ReadAll(p); err != nil {
		t.Fatal(err)
	}
	sess := errors.New("session shutdown")
	got := p.Reason(sess)
	if !errors.Is(got, sess) || !strings.Contains(got.Error(), "exit status 3") {
		t.Fatalf("Reason = %v, want the session's end with exit status 3", got)
	}
	if !strings.Contains(stderr.String(), "cannot reach host far") {
		t.Errorf("agent's stderr %q", stderr.String())
	}
}
