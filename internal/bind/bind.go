// Package bind maps ranks to CPU sets for gompiexec -bind-to, as Hydra's
// hwloc binding does, from Linux sysfs: no hwloc on the launch path. A
// host's local ranks take the objects of the chosen type (hardware thread,
// core, socket, NUMA node) round-robin, in topology order, among the CPUs
// the proxy itself may use.
package bind

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Types are the object types -bind-to accepts besides none.
var Types = []string{"hwthread", "core", "socket", "numa"}

// Spec is a parsed -bind-to value; the zero Spec binds nothing.
type Spec struct {
	Type string // "" for none
	N    int    // objects per rank (TYPE:N), >= 1 when Type is set
}

// None reports whether s binds nothing.
func (s Spec) None() bool { return s.Type == "" }

func (s Spec) String() string {
	switch {
	case s.None():
		return "none"
	case s.N == 1:
		return s.Type
	}
	return s.Type + ":" + strconv.Itoa(s.N)
}

// Parse reads TYPE or TYPE:N ("" and "none" bind nothing).
func Parse(v string) (Spec, error) {
	typ, count, hasN := strings.Cut(v, ":")
	if typ == "none" || v == "" {
		if hasN {
			return Spec{}, fmt.Errorf("-bind-to %q: none takes no count", v)
		}
		return Spec{}, nil
	}
	known := false
	for _, t := range Types {
		known = known || t == typ
	}
	if !known {
		return Spec{}, fmt.Errorf("-bind-to %q: unknown type %q (known: none, %s)", v, typ, strings.Join(Types, ", "))
	}
	n := 1
	if hasN {
		var err error
		if n, err = strconv.Atoi(count); err != nil || n < 1 {
			return Spec{}, fmt.Errorf("-bind-to %q: count %q: want an integer >= 1", v, count)
		}
	}
	return Spec{Type: typ, N: n}, nil
}

// CPU is one hardware thread the proxy may use.
type CPU struct {
	ID      int
	Package int
	Core    int // the lowest CPU of its thread siblings: one value per core
	Node    int // NUMA node; 0 when the kernel has no node directory
}

// Topology is the usable CPUs in topology order: by package, then core,
// then thread (hwloc's logical order).
type Topology []CPU

// Read reads the topology of the allowed CPUs from a sysfs tree rooted at
// root (normally /sys/devices/system, with cpu/ and node/ below it).
func Read(root string, allowed []int) (Topology, error) {
	nodes, err := readNodes(filepath.Join(root, "node"))
	if err != nil {
		return nil, err
	}
	var t Topology
	for _, id := range allowed {
		dir := filepath.Join(root, "cpu", "cpu"+strconv.Itoa(id), "topology")
		pkg, err := readInt(filepath.Join(dir, "physical_package_id"))
		if err != nil {
			return nil, err
		}
		// The siblings name the core across dies and packages, where
		// core_id alone repeats.
		sib, err := readList(filepath.Join(dir, "thread_siblings_list"))
		if err != nil {
			return nil, err
		}
		if len(sib) == 0 {
			return nil, fmt.Errorf("%s: empty", filepath.Join(dir, "thread_siblings_list"))
		}
		t = append(t, CPU{ID: id, Package: pkg, Core: sib[0], Node: nodes[id]})
	}
	sort.Slice(t, func(i, j int) bool {
		a, b := t[i], t[j]
		if a.Package != b.Package {
			return a.Package < b.Package
		}
		if a.Core != b.Core {
			return a.Core < b.Core
		}
		return a.ID < b.ID
	})
	return t, nil
}

// readNodes maps CPU to NUMA node from node/nodeN/cpulist; without that
// directory (a kernel without NUMA) every CPU is on node 0.
func readNodes(dir string) (map[int]int, error) {
	m := map[int]int{}
	ents, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return m, nil
	}
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		n, err := strconv.Atoi(strings.TrimPrefix(e.Name(), "node"))
		if err != nil || !strings.HasPrefix(e.Name(), "node") {
			continue
		}
		cpus, err := readList(filepath.Join(dir, e.Name(), "cpulist"))
		if err != nil {
			return nil, err
		}
		for _, c := range cpus {
			m[c] = n
		}
	}
	return m, nil
}

// Objects are the CPU sets of typ's objects that hold usable CPUs, in
// topology order.
func (t Topology) Objects(typ string) [][]int {
	key := func(c CPU) int {
		switch typ {
		case "hwthread":
			return c.ID
		case "core":
			return c.Core
		case "socket":
			return c.Package
		}
		return c.Node
	}
	var objs [][]int
	index := map[int]int{}
	for _, c := range t {
		k := key(c)
		i, ok := index[k]
		if !ok {
			i = len(objs)
			index[k] = i
			objs = append(objs, nil)
		}
		objs[i] = append(objs[i], c.ID)
	}
	if typ == "numa" {
		// Nodes in node order; the CPUs' order puts them in package order.
		sort.SliceStable(objs, func(i, j int) bool { return t.node(objs[i][0]) < t.node(objs[j][0]) })
	}
	return objs
}

func (t Topology) node(cpu int) int {
	for _, c := range t {
		if c.ID == cpu {
			return c.Node
		}
	}
	return -1
}

// Assign is local rank local's CPUs: n consecutive objects, taken
// round-robin (the objects wrap when ranks outnumber them). Sorted.
func Assign(objs [][]int, local, n int) []int {
	if len(objs) == 0 {
		return nil
	}
	var cpus []int
	seen := map[int]bool{}
	for j := 0; j < n; j++ {
		for _, c := range objs[(local*n+j)%len(objs)] {
			if !seen[c] {
				seen[c] = true
				cpus = append(cpus, c)
			}
		}
	}
	sort.Ints(cpus)
	return cpus
}

// Format writes cpus as a Linux CPU list (0-3,8), as Cpus_allowed_list.
func Format(cpus []int) string {
	var b strings.Builder
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(cpus[i]))
		if j > i {
			b.WriteString("-" + strconv.Itoa(cpus[j]))
		}
		i = j + 1
	}
	return b.String()
}

// ParseList reads a Linux CPU list ("0-3,8"; "" is empty).
func ParseList(s string) ([]int, error) {
	var out []int
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("bad CPU list %q", s)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("bad CPU list %q", s)
			}
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	return out, nil
}

func readList(path string) ([]int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	l, err := ParseList(string(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return l, nil
}

func readInt(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("%s: %q: not a number", path, strings.TrimSpace(string(b)))
	}
	return n, nil
}
