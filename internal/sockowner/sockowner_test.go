package sockowner

import (
	"net"
	"net/netip"
	"os"
	"testing"
)

func TestParse(t *testing.T) {
	data := []byte(`  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 563 1 0 100 0 0 10 0
   1: 0100007F:E94C 0100007F:B1D7 06 00000000:00000000 03:00000E6C 00000000     0        0 0 3 0
`)
	es, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	// Little-endian hosts print 127.0.0.1 as 0100007F.
	want := netip.MustParseAddrPort("127.0.0.1:8080")
	if len(es) != 2 || es[0].Local != want || es[0].UID != 1000 || es[1].Remote.Port() != 0xB1D7 {
		t.Fatalf("got %+v", es)
	}
	six := []byte("hdr\n 0: 00000000000000000000000001000000:0016 00000000000000000000000000000000:0000 0A 0:0 0:0 0 42 0 1\n")
	es, err = Parse(six)
	if err != nil || len(es) != 1 || es[0].Local != netip.MustParseAddrPort("[::1]:22") || es[0].UID != 42 {
		t.Fatalf("tcp6: %+v %v", es, err)
	}
	for _, bad := range []string{"h\n0: x y\n", "h\n 0: 0100007F:1F90 00000000:0000 0A 0 0 0 notauid\n", "h\n 0: 0100007F 00000000:0000 0A 0 0 0 1\n"} {
		if _, err := Parse([]byte(bad)); err == nil {
			t.Errorf("Parse(%q) succeeded", bad)
		}
	}
}

// A real loopback connection: the peer is this process, so its uid.
func TestPeerUID(t *testing.T) {
	for _, network := range []string{"tcp4", "tcp6"} {
		addr := "127.0.0.1:0"
		if network == "tcp6" {
			addr = "[::1]:0"
		}
		ln, err := net.Listen(network, addr)
		if err != nil {
			t.Logf("%s: %v", network, err)
			continue
		}
		defer ln.Close()
		c, err := net.Dial(network, ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		uid, err := PeerUID(s)
		if err != nil || uid != os.Getuid() {
			t.Fatalf("%s: PeerUID = %d, %v; want %d", network, uid, err, os.Getuid())
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("hdr\n 0: 0100007F:1F90 00000000:0000 0A 0:0 0:0 0 1000 0 1\n"))
	f.Add([]byte("hdr\n 0: 00000000000000000000000001000000:0016 00000000000000000000000000000000:0000 0A 0:0 0:0 0 42 0 1\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		es, err := Parse(data)
		if err != nil {
			return
		}
		for _, e := range es {
			if !e.Local.IsValid() || !e.Remote.IsValid() || e.UID < 0 {
				t.Fatalf("invalid entry %+v from %q", e, data)
			}
		}
	})
}
