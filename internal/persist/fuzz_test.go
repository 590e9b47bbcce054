package persist

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// rw is a scripted peer: reads come from in, writes are collected.
type rw struct {
	in  io.Reader
	out bytes.Buffer
}

func (p *rw) Read(b []byte) (int, error)  { return p.in.Read(b) }
func (p *rw) Write(b []byte) (int, error) { return p.out.Write(b) }

// FuzzAccept feeds arbitrary launcher bytes to the daemon's handshake: it
// must not panic, and must never accept without the token.
func FuzzAccept(f *testing.F) {
	f.Add("GOMPI-PERSIST 1 main " + strings.Repeat("a", 32) + "\n" + strings.Repeat("0", 64) + " {}\n")
	f.Add("GOMPI-PERSIST 1 ping " + strings.Repeat("a", 32) + "\n" + strings.Repeat("0", 64) + ` {"env":["A=1"],"idle":"1s"}` + "\n")
	f.Add("GOMPI-PERSIST 2 main x\n")
	f.Fuzz(func(t *testing.T, in string) {
		p := &rw{in: strings.NewReader(in)}
		if _, err := accept(p, strings.Repeat("5", 64), testBuild); err == nil {
			t.Fatalf("accepted %q without the token", in)
		}
	})
}

// FuzzParse checks the launcher-side parsers and the request parser.
func FuzzParse(f *testing.F) {
	f.Add("OK " + strings.Repeat("a", 64) + " " + strings.Repeat("b", 32) + " x")
	f.Add("gompi-persist: ok /tmp/s " + strings.Repeat("c", 64))
	f.Add("gompi-persist: error nope")
	f.Add(strings.Repeat("d", 64) + ` {"env":["A=1"],"stderr":"` + strings.Repeat("e", 32) + `"}`)
	f.Fuzz(func(t *testing.T, line string) {
		parseChallenge(line)
		if in, err := ParseInfo(line); err == nil {
			if again, err := ParseInfo(FormatInfo(in, nil)); err != nil || again != in {
				t.Fatalf("%q: round trip %+v %v", line, again, err)
			}
		}
		if _, req, err := parseRequest(line); err == nil {
			for _, kv := range req.Env {
				if !strings.Contains(kv, "=") {
					t.Fatalf("%q: env entry %q", line, kv)
				}
			}
		}
		parseHello(line)
	})
}
