package proxy

import "strings"

// envList is an environment where a later KEY=VALUE replaces an earlier one.
type envList struct {
	idx map[string]int
	kvs []string
}

func (e *envList) set(kv string) {
	k, _, _ := strings.Cut(kv, "=")
	if e.idx == nil {
		e.idx = map[string]int{}
	}
	if i, ok := e.idx[k]; ok {
		e.kvs[i] = kv
		return
	}
	e.idx[k] = len(e.kvs)
	e.kvs = append(e.kvs, kv)
}

func (e *envList) list() []string { return e.kvs }

func (e *envList) has(key string) bool {
	_, ok := e.idx[key]
	return ok
}

// clone copies e so per-rank variables can be set without touching it.
func (e *envList) clone() *envList {
	c := &envList{idx: make(map[string]int, len(e.idx)+8), kvs: make([]string, len(e.kvs), len(e.kvs)+8)}
	copy(c.kvs, e.kvs)
	for k, v := range e.idx {
		c.idx[k] = v
	}
	return c
}
