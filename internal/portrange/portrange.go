// Package portrange reads MPICH's port-range variables and listens on a
// port of the range, for clusters whose firewalls open only some ports
// between nodes (Hydra and MPICH's ch3 honour the same variables).
package portrange

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"syscall"
)

// Vars are the variables a range is read from, the first one set winning
// (Hydra's order).
var Vars = []string{
	"MPIR_CVAR_CH3_PORT_RANGE", "MPIR_PARAM_CH3_PORT_RANGE", "MPICH_CH3_PORT_RANGE",
	"MPIR_CVAR_PORTRANGE", "MPIR_CVAR_PORT_RANGE", "MPIR_PARAM_PORTRANGE", "MPIR_PARAM_PORT_RANGE",
	"MPICH_PORTRANGE", "MPICH_PORT_RANGE", "MPIEXEC_PORTRANGE", "MPIEXEC_PORT_RANGE",
}

// Range is the ports a listener may take; the zero Range is any port.
type Range struct {
	Lo, Hi int
	From   string // the variable it came from, for messages
}

// Any reports whether r leaves the port to the kernel.
func (r Range) Any() bool { return r.Lo == 0 && r.Hi == 0 }

func (r Range) String() string {
	if r.Any() {
		return "any port"
	}
	return fmt.Sprintf("ports %d-%d (%s)", r.Lo, r.Hi, r.From)
}

// FromEnv reads the first of Vars that is set; an error names it.
func FromEnv(getenv func(string) string) (Range, error) {
	for _, k := range Vars {
		v := getenv(k)
		if v == "" {
			continue
		}
		lo, hi, err := Parse(v)
		if err != nil {
			return Range{}, fmt.Errorf("%s=%q: %w", k, v, err)
		}
		return Range{Lo: lo, Hi: hi, From: k}, nil
	}
	return Range{}, nil
}

// Parse reads "MIN:MAX" (MPICH's form); "0:0" is any port.
func Parse(v string) (lo, hi int, err error) {
	a, b, ok := strings.Cut(strings.TrimSpace(v), ":")
	if !ok {
		return 0, 0, errors.New("want MIN:MAX, e.g. 50000:50100")
	}
	lo, err1 := strconv.Atoi(a)
	hi, err2 := strconv.Atoi(b)
	switch {
	case err1 != nil || err2 != nil:
		return 0, 0, errors.New("want MIN:MAX, e.g. 50000:50100")
	case lo == 0 && hi == 0:
		return 0, 0, nil
	case lo < 1 || hi > 65535 || lo > hi:
		return 0, 0, errors.New("want 1 <= MIN <= MAX <= 65535")
	}
	return lo, hi, nil
}

// Listen listens on TCP at host (an address or "" for every interface) on
// a port of r, trying them from a random one on, so that ranks starting
// together do not all race for the first.
func (r Range) Listen(host string) (net.Listener, error) {
	if r.Any() {
		return net.Listen("tcp", net.JoinHostPort(host, "0"))
	}
	n := r.Hi - r.Lo + 1
	start := rand.IntN(n)
	for i := 0; i < n; i++ {
		port := r.Lo + (start+i)%n
		ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err == nil {
			return ln, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("no free port among %s", r)
}
