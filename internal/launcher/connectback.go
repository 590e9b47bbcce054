package launcher

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// Connect-back (docs/control.md, "Connect-back"): a proxy started where its
// stdin and stdout cannot carry the session (one srun step for all hosts)
// dials gompiexec over TCP instead. Both ends prove they hold the job's
// secret before the connection becomes the session's byte stream.
const (
	// ConnectEnv lists the addresses to dial, comma-separated host:port;
	// an empty host means $SLURM_LAUNCH_NODE_IPADDR.
	ConnectEnv = "GOMPI_CONNECT"
	// ConnectSecretEnv is the per-job secret, hex-encoded.
	ConnectSecretEnv = "GOMPI_CONNECT_SECRET"

	cbMagic     = "GOMPICB1"
	cbNonce     = 16
	cbMaxName   = 255
	cbStatusOK  = 0
	cbStatusBad = 1 // authenticated, but no proxy is expected for this host
)

// ConnectLiveness bounds how long either end of a connect-back connection
// takes to notice that the other's host is gone (setLiveness).
const ConnectLiveness = 8 * time.Second

// ErrConnectAuth is a connect-back peer that could not prove the secret.
var ErrConnectAuth = errors.New("connect-back: peer failed authentication")

// ErrConnectRefused is a launcher that authenticated but expects no proxy
// from this host.
var ErrConnectRefused = errors.New("connect-back: launcher expects no proxy from this host")

func cbMAC(secret []byte, label string, nL, nP []byte, name string, extra ...byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(label))
	m.Write(nL)
	m.Write(nP)
	m.Write([]byte(name))
	m.Write(extra)
	return m.Sum(nil)
}

// AcceptConnectBack runs the launcher's side of the handshake on conn and
// returns the host name the proxy proved. expect reports whether a proxy
// from that host is awaited; if not, the proxy is told so. On error the
// caller closes conn; nothing else has been touched.
func AcceptConnectBack(conn net.Conn, secret []byte, expect func(host string) bool, timeout time.Duration) (string, error) {
	conn.SetDeadline(time.Now().Add(timeout))
	defer conn.SetDeadline(time.Time{})
	nL := make([]byte, cbNonce)
	rand.Read(nL)
	if _, err := conn.Write(append([]byte(cbMagic), nL...)); err != nil {
		return "", err
	}
	// magic, nonce, name length, name, mac
	head := make([]byte, len(cbMagic)+cbNonce+1)
	if _, err := io.ReadFull(conn, head); err != nil {
		return "", err
	}
	if string(head[:len(cbMagic)]) != cbMagic {
		return "", fmt.Errorf("%w (not a gompi proxy)", ErrConnectAuth)
	}
	nP := head[len(cbMagic) : len(cbMagic)+cbNonce]
	rest := make([]byte, int(head[len(head)-1])+sha256.Size)
	if _, err := io.ReadFull(conn, rest); err != nil {
		return "", err
	}
	name, mac := string(rest[:len(rest)-sha256.Size]), rest[len(rest)-sha256.Size:]
	if !hmac.Equal(mac, cbMAC(secret, "proxy", nL, nP, name)) {
		return "", ErrConnectAuth
	}
	status := byte(cbStatusOK)
	if !expect(name) {
		status = cbStatusBad
	}
	reply := append([]byte{status}, cbMAC(secret, "launcher", nL, nP, name, status)...)
	if _, err := conn.Write(reply); err != nil {
		return "", err
	}
	if status != cbStatusOK {
		return name, fmt.Errorf("connect-back from %s: %w", name, ErrConnectRefused)
	}
	return name, nil
}

// ProveConnectBack runs the proxy's side of the handshake on conn for host
// name: it proves the secret and checks that the launcher holds it too.
func ProveConnectBack(conn net.Conn, secret []byte, name string, timeout time.Duration) error {
	if len(name) > cbMaxName || name == "" {
		return fmt.Errorf("connect-back: host name %q: need 1 to %d bytes", name, cbMaxName)
	}
	conn.SetDeadline(time.Now().Add(timeout))
	defer conn.SetDeadline(time.Time{})
	head := make([]byte, len(cbMagic)+cbNonce)
	if _, err := io.ReadFull(conn, head); err != nil {
		return err
	}
	if string(head[:len(cbMagic)]) != cbMagic {
		return fmt.Errorf("%w (not gompiexec)", ErrConnectAuth)
	}
	nL := head[len(cbMagic):]
	nP := make([]byte, cbNonce)
	rand.Read(nP)
	msg := append([]byte(cbMagic), nP...)
	msg = append(msg, byte(len(name)))
	msg = append(msg, name...)
	msg = append(msg, cbMAC(secret, "proxy", nL, nP, name)...)
	if _, err := conn.Write(msg); err != nil {
		return err
	}
	reply := make([]byte, 1+sha256.Size)
	if _, err := io.ReadFull(conn, reply); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("%w (launcher closed the connection: wrong secret?)", ErrConnectAuth)
		}
		return err
	}
	if !hmac.Equal(reply[1:], cbMAC(secret, "launcher", nL, nP, name, reply[0])) {
		return ErrConnectAuth
	}
	if reply[0] != cbStatusOK {
		return ErrConnectRefused
	}
	return nil
}

// ParseConnectEnv parses $GOMPI_CONNECT: comma-separated host:port, where
// an empty host is replaced by launchHost ($SLURM_LAUNCH_NODE_IPADDR).
func ParseConnectEnv(v, launchHost string) ([]string, error) {
	var addrs []string
	for _, a := range strings.Split(v, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			return nil, fmt.Errorf("%s %q: %w", ConnectEnv, a, err)
		}
		if p, err := net.LookupPort("tcp", port); err != nil || p == 0 {
			return nil, fmt.Errorf("%s %q: bad port %q", ConnectEnv, a, port)
		}
		if host == "" {
			if launchHost == "" {
				continue
			}
			host = launchHost
		}
		addr := net.JoinHostPort(host, port)
		if _, _, err := net.SplitHostPort(addr); err != nil {
			// Only a launch host from the environment can get here.
			return nil, fmt.Errorf("%s %q: launch host %q: %w", ConnectEnv, a, launchHost, err)
		}
		addrs = append(addrs, addr)
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("%s %q: no address to connect to", ConnectEnv, v)
	}
	return addrs, nil
}

// ParseSecret decodes a hex secret of at least 16 bytes.
func ParseSecret(s string) ([]byte, error) {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) < 16 {
		return nil, fmt.Errorf("%s: want at least 32 hex digits", ConnectSecretEnv)
	}
	return b, nil
}

// DialConnectBack connects to the first of addrs that answers and proves
// name with secret there. Addresses that do not answer or fail the
// handshake are skipped; the error names every one tried.
func DialConnectBack(ctx context.Context, addrs []string, secret []byte, name string, timeout time.Duration) (net.Conn, error) {
	var errs []error
	d := net.Dialer{Timeout: timeout}
	for _, a := range addrs {
		conn, err := d.DialContext(ctx, "tcp", a)
		if err != nil && ctx.Err() != nil {
			// Cancelled (the proxy was signalled: scancel at start-up):
			// every address would fail the same way, and listing them
			// all read as a network fault.
			return nil, fmt.Errorf("connect-back to gompiexec: %w", ctx.Err())
		}
		if err == nil {
			if err = ProveConnectBack(conn, secret, name, timeout); err == nil {
				setLiveness(conn, ConnectLiveness)
				return conn, nil
			}
			conn.Close()
			if errors.Is(err, ErrConnectRefused) {
				return nil, fmt.Errorf("%s: %w", a, err)
			}
		}
		errs = append(errs, fmt.Errorf("%s: %w", a, err))
	}
	return nil, fmt.Errorf("connect-back to gompiexec failed: %w", errors.Join(errs...))
}
