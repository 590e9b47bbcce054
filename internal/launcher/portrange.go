package launcher

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// PortRange is a range of TCP ports to listen on, as Hydra reads it from
// MPIEXEC_PORT_RANGE and its aliases.
type PortRange struct {
	Min, Max int
	// From names where the range came from (a variable), for errors.
	From string
}

// ErrNoFreePort is returned when every port of a PortRange is in use.
var ErrNoFreePort = errors.New("no free port in range")

// ParsePortRange reads "MIN:MAX" (Hydra's form), 1 <= MIN <= MAX <= 65535.
func ParsePortRange(from, v string) (*PortRange, error) {
	lo, hi, ok := strings.Cut(v, ":")
	min, err1 := strconv.Atoi(strings.TrimSpace(lo))
	max, err2 := strconv.Atoi(strings.TrimSpace(hi))
	if !ok || err1 != nil || err2 != nil || min < 1 || max > 65535 || min > max {
		return nil, fmt.Errorf("%s=%q: want MIN:MAX, ports 1 to 65535", from, v)
	}
	return &PortRange{Min: min, Max: max, From: from}, nil
}

func (r *PortRange) String() string { return fmt.Sprintf("%s %d:%d", r.From, r.Min, r.Max) }

// listen listens on addr, or, with a range, on addr's host and the first
// port of the range that is free.
func listen(addr string, r *PortRange) (net.Listener, error) {
	if r == nil {
		return net.Listen("tcp", addr)
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	var last error
	for p := r.Min; p <= r.Max; p++ {
		ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p)))
		if err == nil {
			return ln, nil
		}
		last = err
	}
	return nil, fmt.Errorf("%w %s (last: %v)", ErrNoFreePort, r, last)
}
