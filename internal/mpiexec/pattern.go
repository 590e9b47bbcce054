package mpiexec

import (
	"fmt"
	"strconv"
)

// Pattern is one of Hydra's output patterns (-prepend-pattern,
// -outfile-pattern, -errfile-pattern): %r the rank, %g the process group
// (0: gompiexec starts no other groups), %p the proxy id (the index of
// the rank's host among the job's hosts), %h that host's name, %t whole
// seconds since the job started, %% a percent sign.
type Pattern struct {
	src   string
	parts []patPart
}

type patPart struct {
	lit  string
	verb byte // 0 for a literal
}

// PatternVars are what a pattern's specifiers stand for for one rank.
type PatternVars struct {
	Rank, PGID, Proxy int
	Host              string
	Secs              int64
}

// ParsePattern checks a pattern; Hydra finds an unknown specifier or a
// dangling % only when the first output arrives, and then kills the job.
func ParsePattern(s string) (*Pattern, error) {
	p := &Pattern{src: s}
	lit := []byte{}
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			lit = append(lit, s[i])
			continue
		}
		if i+1 == len(s) {
			return nil, fmt.Errorf("pattern %q: dangling %% at its end (%%%% is a percent sign)", s)
		}
		i++
		switch c := s[i]; c {
		case '%':
			lit = append(lit, '%')
		case 'r', 'g', 'p', 'h', 't':
			if len(lit) > 0 {
				p.parts = append(p.parts, patPart{lit: string(lit)})
				lit = lit[:0]
			}
			p.parts = append(p.parts, patPart{verb: c})
		default:
			return nil, fmt.Errorf("pattern %q: unknown specifier %%%c (known: %%r %%g %%p %%h %%t %%%%)", s, c)
		}
	}
	if len(lit) > 0 {
		p.parts = append(p.parts, patPart{lit: string(lit)})
	}
	return p, nil
}

// String is the pattern as given.
func (p *Pattern) String() string { return p.src }

// UsesTime reports whether the pattern contains %t.
func (p *Pattern) UsesTime() bool {
	for _, pp := range p.parts {
		if pp.verb == 't' {
			return true
		}
	}
	return false
}

// Expand appends the pattern for v to dst.
func (p *Pattern) Expand(dst []byte, v PatternVars) []byte {
	for _, pp := range p.parts {
		switch pp.verb {
		case 0:
			dst = append(dst, pp.lit...)
		case 'r':
			dst = strconv.AppendInt(dst, int64(v.Rank), 10)
		case 'g':
			dst = strconv.AppendInt(dst, int64(v.PGID), 10)
		case 'p':
			dst = strconv.AppendInt(dst, int64(v.Proxy), 10)
		case 'h':
			dst = append(dst, v.Host...)
		case 't':
			dst = strconv.AppendInt(dst, v.Secs, 10)
		}
	}
	return dst
}
