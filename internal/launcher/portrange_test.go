package launcher

import (
	"errors"
	"net"
	"strings"
	"testing"
)

func TestParsePortRange(t *testing.T) {
	for _, tc := range []struct {
		v        string
		min, max int
		err      string
	}{
		{"10000:10100", 10000, 10100, ""},
		{" 5 : 5 ", 5, 5, ""},
		{"10000", 0, 0, "want MIN:MAX"},
		{"10:9", 0, 0, "want MIN:MAX"},
		{"0:10", 0, 0, "want MIN:MAX"},
		{"1:65536", 0, 0, "want MIN:MAX"},
		{"a:b", 0, 0, "MPIEXEC_PORT_RANGE=\"a:b\""},
	} {
		r, err := ParsePortRange("MPIEXEC_PORT_RANGE", tc.v)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: err %v, want %q", tc.v, err, tc.err)
			}
			continue
		}
		if err != nil || r.Min != tc.min || r.Max != tc.max {
			t.Errorf("%q: %+v, %v", tc.v, r, err)
		}
	}
}

// TestListenPortRange: the first free port of the range is taken; a
// range whose every port is taken fails with ErrNoFreePort naming it.
func TestListenPortRange(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	p := busy.Addr().(*net.TCPAddr).Port
	r := &PortRange{Min: p, Max: p, From: "X"}
	if _, err := listen("127.0.0.1:0", r); !errors.Is(err, ErrNoFreePort) || !strings.Contains(err.Error(), "X ") {
		t.Fatalf("busy range: %v", err)
	}
	if p < 65535 {
		ln, err := listen("127.0.0.1:0", &PortRange{Min: p, Max: p + 1, From: "X"})
		if err != nil {
			t.Logf("port %d also taken, not checked: %v", p+1, err)
			return
		}
		defer ln.Close()
		if got := ln.Addr().(*net.TCPAddr).Port; got != p+1 {
			t.Fatalf("listening on %d, want %d", got, p+1)
		}
	}
}
