package hostfile

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// ParseLSF reads LSF's LSB_MCPU_HOSTS: host names each followed by its
// slot count ("hostA 4 hostB 4"). A host named twice gets both counts.
func ParseLSF(v string) ([]Host, error) {
	f := strings.Fields(v)
	perr := func(tok, msg string) error { return &ParseError{File: "LSB_MCPU_HOSTS", Token: tok, Msg: msg} }
	if len(f) == 0 {
		return nil, perr("", "empty")
	}
	if len(f)%2 != 0 {
		return nil, perr(f[len(f)-1], "want host and slot count pairs; the last host has no count")
	}
	var hosts []Host
	index := map[string]int{}
	for i := 0; i < len(f); i += 2 {
		if err := checkName(f[i]); err != nil {
			return nil, perr(f[i], err.Error())
		}
		n, err := parseCount(f[i+1])
		if err != nil {
			return nil, perr(f[i]+" "+f[i+1], err.Error())
		}
		if err := addHost(&hosts, index, Host{Name: f[i], Slots: n}); err != nil {
			return nil, perr(f[i], err.Error())
		}
	}
	return hosts, nil
}

// ParseSGE reads a Grid Engine PE_HOSTFILE: one line per host, "host slots
// queue processor-range" (the last two are not used).
func ParseSGE(r io.Reader, filename string) ([]Host, error) {
	var hosts []Host
	index := map[string]int{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	line := 0
	for sc.Scan() {
		line++
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		perr := func(tok, msg string) error { return &ParseError{File: filename, Line: line, Token: tok, Msg: msg} }
		if len(f) < 2 {
			return nil, perr(f[0], "want host and slot count")
		}
		if err := checkName(f[0]); err != nil {
			return nil, perr(f[0], err.Error())
		}
		n, err := parseCount(f[1])
		if err != nil {
			return nil, perr(f[1], err.Error())
		}
		if err := addHost(&hosts, index, Host{Name: f[0], Slots: n}); err != nil {
			return nil, perr(f[0], err.Error())
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", filename, err)
	}
	if len(hosts) == 0 {
		return nil, &ParseError{File: filename, Msg: "no hosts"}
	}
	return hosts, nil
}
