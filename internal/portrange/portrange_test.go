package portrange

import (
	"net"
	"strconv"
	"strings"
	"testing"
)

func TestFromEnv(t *testing.T) {
	tests := []struct {
		env  map[string]string
		want Range
		err  string
	}{
		{nil, Range{}, ""},
		{map[string]string{"MPIEXEC_PORT_RANGE": "50000:50100"}, Range{50000, 50100, "MPIEXEC_PORT_RANGE"}, ""},
		{map[string]string{"MPIEXEC_PORT_RANGE": "1:2", "MPIR_CVAR_CH3_PORT_RANGE": "3:4"}, Range{3, 4, "MPIR_CVAR_CH3_PORT_RANGE"}, ""},
		{map[string]string{"MPICH_PORT_RANGE": "0:0"}, Range{From: "MPICH_PORT_RANGE"}, ""},
		{map[string]string{"MPICH_PORT_RANGE": "50100:50000"}, Range{}, `MPICH_PORT_RANGE="50100:50000": want 1 <= MIN <= MAX <= 65535`},
		{map[string]string{"MPICH_PORT_RANGE": "50000"}, Range{}, "want MIN:MAX"},
		{map[string]string{"MPICH_PORT_RANGE": "1:70000"}, Range{}, "want 1 <= MIN"},
	}
	for _, tc := range tests {
		got, err := FromEnv(func(k string) string { return tc.env[k] })
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v: %v, want %q", tc.env, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%v: %+v, %v; want %+v", tc.env, got, err, tc.want)
		}
	}
}

// Listeners take free ports of the range only, then fail naming it.
func TestListen(t *testing.T) {
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := probe.Addr().(*net.TCPAddr).Port
	probe.Close()
	if base > 65530 {
		base = 40000
	}
	r := Range{Lo: base, Hi: base + 2, From: "MPIEXEC_PORT_RANGE"}
	seen := map[int]bool{}
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	for i := 0; i < 3; i++ {
		ln, err := r.Listen("127.0.0.1")
		if err != nil {
			t.Skipf("port %d..%d taken meanwhile: %v", r.Lo, r.Hi, err) // another process; not this code's fault
		}
		lns = append(lns, ln)
		p := ln.Addr().(*net.TCPAddr).Port
		if p < r.Lo || p > r.Hi || seen[p] {
			t.Fatalf("port %d: outside %d-%d or taken twice", p, r.Lo, r.Hi)
		}
		seen[p] = true
	}
	if _, err := r.Listen("127.0.0.1"); err == nil || !strings.Contains(err.Error(), "no free port among ports "+strconv.Itoa(r.Lo)) {
		t.Fatalf("full range: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"1:2", "0:0", "50000:50100", ":", "a:b", "-1:5", "65535:65535"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		lo, hi, err := Parse(s)
		if err == nil && !(lo == 0 && hi == 0) && (lo < 1 || hi > 65535 || lo > hi) {
			t.Fatalf("%q: %d-%d accepted", s, lo, hi)
		}
	})
}
