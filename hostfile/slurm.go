package hostfile

import (
	"fmt"
	"strconv"
	"strings"
)

// maxExpanded bounds a compressed Slurm node list so a typo like
// node[1-999999999] is an error rather than an allocation of gigabytes.
const maxExpanded = 1 << 16

// ParseSlurm expands a Slurm node list ("node[01-04,07],gpu3",
// "rack[1-2]-n[1-3]") and a tasks-per-node list ("2(x3),1").
func ParseSlurm(nodelist, tasksPerNode string) ([]Host, error) {
	names, err := ExpandNodeList(nodelist)
	if err != nil {
		return nil, err
	}
	slots := make([]int, len(names))
	for i := range slots {
		slots[i] = 1
	}
	if tasksPerNode != "" {
		counts, err := expandTasks(tasksPerNode)
		if err != nil {
			return nil, err
		}
		if len(counts) != len(names) {
			return nil, fmt.Errorf("SLURM_TASKS_PER_NODE %q gives %d counts but node list %q has %d nodes",
				tasksPerNode, len(counts), nodelist, len(names))
		}
		slots = counts
	}
	hosts := make([]Host, 0, len(names))
	index := map[string]int{}
	for i, n := range names {
		if j, ok := index[n]; ok {
			hosts[j].Slots += slots[i]
			continue
		}
		index[n] = len(hosts)
		hosts = append(hosts, Host{Name: n, Slots: slots[i]})
	}
	return hosts, nil
}

// ExpandNodeList expands a Slurm hostlist expression.
func ExpandNodeList(list string) ([]string, error) {
	items, err := splitTopLevel(list)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, item := range items {
		if item == "" {
			return nil, fmt.Errorf("node list %q: empty entry", list)
		}
		names, err := expandItem(item)
		if err != nil {
			return nil, fmt.Errorf("node list %q: %w", list, err)
		}
		out = append(out, names...)
		if len(out) > maxExpanded {
			return nil, fmt.Errorf("node list %q expands to more than %d nodes", list, maxExpanded)
		}
	}
	return out, nil
}

// splitTopLevel splits at commas outside brackets.
func splitTopLevel(s string) ([]string, error) {
	var items []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			depth++
			if depth > 1 {
				return nil, fmt.Errorf("node list %q: nested '['", s)
			}
		case ']':
			depth--
			if depth < 0 {
				return nil, fmt.Errorf("node list %q: unmatched ']'", s)
			}
		case ',':
			if depth == 0 {
				items = append(items, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("node list %q: unmatched '['", s)
	}
	return append(items, strings.TrimSpace(s[start:])), nil
}

// expandItem expands one entry, which may hold several bracket groups; the
// result is their cartesian product in order.
func expandItem(item string) ([]string, error) {
	open := strings.IndexByte(item, '[')
	if open < 0 {
		if err := checkName(item); err != nil {
			return nil, fmt.Errorf("%q: %w", item, err)
		}
		return []string{item}, nil
	}
	end := strings.IndexByte(item[open:], ']')
	if end < 0 {
		return nil, fmt.Errorf("%q: unmatched '['", item)
	}
	end += open
	prefix, body, rest := item[:open], item[open+1:end], item[end+1:]
	suffixes, err := expandItemRest(rest)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range strings.Split(body, ",") {
		vals, err := expandRange(r)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", item, err)
		}
		for _, v := range vals {
			for _, s := range suffixes {
				name := prefix + v + s
				if err := checkName(name); err != nil {
					return nil, fmt.Errorf("%q: %w", item, err)
				}
				out = append(out, name)
				if len(out) > maxExpanded {
					return nil, fmt.Errorf("%q expands to more than %d nodes", item, maxExpanded)
				}
			}
		}
	}
	return out, nil
}

func expandItemRest(rest string) ([]string, error) {
	if rest == "" {
		return []string{""}, nil
	}
	if !strings.Contains(rest, "[") {
		return []string{rest}, nil
	}
	return expandItem(rest)
}

// expandRange expands "01-04" or "7"; zero padding follows the start's width.
func expandRange(r string) ([]string, error) {
	lo, hi, isRange := strings.Cut(r, "-")
	a, err := strconv.Atoi(lo)
	if err != nil || a < 0 || lo == "" {
		return nil, fmt.Errorf("bad range %q", r)
	}
	if !isRange {
		return []string{lo}, nil
	}
	b, err := strconv.Atoi(hi)
	if err != nil || b < a {
		return nil, fmt.Errorf("bad range %q", r)
	}
	if b-a >= maxExpanded {
		return nil, fmt.Errorf("range %q has more than %d values", r, maxExpanded)
	}
	width := len(lo)
	out := make([]string, 0, b-a+1)
	for v := a; v <= b; v++ {
		out = append(out, fmt.Sprintf("%0*d", width, v))
	}
	return out, nil
}

// expandTasks expands SLURM_TASKS_PER_NODE, e.g. "2(x3),1" → 2,2,2,1.
func expandTasks(s string) ([]int, error) {
	var out []int
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		count, rep := item, "1"
		if i := strings.IndexByte(item, '('); i >= 0 {
			if !strings.HasPrefix(item[i:], "(x") || !strings.HasSuffix(item, ")") {
				return nil, fmt.Errorf("SLURM_TASKS_PER_NODE %q: bad entry %q", s, item)
			}
			count, rep = item[:i], item[i+2:len(item)-1]
		}
		n, err := parseCount(count)
		if err != nil {
			return nil, fmt.Errorf("SLURM_TASKS_PER_NODE %q: %w", s, err)
		}
		r, err := strconv.Atoi(rep)
		if err != nil || r < 1 || r > maxExpanded {
			return nil, fmt.Errorf("SLURM_TASKS_PER_NODE %q: bad repeat in %q", s, item)
		}
		if len(out)+r > maxExpanded {
			return nil, fmt.Errorf("SLURM_TASKS_PER_NODE %q: too many nodes", s)
		}
		for k := 0; k < r; k++ {
			out = append(out, n)
		}
	}
	return out, nil
}
