// Package sockowner finds the user that owns the other end of a loopback
// TCP connection. Linux lists every TCP socket of the network namespace,
// with its owner's uid, in /proc/net/tcp and /proc/net/tcp6; the peer of an
// accepted loopback connection is the line whose local address is our
// remote address and whose remote address is our local one. gompi-proxy
// uses it to accept PMI_PORT connections only from the job's user
// (docs/pmi.md).
package sockowner

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
)

// ErrNotFound means no socket matching the connection is listed (the peer
// closed it already, or it is not a local TCP connection).
var ErrNotFound = errors.New("sockowner: peer socket not found")

// Entry is one line of /proc/net/tcp{,6}.
type Entry struct {
	Local, Remote netip.AddrPort
	UID           int
}

// Files are the tables searched, IPv4 first. A variable so tests can point
// it elsewhere.
var Files = []string{"/proc/net/tcp", "/proc/net/tcp6"}

// PeerUID returns the uid owning the other end of c, a TCP connection
// between two sockets of this host.
func PeerUID(c net.Conn) (int, error) {
	la, ok1 := c.LocalAddr().(*net.TCPAddr)
	ra, ok2 := c.RemoteAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return -1, fmt.Errorf("sockowner: %T is not a TCP connection", c)
	}
	local, remote := la.AddrPort(), ra.AddrPort()
	for _, f := range Files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		entries, err := Parse(data)
		if err != nil {
			return -1, fmt.Errorf("sockowner: %s: %w", f, err)
		}
		for _, e := range entries {
			if same(e.Local, remote) && same(e.Remote, local) {
				return e.UID, nil
			}
		}
	}
	return -1, fmt.Errorf("%w: %s -> %s", ErrNotFound, remote, local)
}

// same compares addresses, treating IPv4-mapped IPv6 as IPv4.
func same(a, b netip.AddrPort) bool {
	return a.Port() == b.Port() && a.Addr().Unmap() == b.Addr().Unmap()
}

// Parse reads the table format of /proc/net/tcp and /proc/net/tcp6: a
// header line, then per socket "sl: local remote st queues timer retrnsmt
// uid ...", addresses as hex words in host byte order and a hex port.
func Parse(data []byte) ([]Entry, error) {
	var out []Entry
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 4096), 1<<20)
	first := true
	for sc.Scan() {
		if first {
			first = false
			continue
		}
		f := bytes.Fields(sc.Bytes())
		if len(f) == 0 {
			continue
		}
		if len(f) < 8 {
			return nil, fmt.Errorf("short line %q", sc.Bytes())
		}
		local, err := parseAddr(string(f[1]))
		if err != nil {
			return nil, err
		}
		remote, err := parseAddr(string(f[2]))
		if err != nil {
			return nil, err
		}
		uid, err := strconv.ParseUint(string(f[7]), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("bad uid %q", f[7])
		}
		out = append(out, Entry{Local: local, Remote: remote, UID: int(uid)})
	}
	return out, sc.Err()
}

// parseAddr reads "0100007F:1F90" (IPv4) or 32 hex digits and a port
// (IPv6): the address as 32-bit words in host byte order.
func parseAddr(s string) (netip.AddrPort, error) {
	i := strings.IndexByte(s, ':')
	if i < 0 {
		return netip.AddrPort{}, fmt.Errorf("bad address %q", s)
	}
	raw, err := hex.DecodeString(s[:i])
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return netip.AddrPort{}, fmt.Errorf("bad address %q", s)
	}
	port, err := strconv.ParseUint(s[i+1:], 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("bad port in %q", s)
	}
	var b [16]byte
	for w := 0; w < len(raw); w += 4 {
		copy(b[w:], hostWord(raw[w:w+4]))
	}
	var a netip.Addr
	if len(raw) == 4 {
		a = netip.AddrFrom4([4]byte(b[:4]))
	} else {
		a = netip.AddrFrom16(b)
	}
	return netip.AddrPortFrom(a, uint16(port)), nil
}

// hostWord turns one printed word back into the bytes the kernel had in
// memory (network order): it printed them read as a host-order uint32.
func hostWord(printed []byte) []byte {
	var m [4]byte
	binary.NativeEndian.PutUint32(m[:], binary.BigEndian.Uint32(printed))
	return m[:]
}
