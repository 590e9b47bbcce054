package bind

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// MemPolicies are the -membind policies.
var MemPolicies = []string{"firsttouch", "nexttouch", "bind", "interleave"}

// MemSpec is a parsed -membind value; the zero MemSpec leaves memory
// placement alone.
type MemSpec struct {
	Policy string // "" for none
	// Nodes are bind:'s or interleave:'s NUMA nodes; empty: the nodes of
	// the rank's CPUs (what Hydra uses whatever the list says).
	Nodes []int
}

// None reports whether m leaves memory placement alone.
func (m MemSpec) None() bool { return m.Policy == "" }

func (m MemSpec) String() string {
	switch m.Policy {
	case "":
		return "none"
	case "bind", "interleave":
		return m.Policy + ":" + Format(m.Nodes)
	}
	return m.Policy
}

// ParseMem reads a -membind value: firsttouch, nexttouch, bind:NODES or
// interleave:NODES (NODES a list such as 0,2 or 0-3; empty: the nodes of
// the rank's CPUs).
func ParseMem(v string) (MemSpec, error) {
	pol, list, hasList := strings.Cut(v, ":")
	switch {
	case v == "" || v == "none":
		return MemSpec{}, nil
	case pol == "firsttouch" || pol == "nexttouch":
		if hasList {
			return MemSpec{}, fmt.Errorf("-membind %q: %s takes no node list", v, pol)
		}
		return MemSpec{Policy: pol}, nil
	case pol == "bind" || pol == "interleave":
		nodes, err := ParseList(list)
		if errors.Is(err, errTooLarge) {
			return MemSpec{}, fmt.Errorf("-membind %q: node list %q: %w", v, list, err)
		}
		if err != nil {
			return MemSpec{}, fmt.Errorf("-membind %q: node list %q: want NUMA node numbers such as 0,2 or 0-1", v, list)
		}
		slices.Sort(nodes)
		return MemSpec{Policy: pol, Nodes: slices.Compact(nodes)}, nil
	}
	return MemSpec{}, fmt.Errorf("-membind %q: unknown policy %q (known: %s)", v, pol, strings.Join(MemPolicies, ", "))
}

// ReadNodes lists the host's NUMA nodes from sysfs under root (node/nodeN);
// a kernel without NUMA has node 0 alone.
func ReadNodes(root string) ([]int, error) {
	ents, err := os.ReadDir(filepath.Join(root, "node"))
	if os.IsNotExist(err) {
		return []int{0}, nil
	}
	if err != nil {
		return nil, err
	}
	var nodes []int
	for _, e := range ents {
		if n, err := strconv.Atoi(strings.TrimPrefix(e.Name(), "node")); err == nil && strings.HasPrefix(e.Name(), "node") {
			nodes = append(nodes, n)
		}
	}
	slices.Sort(nodes)
	return nodes, nil
}

// MemNodes is the node set m applies for a rank bound to cpus (nil: not
// bound), checked against the host's nodes: the listed ones, or else
// the nodes of the rank's CPUs (every node of t when it is not bound).
func (t Topology) MemNodes(m MemSpec, cpus []int, hostNodes []int) ([]int, error) {
	for _, n := range m.Nodes {
		if !slices.Contains(hostNodes, n) {
			return nil, fmt.Errorf("-membind %s: NUMA node %d does not exist here (nodes: %s)", m, n, Format(hostNodes))
		}
	}
	if len(m.Nodes) > 0 {
		return m.Nodes, nil
	}
	var nodes []int
	for _, c := range t {
		if cpus == nil || slices.Contains(cpus, c.ID) {
			nodes = append(nodes, c.Node)
		}
	}
	return sortedUnique(nodes), nil
}
