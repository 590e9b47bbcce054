// Package persist is gompi's persistent proxy: a per-user daemon on a host
// that starts a fresh gompi-proxy for every job arriving on its Unix
// socket. The SSH launcher reaches that socket through an SSH
// direct-streamlocal channel, which sshd serves itself: no login shell runs
// on the host, and a shell (with the user's ~/.bashrc) is most of what an
// SSH launch costs. The first launch on a host starts the daemon; it exits
// after a period without jobs. docs/ssh.md, "Persistent proxies", is the
// specification of the handshake and the files.
package persist

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Version is the handshake version spoken by this build.
const Version = 1

// Roles of a connection to the daemon.
const (
	RoleMain   = "main"   // becomes the proxy's stdin and stdout
	RoleStderr = "stderr" // becomes the proxy's stderr
	RolePing   = "ping"   // proves the daemon alive; nothing is started
)

// maxLine bounds a handshake line (the request carries the proxy's
// environment additions, a few short variables).
const maxLine = 64 << 10

var (
	// ErrAuth: the peer does not know the daemon's token.
	ErrAuth = errors.New("persistent proxy: authentication failed")
	// ErrProtocol: the peer's handshake is malformed.
	ErrProtocol = errors.New("persistent proxy: protocol error")
)

// Request is what the launcher asks of the daemon, after both proved they
// know the token.
type Request struct {
	// Env holds KEY=VALUE pairs added to the proxy's environment.
	Env []string `json:"env,omitempty"`
	// Idle, a Go duration, replaces the daemon's idle lifetime.
	Idle string `json:"idle,omitempty"`
	// Stderr is the nonce of this job's stderr connection (main only).
	Stderr string `json:"stderr,omitempty"`
}

// NewToken returns a fresh secret in its hex form.
func NewToken() (string, error) { return randomHex(32) }

// NewNonce returns a fresh nonce in its hex form.
func NewNonce() (string, error) { return randomHex(16) }

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// proof is HMAC-SHA256 of the handshake's words under the token, each side
// signing with its own label so that one side's proof cannot be replayed
// as the other's.
func proof(token, label, role, nonceC, nonceD string) string {
	m := hmac.New(sha256.New, []byte(token))
	io.WriteString(m, strings.Join([]string{"gompi-persist", label, role, nonceC, nonceD}, "\x00"))
	return hex.EncodeToString(m.Sum(nil))
}

func proofOK(got, token, label, role, nonceC, nonceD string) bool {
	want := proof(token, label, role, nonceC, nonceD)
	return hmac.Equal([]byte(got), []byte(want))
}

// readLine reads one line a byte at a time: after the handshake the
// connection belongs to the proxy, so nothing past the newline may be
// consumed into a buffer.
func readLine(r io.Reader) (string, error) {
	var b []byte
	var c [1]byte
	for len(b) < maxLine {
		n, err := r.Read(c[:])
		if n == 1 {
			if c[0] == '\n' {
				return string(b), nil
			}
			b = append(b, c[0])
			continue
		}
		if err != nil {
			if err == io.EOF && len(b) > 0 {
				err = io.ErrUnexpectedEOF
			}
			return "", err
		}
	}
	return "", fmt.Errorf("%w: line longer than %d bytes", ErrProtocol, maxLine)
}

func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// hello is the launcher's first line: GOMPI-PERSIST <version> <role> <nonce>.
func parseHello(line string) (role, nonce string, err error) {
	f := strings.Fields(line)
	if len(f) != 4 || f[0] != "GOMPI-PERSIST" {
		return "", "", fmt.Errorf("%w: hello %q", ErrProtocol, trunc(line))
	}
	if f[1] != fmt.Sprint(Version) {
		return "", "", fmt.Errorf("%w: version %q, this daemon speaks %d", ErrProtocol, f[1], Version)
	}
	switch f[2] {
	case RoleMain, RoleStderr, RolePing:
	default:
		return "", "", fmt.Errorf("%w: role %q", ErrProtocol, f[2])
	}
	if !isHex(f[3], 32) {
		return "", "", fmt.Errorf("%w: nonce %q", ErrProtocol, trunc(f[3]))
	}
	return f[2], f[3], nil
}

// parseChallenge reads the daemon's answer: OK <proof> <nonce> <build>.
func parseChallenge(line string) (proofD, nonceD, build string, err error) {
	f := strings.Fields(line)
	if len(f) == 0 || f[0] != "OK" {
		if msg, ok := strings.CutPrefix(line, "ERR "); ok {
			return "", "", "", fmt.Errorf("persistent proxy: %s", msg)
		}
		return "", "", "", fmt.Errorf("%w: answer %q", ErrProtocol, trunc(line))
	}
	if len(f) != 4 || !isHex(f[1], 64) || !isHex(f[2], 32) {
		return "", "", "", fmt.Errorf("%w: answer %q", ErrProtocol, trunc(line))
	}
	return f[1], f[2], f[3], nil
}

// parseRequest reads the launcher's second line: <proof> <JSON request>.
func parseRequest(line string) (proofC string, req Request, err error) {
	p, js, _ := strings.Cut(line, " ")
	if !isHex(p, 64) {
		return "", req, fmt.Errorf("%w: request %q", ErrProtocol, trunc(line))
	}
	dec := json.NewDecoder(strings.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return "", req, fmt.Errorf("%w: request: %v", ErrProtocol, err)
	}
	if dec.More() {
		return "", req, fmt.Errorf("%w: request: trailing data", ErrProtocol)
	}
	for _, kv := range req.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" || strings.ContainsAny(kv, "\x00") {
			return "", req, fmt.Errorf("%w: environment entry %q", ErrProtocol, trunc(kv))
		}
	}
	if req.Stderr != "" && !isHex(req.Stderr, 32) {
		return "", req, fmt.Errorf("%w: stderr nonce %q", ErrProtocol, trunc(req.Stderr))
	}
	return p, req, nil
}

func trunc(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// Dial runs the launcher's side of the handshake on rw, a fresh connection
// to the daemon's socket. For RoleMain it returns once the daemon has
// started the proxy, whose stdout the following bytes are; for RoleStderr
// once the daemon holds the connection for the job's proxy, whose stderr
// the following bytes will be; RolePing only checks. It
// returns the daemon's build identity. nonceC (NewNonce) is fresh for each
// connection; a main request names its stderr connection's.
func Dial(rw io.ReadWriter, token, role, nonceC string, req Request) (build string, err error) {
	if _, err := fmt.Fprintf(rw, "GOMPI-PERSIST %d %s %s\n", Version, role, nonceC); err != nil {
		return "", err
	}
	line, err := readLine(rw)
	if err != nil {
		return "", fmt.Errorf("persistent proxy: no answer: %w", err)
	}
	proofD, nonceD, build, err := parseChallenge(line)
	if err != nil {
		return "", err
	}
	if !proofOK(proofD, token, "daemon", role, nonceC, nonceD) {
		return "", fmt.Errorf("%w: the daemon does not know our token", ErrAuth)
	}
	js, err := json.Marshal(req)
	if err != nil {
		return "", err
	}
	if _, err := fmt.Fprintf(rw, "%s %s\n", proof(token, "launcher", role, nonceC, nonceD), js); err != nil {
		return "", err
	}
	line, err = readLine(rw)
	if err != nil {
		return "", fmt.Errorf("persistent proxy: no answer to the request: %w", err)
	}
	switch {
	case line == "RUN" && role == RoleMain, line == "PONG" && role == RolePing, line == "READY" && role == RoleStderr:
		return build, nil
	case strings.HasPrefix(line, "ERR "):
		return "", fmt.Errorf("persistent proxy: %s", strings.TrimPrefix(line, "ERR "))
	}
	return "", fmt.Errorf("%w: answer %q", ErrProtocol, trunc(line))
}

// accepted is a connection that completed the daemon's side of the
// handshake.
type accepted struct {
	role  string
	nonce string
	req   Request
}

// accept runs the daemon's side of the handshake on rw up to the request;
// the caller answers it (RUN, READY, PONG or ERR).
func accept(rw io.ReadWriter, token, build string) (accepted, error) {
	line, err := readLine(rw)
	if err != nil {
		return accepted{}, err
	}
	role, nonceC, err := parseHello(line)
	if err != nil {
		fmt.Fprintf(rw, "ERR %v\n", err)
		return accepted{}, err
	}
	nonceD, err := NewNonce()
	if err != nil {
		return accepted{}, err
	}
	if _, err := fmt.Fprintf(rw, "OK %s %s %s\n", proof(token, "daemon", role, nonceC, nonceD), nonceD, build); err != nil {
		return accepted{}, err
	}
	line, err = readLine(rw)
	if err != nil {
		return accepted{}, err
	}
	proofC, req, err := parseRequest(line)
	if err != nil {
		fmt.Fprintf(rw, "ERR %v\n", err)
		return accepted{}, err
	}
	if !proofOK(proofC, token, "launcher", role, nonceC, nonceD) {
		fmt.Fprintf(rw, "ERR %v\n", ErrAuth)
		return accepted{}, ErrAuth
	}
	return accepted{role: role, nonce: nonceC, req: req}, nil
}
