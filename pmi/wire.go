// Package pmi implements the PMI-1 wire protocol that MPICH programs use to
// find each other (docs/pmi.md): a transport-free server engine for the
// proxy's local ranks, and the job-wide key-value space the launcher keeps.
package pmi

import (
	"errors"
	"fmt"
	"strings"
)

// Limits reported to clients in get_maxes (Hydra's values).
const (
	MaxKVSName = 256
	MaxKey     = 64
	MaxValue   = 1024
	// MaxLine is the PMI-1 client's line buffer, newline included.
	MaxLine = 1024
	// MaxRequest is the longest request line the server reads: a put
	// whose kvsname, key and value are as long as get_maxes allows. It
	// exceeds MaxLine; MPICH 4.1+ clients size their lines to fit and
	// Hydra reads them, so a value within vallen_max must not end the job.
	MaxRequest = len("cmd=put kvsname= key= value=\n") + MaxKVSName + MaxKey + MaxValue
)

// ErrProtocol is wrapped by every error caused by what a client sent.
var ErrProtocol = errors.New("pmi protocol error")

// Command is one parsed PMI-1 request line.
type Command struct {
	Name string            // value of cmd= (or "spawn" for mcmd=spawn)
	Args map[string]string // the other key=value tokens
	Line string            // the raw line, for error messages
}

// ParseLine parses "cmd=put kvsname=k key=a value=b". Tokens are separated
// by spaces; the first '=' splits key from value; the first token must be
// cmd= or mcmd=.
func ParseLine(line string) (Command, error) {
	line = strings.TrimRight(line, "\r\n")
	c := Command{Args: map[string]string{}, Line: line}
	toks := strings.Fields(line)
	if len(toks) == 0 {
		return c, fmt.Errorf("%w: empty line", ErrProtocol)
	}
	for i, t := range toks {
		k, v, ok := strings.Cut(t, "=")
		if !ok || k == "" {
			if i == 0 {
				return c, fmt.Errorf("%w: line does not start with cmd=: %q", ErrProtocol, line)
			}
			return c, fmt.Errorf("%w: token %q is not key=value in %q", ErrProtocol, t, line)
		}
		if i == 0 {
			if k != "cmd" && k != "mcmd" {
				return c, fmt.Errorf("%w: line does not start with cmd=: %q", ErrProtocol, line)
			}
			c.Name = v
			continue
		}
		if _, dup := c.Args[k]; dup {
			return c, fmt.Errorf("%w: key %q given twice in %q", ErrProtocol, k, line)
		}
		c.Args[k] = v
	}
	if c.Name == "" {
		return c, fmt.Errorf("%w: empty command in %q", ErrProtocol, line)
	}
	return c, nil
}

// formatReply renders "cmd=<name> k=v ..." with keys in the given order.
func formatReply(name string, kv ...string) string {
	var b strings.Builder
	b.WriteString("cmd=")
	b.WriteString(name)
	for i := 0; i+1 < len(kv); i += 2 {
		b.WriteByte(' ')
		b.WriteString(kv[i])
		b.WriteByte('=')
		b.WriteString(kv[i+1])
	}
	b.WriteByte('\n')
	return b.String()
}

// checkToken validates a key or value that must travel inside one token.
func checkToken(what, s string, max int) error {
	if len(s) > max {
		return fmt.Errorf("%w: %s of %d bytes exceeds the limit of %d", ErrProtocol, what, len(s), max)
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] == 0x7f {
			return fmt.Errorf("%w: %s contains a space or control character", ErrProtocol, what)
		}
	}
	return nil
}
