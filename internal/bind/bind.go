// Package bind maps ranks to CPU sets and memory nodes for gompiexec
// -bind-to, -map-by and -membind, as Hydra's hwloc binding does, from
// Linux sysfs: no hwloc on the launch path. A host's local ranks take the
// objects of the chosen type (hardware thread, core, cache, socket, NUMA
// node, machine, or the CPUs near an I/O device: device.go) in the order
// the mapping gives (plan.go), among the CPUs the proxy itself may use.
package bind

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Types are the object types -bind-to and -map-by accept besides none
// (and, for -bind-to, user:). lNcache is a cache level as sysfs numbers it.
var Types = []string{"hwthread", "core", "l1cache", "l2cache", "l3cache", "socket", "numa", "machine"}

// Spec is a parsed -bind-to or -map-by value; the zero Spec binds nothing.
type Spec struct {
	Type string // "" for none; "user" for explicit CPU lists
	N    int    // objects per rank (TYPE:N), >= 1 when Type is set
	// User is user:'s CPU list per local rank; ranks beyond it are not
	// bound (as in Hydra).
	User [][]int
	// Name picks one device of a device type (device.go): a PCI bus id,
	// gpuN, or an interface or adapter name (eth0, ib0, hfi1_0).
	Name string
	// Devices are the local CPUs of each device a device type names (nil
	// entries: the whole machine), as ReadDevices finds them; Plan needs
	// them for device types.
	Devices [][]int
}

// None reports whether s binds nothing.
func (s Spec) None() bool { return s.Type == "" }

func (s Spec) String() string {
	switch {
	case s.None():
		return "none"
	case s.Type == "user":
		var parts []string
		for _, cpus := range s.User {
			var ids []string
			for _, c := range cpus {
				ids = append(ids, strconv.Itoa(c))
			}
			parts = append(parts, strings.Join(ids, "+"))
		}
		return "user:" + strings.Join(parts, ",")
	}
	typ := s.Type
	switch {
	case s.Type == "pci":
		return "pci:" + s.Name
	case s.Name != "":
		typ = s.Name
	}
	if s.N == 1 {
		return typ
	}
	return typ + ":" + strconv.Itoa(s.N)
}

// Parse reads a -bind-to value: TYPE, TYPE:N, rr or user:CPU[+CPU...][,...]
// ("" and "none" bind nothing).
func Parse(v string) (Spec, error) { return parse("-bind-to", v, true) }

// ParseMap reads a -map-by value: TYPE or TYPE:N ("" and "none": map by
// the binding's own objects).
func ParseMap(v string) (Spec, error) { return parse("-map-by", v, false) }

func parse(opt, v string, user bool) (Spec, error) {
	typ, count, hasN := strings.Cut(v, ":")
	if typ == "none" || v == "" {
		if hasN {
			return Spec{}, fmt.Errorf("%s %q: none takes no count", opt, v)
		}
		return Spec{}, nil
	}
	if typ == "user" && user {
		return parseUser(v, count)
	}
	if typ == "rr" && user {
		// Hydra's round-robin over hardware threads by OS number.
		if hasN {
			return Spec{}, fmt.Errorf("%s %q: rr takes no count", opt, v)
		}
		return Spec{Type: "rr", N: 1}, nil
	}
	if s, ok, err := parseDevice(opt, v); ok {
		return s, err
	}
	known := slices.Contains(Types, typ) || cacheLevel(typ) > 0
	if !known {
		names := strings.Join(Types, ", ") + ", pci:BUSID, gpu[N], ib[NAME], hfi[NAME], en, eth[NAME]"
		if user {
			names += ", rr, user:"
		}
		return Spec{}, fmt.Errorf("%s %q: unknown type %q (known: none, %s)", opt, v, typ, names)
	}
	n := 1
	if hasN {
		var err error
		if n, err = strconv.Atoi(count); err != nil || n < 1 {
			return Spec{}, fmt.Errorf("%s %q: count %q: want an integer >= 1", opt, v, count)
		}
	}
	return Spec{Type: typ, N: n}, nil
}

// parseUser reads user:'s list: ranks separated by ",", a rank's CPUs by
// "+" (Hydra's syntax; "0-3" ranges are accepted too).
func parseUser(v, list string) (Spec, error) {
	if list == "" {
		return Spec{}, fmt.Errorf("-bind-to %q: user: needs CPU lists, e.g. user:0+2,1+3", v)
	}
	s := Spec{Type: "user", N: 1}
	for _, part := range strings.Split(list, ",") {
		cpus, err := ParseList(strings.ReplaceAll(part, "+", ","))
		if errors.Is(err, errTooLarge) {
			return Spec{}, fmt.Errorf("-bind-to %q: rank %d's CPUs %q: %w", v, len(s.User), part, err)
		}
		if err != nil || len(cpus) == 0 {
			return Spec{}, fmt.Errorf("-bind-to %q: rank %d's CPUs %q: want CPU numbers joined by +", v, len(s.User), part)
		}
		slices.Sort(cpus)
		s.User = append(s.User, slices.Compact(cpus))
	}
	return s, nil
}

// cacheLevel is N for "lNcache", else 0.
func cacheLevel(typ string) int {
	l, ok := strings.CutPrefix(typ, "l")
	if !ok {
		return 0
	}
	if l, ok = strings.CutSuffix(l, "cache"); !ok {
		return 0
	}
	n, err := strconv.Atoi(l)
	if err != nil || n < 1 || n > 9 {
		return 0
	}
	return n
}

// CPU is one hardware thread the proxy may use.
type CPU struct {
	ID      int
	Package int
	Core    int // the lowest CPU of its thread siblings: one value per core
	Node    int // NUMA node; 0 when the kernel has no node directory
	// Cache maps a cache level read by Read to the lowest CPU sharing
	// that cache with this one: one value per cache instance.
	Cache map[int]int
}

// Topology is the usable CPUs in topology order: by package, then core,
// then thread (hwloc's logical order).
type Topology []CPU

// Read reads the topology of the allowed CPUs from a sysfs tree rooted at
// root (normally /sys/devices/system, with cpu/ and node/ below it), and
// the sharing of the given cache levels (only those: a file per CPU each).
func Read(root string, allowed []int, cacheLevels ...int) (Topology, error) {
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
		c := CPU{ID: id, Package: pkg, Core: sib[0], Node: nodes[id]}
		if len(cacheLevels) > 0 {
			if c.Cache, err = readCaches(filepath.Join(root, "cpu", "cpu"+strconv.Itoa(id), "cache"), cacheLevels); err != nil {
				return nil, err
			}
		}
		t = append(t, c)
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

// readCaches reads which CPUs share each wanted level's cache with the
// CPU whose cache directory is dir. Level 1 is the data (or unified)
// cache, as hwloc's l1cache; an instruction cache is skipped.
func readCaches(dir string, levels []int) (map[int]int, error) {
	m := map[int]int{}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "index") {
			continue
		}
		idx := filepath.Join(dir, e.Name())
		level, err := readInt(filepath.Join(idx, "level"))
		if err != nil {
			return nil, err
		}
		if !slices.Contains(levels, level) {
			continue
		}
		if typ, err := os.ReadFile(filepath.Join(idx, "type")); err == nil && strings.TrimSpace(string(typ)) == "Instruction" {
			continue
		}
		shared, err := readList(filepath.Join(idx, "shared_cpu_list"))
		if err != nil {
			return nil, err
		}
		if len(shared) == 0 {
			return nil, fmt.Errorf("%s: empty", filepath.Join(idx, "shared_cpu_list"))
		}
		m[level] = shared[0]
	}
	return m, nil
}

// Objects are the CPU sets of typ's objects that hold usable CPUs, in
// topology order. A cache level that no CPU reports (or that Read was not
// asked for) has no objects.
func (t Topology) Objects(typ string) [][]int {
	level := cacheLevel(typ)
	key := func(c CPU) (int, bool) {
		switch typ {
		case "hwthread":
			return c.ID, true
		case "core":
			return c.Core, true
		case "socket":
			return c.Package, true
		case "machine":
			return 0, true
		case "numa":
			return c.Node, true
		}
		k, ok := c.Cache[level]
		return k, ok
	}
	var objs [][]int
	index := map[int]int{}
	for _, c := range t {
		k, ok := key(c)
		if !ok {
			continue
		}
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

// MaxCPU is the largest CPU or NUMA node number a list may name: Linux's
// own limit (CONFIG_NR_CPUS) is at most 8192, and a bound keeps a typo such
// as user:0-999999999 from expanding into billions of numbers.
const MaxCPU = 1<<16 - 1

var errTooLarge = errors.New("list too large")

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
		if b > MaxCPU {
			return nil, fmt.Errorf("%w: %d is past the largest number, %d", errTooLarge, b, MaxCPU)
		}
		if len(out)+b-a >= MaxCPU+1 {
			return nil, fmt.Errorf("%w: more than %d entries", errTooLarge, MaxCPU+1)
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
