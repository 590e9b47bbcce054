package main

import (
	"net"
	"reflect"
	"strconv"
	"testing"
)

// Hydra's single-dash options work as the double-dash ones, and bad ports
// are usage errors (exit 2), a port in use too.
func TestArgs(t *testing.T) {
	if got := longDash([]string{"-port", "7", "-debug", "--port=8", "x"}); !reflect.DeepEqual(got, []string{"--port", "7", "--debug", "--port=8", "x"}) {
		t.Errorf("longDash = %q", got)
	}
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	busy := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	for _, args := range [][]string{{"-port", "x"}, {"-port", "70000"}, {"-port", "0"}, {"-port", busy}, {"-bogus"}} {
		if code := run(args); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
}
