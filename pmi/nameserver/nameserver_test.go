package nameserver

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"reflect"
	"strconv"
	"testing"
	"time"
)

// The bytes Hydra's launcher sends for a lookup (captured from
// mpiexec.hydra -nameserver, MPICH 4.0.2) and hydra_nameserver's answers.
var (
	hydraLookup   = []byte("\x02\x00\x00\x00\x07\x00\x00\x00LOOKUP\x00\x04\x00\x00\x00svc\x00")
	hydraSuccess  = []byte("\x08\x00\x00\x00SUCCESS\x00")
	hydraNotFound = []byte("\x01\x00\x00\x00\x00")
)

func TestWireMatchesHydra(t *testing.T) {
	var b bytes.Buffer
	if err := WriteStrings(&b, "LOOKUP", "svc"); err != nil || !bytes.Equal(b.Bytes(), hydraLookup) {
		t.Fatalf("request % x, %v; want % x", b.Bytes(), err, hydraLookup)
	}
	got, err := ReadStrings(bytes.NewReader(hydraLookup))
	if err != nil || !reflect.DeepEqual(got, []string{"LOOKUP", "svc"}) {
		t.Fatalf("read %q, %v", got, err)
	}
	for _, tc := range []struct {
		wire []byte
		s    string
	}{{hydraSuccess, "SUCCESS"}, {hydraNotFound, ""}} {
		b.Reset()
		if err := WriteString(&b, tc.s); err != nil || !bytes.Equal(b.Bytes(), tc.wire) {
			t.Errorf("answer %q: % x, %v; want % x", tc.s, b.Bytes(), err, tc.wire)
		}
		if s, err := ReadString(bytes.NewReader(tc.wire)); err != nil || s != tc.s {
			t.Errorf("read % x: %q, %v", tc.wire, s, err)
		}
	}
}

// Malformed messages are errors, found before anything large is
// allocated; a clean end before a message is io.EOF.
func TestWireErrors(t *testing.T) {
	le := func(vs ...int32) []byte {
		var b bytes.Buffer
		for _, v := range vs {
			binary.Write(&b, binary.LittleEndian, v)
		}
		return b.Bytes()
	}
	for name, in := range map[string][]byte{
		"no strings":       le(0),
		"too many strings": le(1 << 30),
		"negative length":  le(1, -5),
		"huge string":      le(1, 1<<30),
		"short string":     append(le(1, 10), "abc"...),
		"short count":      {1, 0},
	} {
		if _, err := ReadStrings(bytes.NewReader(in)); err == nil || !errors.Is(err, ErrProtocol) {
			t.Errorf("%s: %v, want ErrProtocol", name, err)
		}
	}
	if _, err := ReadStrings(bytes.NewReader(nil)); !errors.Is(err, errEOF()) {
		t.Errorf("empty: %v, want io.EOF", err)
	}
	if err := WriteStrings(&bytes.Buffer{}, "a\x00b"); err == nil {
		t.Error("a string with a NUL was written")
	}
}

func FuzzReadStrings(f *testing.F) {
	f.Add(hydraLookup)
	f.Add(hydraSuccess)
	f.Add([]byte{3, 0, 0, 0, 2, 0, 0, 0, 'a', 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		strs, err := ReadStrings(bytes.NewReader(in))
		if err != nil {
			return
		}
		var b bytes.Buffer
		if err := WriteStrings(&b, strs...); err != nil {
			return // a string held a NUL past its end: C would cut it too
		}
		back, err := ReadStrings(&b)
		if err != nil || !reflect.DeepEqual(back, strs) {
			t.Fatalf("%q reads back as %q, %v", strs, back, err)
		}
	})
}

// startServer runs a Server on a loopback port.
func startServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go (&Server{}).Serve(ln)
	return ln.Addr().String()
}

// clientSemantics runs the name service's rules against a server at addr.
func clientSemantics(t *testing.T, addr string) {
	t.Helper()
	ctx := context.Background()
	c := &Client{Addr: addr}
	name := "gompi-test-" + strconv.Itoa(os.Getpid())
	if _, err := c.Lookup(ctx, name); !errors.Is(err, ErrNotFound) {
		t.Fatalf("lookup before publish: %v", err)
	}
	if err := c.Publish(ctx, name, "tcp://a:1"); err != nil {
		t.Fatal(err)
	}
	// A name taken stays with its first port. (hydra_nameserver keeps
	// the refused entry behind the first, where an unpublish uncovers it,
	// so the unpublish below is of another name.)
	if err := c.Publish(ctx, name+"-taken", "tcp://a:1"); err != nil {
		t.Fatal(err)
	}
	if err := c.Publish(ctx, name+"-taken", "tcp://b:2"); !errors.Is(err, ErrExists) {
		t.Fatalf("second publish: %v, want ErrExists", err)
	}
	if p, err := c.Lookup(ctx, name+"-taken"); err != nil || p != "tcp://a:1" {
		t.Fatalf("lookup of a name published twice: %q, %v", p, err)
	}
	if p, err := c.Lookup(ctx, name); err != nil || p != "tcp://a:1" {
		t.Fatalf("lookup: %q, %v", p, err)
	}
	if err := c.Unpublish(ctx, name); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Lookup(ctx, name); !errors.Is(err, ErrNotFound) {
		t.Fatalf("lookup after unpublish: %v", err)
	}
	if err := c.Unpublish(ctx, name+"-never"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unpublish of a name never published: %v", err)
	}
}

func TestClientAndServer(t *testing.T) {
	clientSemantics(t, startServer(t))
	// A request the server does not know ends that connection, not it.
	addr := startServer(t)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	WriteStrings(c, "SPAWN", "x")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := ReadString(c); err == nil {
		t.Error("unknown request answered")
	}
	c.Close()
	clientSemantics(t, addr)
}

// MPICH's own hydra_nameserver answers gompi's client the same way.
func TestClientWithHydraNameserver(t *testing.T) {
	path, err := exec.LookPath("hydra_nameserver")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("MPICH's hydra_nameserver is not installed (test/setup.sh installs mpich)")
		}
		t.Skip("hydra_nameserver not installed")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(path, "-port", strconv.Itoa(port))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr := "127.0.0.1:" + strconv.Itoa(port)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("hydra_nameserver did not listen")
		}
	}
	clientSemantics(t, addr)
}

func TestParseAddr(t *testing.T) {
	for in, want := range map[string]string{
		"ns": "ns:6392", "ns:7000": "ns:7000", "10.0.0.1": "10.0.0.1:6392", "fd00::1": "[fd00::1]:6392", "[fd00::1]:7": "[fd00::1]:7",
	} {
		if got, err := ParseAddr(in); err != nil || got != want {
			t.Errorf("ParseAddr(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "ns:", "ns:x", "ns:0", "ns:70000", ":7"} {
		if got, err := ParseAddr(bad); err == nil {
			t.Errorf("ParseAddr(%q) = %q, no error", bad, got)
		}
	}
}

func errEOF() error { return io.EOF }
