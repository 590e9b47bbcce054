package launcher

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

func TestConnectBackHandshake(t *testing.T) {
	good := bytes.Repeat([]byte{7}, 32)
	bad := bytes.Repeat([]byte{8}, 32)
	for _, tc := range []struct {
		name                  string
		launcherKey, proxyKey []byte
		host                  string
		wantAccept, wantProve error
	}{
		{"ok", good, good, "n1", nil, nil},
		{"proxy with wrong secret", good, bad, "n1", ErrConnectAuth, ErrConnectAuth},
		{"launcher with wrong secret", bad, good, "n1", ErrConnectAuth, ErrConnectAuth},
		{"unexpected host", good, good, "n9", ErrConnectRefused, ErrConnectRefused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, p := net.Pipe()
			defer l.Close()
			defer p.Close()
			proveErr := make(chan error, 1)
			go func() {
				err := ProveConnectBack(p, tc.proxyKey, tc.host, 2*time.Second)
				if err != nil {
					p.Close()
				}
				proveErr <- err
			}()
			name, err := AcceptConnectBack(l, tc.launcherKey, func(h string) bool { return h == "n1" }, 2*time.Second)
			if !errors.Is(err, tc.wantAccept) || (tc.wantAccept == nil) != (err == nil) {
				t.Fatalf("accept: %v, want %v", err, tc.wantAccept)
			}
			if err != nil {
				l.Close() // what the backend does: drop it
			}
			perr := <-proveErr
			if (tc.wantProve == nil) != (perr == nil) || (tc.wantProve != nil && !errors.Is(perr, tc.wantProve)) {
				t.Fatalf("prove: %v, want %v", perr, tc.wantProve)
			}
			if err == nil {
				if name != tc.host {
					t.Fatalf("name %q", name)
				}
				// The connection is now the session's byte stream.
				go p.Write([]byte("session"))
				buf := make([]byte, 7)
				if _, err := io.ReadFull(l, buf); err != nil || string(buf) != "session" {
					t.Fatalf("after handshake: %q %v", buf, err)
				}
			}
		})
	}
}

// A stranger that connects and sends garbage, or nothing, is dropped
// within the timeout, without a panic.
func TestConnectBackStranger(t *testing.T) {
	for _, junk := range [][]byte{nil, []byte("GET / HTTP/1.0\r\n\r\n"), append([]byte(cbMagic), make([]byte, 17+255+32)...)} {
		l, p := net.Pipe()
		go func() {
			io.CopyN(io.Discard, p, int64(len(cbMagic)+cbNonce))
			p.Write(junk)
		}()
		_, err := AcceptConnectBack(l, []byte("0123456789abcdef"), func(string) bool { return true }, 200*time.Millisecond)
		if err == nil {
			t.Fatalf("junk %q accepted", junk)
		}
		l.Close()
		p.Close()
	}
}

func TestParseConnectEnv(t *testing.T) {
	for _, tc := range []struct {
		in, launch string
		want       []string
		ok         bool
	}{
		{":4000", "10.0.0.1", []string{"10.0.0.1:4000"}, true},
		{":4000,10.0.0.2:4000", "", []string{"10.0.0.2:4000"}, true},
		{"[fe80::1]:5,a:6", "", []string{"[fe80::1]:5", "a:6"}, true},
		{":4000", "", nil, false},
		{"a:0", "", nil, false},
		{"a", "", nil, false},
		{"a:notaport", "", nil, false},
		{"", "x", nil, false},
	} {
		got, err := ParseConnectEnv(tc.in, tc.launch)
		if (err == nil) != tc.ok || len(got) != len(tc.want) {
			t.Errorf("ParseConnectEnv(%q, %q) = %v, %v", tc.in, tc.launch, got, err)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("ParseConnectEnv(%q)[%d] = %q, want %q", tc.in, i, got[i], tc.want[i])
			}
		}
	}
	if _, err := ParseSecret("abcd"); err == nil {
		t.Error("short secret accepted")
	}
	if b, err := ParseSecret("00112233445566778899aabbccddeeff"); err != nil || len(b) != 16 {
		t.Errorf("ParseSecret: %v %v", b, err)
	}
}

func FuzzParseConnectEnv(f *testing.F) {
	f.Add(":4000,10.0.0.2:4000", "10.0.0.1")
	f.Add("[::1]:1", "")
	f.Fuzz(func(t *testing.T, v, launch string) {
		addrs, err := ParseConnectEnv(v, launch)
		if err == nil && len(addrs) == 0 {
			t.Fatal("no error and no address")
		}
		for _, a := range addrs {
			if _, _, err := net.SplitHostPort(a); err != nil {
				t.Fatalf("returned %q: %v", a, err)
			}
		}
	})
}

// FuzzAcceptConnectBack feeds the launcher's handshake arbitrary bytes
// from a would-be proxy: it must return (never hang or panic) and never
// accept without the secret.
func FuzzAcceptConnectBack(f *testing.F) {
	f.Add([]byte(cbMagic + "0123456789abcdef\x02n1" + string(make([]byte, 32))))
	f.Add([]byte("junk"))
	f.Fuzz(func(t *testing.T, in []byte) {
		l, p := net.Pipe()
		defer l.Close()
		go func() {
			io.CopyN(io.Discard, p, int64(len(cbMagic)+cbNonce))
			p.Write(in)
			io.Copy(io.Discard, p)
		}()
		defer p.Close()
		if _, err := AcceptConnectBack(l, []byte("0123456789abcdef"), func(string) bool { return true }, 50*time.Millisecond); err == nil {
			t.Fatalf("accepted %q", in)
		}
	})
}

// A connect-back cut short by cancellation (the proxy SIGTERMed by scancel
// while it dials) says so once, rather than listing every address as
// failed with "operation was canceled", which read as a network fault.
func TestDialConnectBackCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	addrs := []string{"192.0.2.1:1", "192.0.2.2:1", "127.0.0.1:1"}
	_, err := DialConnectBack(ctx, addrs, make([]byte, 32), "n1", time.Second)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("DialConnectBack = %v, want context.Canceled", err)
	}
	for _, a := range addrs {
		if strings.Contains(err.Error(), a) {
			t.Errorf("error %q names %s: a cancelled dial is no address's fault", err, a)
		}
	}
}
