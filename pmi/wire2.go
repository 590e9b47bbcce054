package pmi

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// PMI-2 framing: 6 ASCII bytes holding the decimal body length (MPICH pads
// with spaces on the right, Hydra on the left; both are accepted), then the
// body "cmd=name;key=value;...;" where a ';' inside a value is doubled.

// maxFrame2 is PMI-2's largest body (64 KiB minus the header).
const maxFrame2 = 64<<10 - 6

// Command2 is one parsed PMI-2 request.
type Command2 struct {
	Name string
	Args map[string]string
	Body string // raw, for error messages
}

// readFrame2 reads one PMI-2 frame body.
func readFrame2(r *bufio.Reader) (string, error) {
	var hdr [6]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return "", err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(hdr[:])))
	if err != nil || n < 0 || n > maxFrame2 {
		return "", fmt.Errorf("%w: bad PMI-2 frame length %q", ErrProtocol, hdr[:])
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return "", fmt.Errorf("%w: short PMI-2 frame: %v", ErrProtocol, err)
	}
	return string(body), nil
}

// ParseFrame2 parses a PMI-2 body; the first pair must be cmd=.
func ParseFrame2(body string) (Command2, error) {
	c := Command2{Args: map[string]string{}, Body: body}
	rest := body
	first := true
	for rest != "" {
		eq := strings.IndexByte(rest, '=')
		if eq <= 0 {
			return c, fmt.Errorf("%w: PMI-2 pair without key=value in %q", ErrProtocol, body)
		}
		key := rest[:eq]
		if strings.ContainsAny(key, ";") {
			return c, fmt.Errorf("%w: bad PMI-2 key %q in %q", ErrProtocol, key, body)
		}
		rest = rest[eq+1:]
		var val strings.Builder
		closed := false
		for i := 0; i < len(rest); i++ {
			if rest[i] != ';' {
				val.WriteByte(rest[i])
				continue
			}
			if i+1 < len(rest) && rest[i+1] == ';' {
				val.WriteByte(';')
				i++
				continue
			}
			rest = rest[i+1:]
			closed = true
			break
		}
		if !closed {
			return c, fmt.Errorf("%w: PMI-2 value of %q not terminated by ';' in %q", ErrProtocol, key, body)
		}
		if first {
			if key != "cmd" || val.Len() == 0 {
				return c, fmt.Errorf("%w: PMI-2 message does not start with cmd=: %q", ErrProtocol, body)
			}
			c.Name = val.String()
			first = false
			continue
		}
		if _, dup := c.Args[key]; dup {
			return c, fmt.Errorf("%w: PMI-2 key %q given twice in %q", ErrProtocol, key, body)
		}
		c.Args[key] = val.String()
	}
	if first {
		return c, fmt.Errorf("%w: empty PMI-2 message", ErrProtocol)
	}
	return c, nil
}

// formatFrame2 renders a framed reply; kv alternates keys and values.
func formatFrame2(name string, kv ...string) string {
	var b strings.Builder
	b.WriteString("cmd=")
	b.WriteString(strings.ReplaceAll(name, ";", ";;"))
	b.WriteByte(';')
	for i := 0; i+1 < len(kv); i += 2 {
		b.WriteString(kv[i])
		b.WriteByte('=')
		b.WriteString(strings.ReplaceAll(kv[i+1], ";", ";;"))
		b.WriteByte(';')
	}
	return fmt.Sprintf("%-6d%s", b.Len(), b.String())
}
