package bind

import (
	"fmt"
	"slices"
)

// CacheLevels are the cache levels Read must read for binding b mapped by m.
func CacheLevels(b, m Spec) []int {
	var l []int
	for _, s := range []Spec{b, m} {
		if n := cacheLevel(s.Type); n > 0 && !slices.Contains(l, n) {
			l = append(l, n)
		}
	}
	return l
}

// Plan is the sequence of CPU sets a host's local ranks take in turn for
// binding b mapped by m (m.None(): by b's own objects, count included):
// local rank l gets Pick(sets, l). It follows Hydra's hwloc mapping:
//
//  1. Map domains are m.N consecutive mapping objects each (wrapping, so
//     that every object starts a domain once the list is repeated).
//  2. Ranks go to the domains round-robin. In a domain larger than a
//     binding (in CPUs), a rank takes b.N binding objects from the domain's
//     next unused CPU on, wrapping inside the domain; otherwise it takes
//     b.N consecutive binding objects from the domain's first CPU on.
//
// So -bind-to core -map-by socket puts consecutive ranks on different
// sockets, and -bind-to core alone fills one socket's cores first.
func (t Topology) Plan(b, m Spec) ([][]int, error) {
	if b.None() {
		return nil, nil
	}
	switch b.Type {
	case "user":
		return b.User, nil
	case "rr":
		// One hardware thread each, by OS number (not topology order),
		// whatever -map-by says: as Hydra's rr.
		var sets [][]int
		for _, c := range t.ids() {
			sets = append(sets, []int{c})
		}
		return sets, nil
	}
	if m.None() {
		m = b
	}
	// As Hydra: devices map only by devices of the same kind.
	if (m.Device() && !b.Device()) || (b.Device() && m.Type != b.Type) {
		return nil, fmt.Errorf("-bind-to %s cannot be mapped by %s: device bindings map by their own devices only", b, m)
	}
	bindObjs, mapObjs := t.objectsOf(b), t.objectsOf(m)
	for _, o := range []struct {
		objs [][]int
		typ  string
	}{{bindObjs, b.Type}, {mapObjs, m.Type}} {
		if len(o.objs) == 0 {
			return nil, fmt.Errorf("no %s among the CPUs this host allows (%s)", o.typ, Format(t.ids()))
		}
	}
	total := len(t)
	pusMap := total / len(mapObjs) * m.N
	if pusMap > total {
		return nil, fmt.Errorf("-map-by %s: %d %s objects span more than the %d CPUs this host allows", m, m.N, m.Type, total)
	}
	pos := make(map[int]int, total) // CPU -> topology position
	for i, c := range t {
		pos[c.ID] = i
	}
	byPos := func(cpus []int) []int {
		slices.SortFunc(cpus, func(a, b int) int { return pos[a] - pos[b] })
		return slices.Compact(cpus)
	}

	// 1. Map domains, each with the CPU its ranks start from.
	rep := 1
	for (rep*len(mapObjs))%m.N != 0 {
		rep++
	}
	nDomains := rep * len(mapObjs) / m.N
	domains := make([][]int, nDomains)
	start := make([]int, nDomains) // a CPU
	for d, k := 0, 0; d < nDomains; d++ {
		start[d] = mapObjs[k%len(mapObjs)][0]
		for j := 0; j < m.N; j, k = j+1, k+1 {
			domains[d] = append(domains[d], mapObjs[k%len(mapObjs)]...)
		}
		domains[d] = byPos(domains[d])
	}

	// 2. Bindings, round-robin over the domains.
	// A CPU's binding object is the first that holds it (devices' CPU sets
	// can overlap: Hydra takes the first too).
	objOf := map[int]int{}
	for i, o := range bindObjs {
		for _, c := range o {
			if _, ok := objOf[c]; !ok {
				objOf[c] = i
			}
		}
	}
	pusBind := total / len(bindObjs) * b.N
	smaller := pusBind < pusMap
	n := nDomains
	if smaller {
		rep = 1
		for (rep*pusMap)%pusBind != 0 {
			rep++
		}
		n = rep * pusMap * nDomains / pusBind
	}
	var sets [][]int
	for len(sets) < n {
		for d := 0; d < nDomains; d++ {
			o := objOf[start[d]]
			inside := insideObjs(bindObjs, domains[d])
			var set []int
			for k := 0; k < b.N; k++ {
				set = append(set, bindObjs[o]...)
				if smaller {
					o = nextInside(inside, o)
				} else {
					o = (o + 1) % len(bindObjs)
				}
			}
			sets = append(sets, sortedUnique(set))
			if smaller {
				i := slices.Index(domains[d], start[d])
				start[d] = domains[d][(i+pusBind)%len(domains[d])]
			}
		}
	}
	return sets, nil
}

// objectsOf are s's objects: Objects(s.Type), or for a device type each
// device's local CPUs among t's, in topology order (nil: all of t).
func (t Topology) objectsOf(s Spec) [][]int {
	if !s.Device() {
		return t.Objects(s.Type)
	}
	var objs [][]int
	for _, local := range s.Devices {
		var o []int
		for _, c := range t {
			if local == nil || slices.Contains(local, c.ID) {
				o = append(o, c.ID)
			}
		}
		if len(o) > 0 {
			objs = append(objs, o)
		}
	}
	return objs
}

// insideObjs are the indices of the objects wholly inside cpus.
func insideObjs(objs [][]int, cpus []int) []int {
	var in []int
	for i, o := range objs {
		all := true
		for _, c := range o {
			all = all && slices.Contains(cpus, c)
		}
		if all {
			in = append(in, i)
		}
	}
	return in
}

// nextInside is the first of inside after o, wrapping; o when none is.
func nextInside(inside []int, o int) int {
	for _, i := range inside {
		if i > o {
			return i
		}
	}
	if len(inside) > 0 {
		return inside[0]
	}
	return o
}

func sortedUnique(cpus []int) []int {
	slices.Sort(cpus)
	return slices.Compact(cpus)
}

// Pick is local rank local's CPUs from Plan's sets: round-robin, except
// that user: lists bind only the ranks they name (nil: not bound).
func Pick(sets [][]int, b Spec, local int) []int {
	if len(sets) == 0 || (b.Type == "user" && local >= len(sets)) {
		return nil
	}
	return sets[local%len(sets)]
}

func (t Topology) ids() []int {
	ids := make([]int, len(t))
	for i, c := range t {
		ids[i] = c.ID
	}
	slices.Sort(ids)
	return ids
}
