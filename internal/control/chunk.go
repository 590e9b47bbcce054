package control

import "github.com/gompi/gompi/pmi"

// FenceChunk bounds the raw bytes of pairs in one fence or fence_done
// message. A round's pairs can exceed MaxFrame (thousands of ranks'
// business cards), so they travel as a run of messages, all but the last
// with More set; JSON escaping grows a byte to at most 6, so a chunk's
// frame stays under MaxFrame.
const FenceChunk = MaxFrame / 8

// SplitKVS returns m as a run of messages whose KVS together are m's, in
// order; only the last lacks More (and carries m's Error).
func SplitKVS(m Msg) []Msg {
	var out []Msg
	start, size := 0, 0
	for i, kv := range m.KVS {
		n := len(kv.Key) + len(kv.Value) + 32
		if size+n > FenceChunk && i > start {
			part := Msg{T: m.T, Host: m.Host, KVS: m.KVS[start:i], More: true}
			out = append(out, part)
			start, size = i, 0
		}
		size += n
	}
	if start > 0 {
		m.KVS = m.KVS[start:]
	}
	return append(out, m)
}

// KVSJoin reassembles a run of messages made by SplitKVS.
type KVSJoin struct{ kvs []pmi.KV }

// Add takes the next message of a run; at its last it returns the whole
// message and true.
func (a *KVSJoin) Add(m Msg) (Msg, bool) {
	if m.More {
		a.kvs = append(a.kvs, m.KVS...)
		return Msg{}, false
	}
	if a.kvs != nil {
		m.KVS, a.kvs = append(a.kvs, m.KVS...), nil
	}
	return m, true
}
