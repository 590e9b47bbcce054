package hostfile

import (
	"errors"
	"fmt"
	"strings"
)

// Policy chooses how ranks are spread over hosts.
type Policy int

const (
	// Fill gives each host as many consecutive ranks as it has slots, then
	// moves on; past the last host it wraps around (oversubscription, as Hydra).
	Fill Policy = iota
	// RoundRobin gives one rank to each host in turn.
	RoundRobin
)

// Options tune placement.
type Options struct {
	// PPN, when > 0, overrides every host's slot count (-ppn).
	PPN    int
	Policy Policy
}

// Rank is where one rank runs.
type Rank struct {
	Rank      int
	Host      int // index into Layout.Hosts
	LocalRank int // index among the ranks on that host
	AppNum    int // MPMD segment
}

// Layout is the result of placement.
type Layout struct {
	// Hosts are the hosts that received ranks, one per name, in the order
	// of their first entry; Slots counts their entries that got ranks
	// (with -ppn, PPN each).
	Hosts []Host
	Ranks []Rank // indexed by global rank
}

// ErrNoSlots is returned when max_slots limits leave no room for a rank.
var ErrNoSlots = errors.New("not enough slots")

// Place assigns counts[i] ranks with appnum i, numbered consecutively across
// segments, to hosts.
func Place(hosts []Host, counts []int, opt Options) (*Layout, error) {
	if len(hosts) == 0 {
		return nil, errors.New("placement: no hosts")
	}
	if len(counts) == 0 {
		return nil, errors.New("placement: no processes requested")
	}
	total := 0
	for i, c := range counts {
		if c <= 0 {
			return nil, fmt.Errorf("placement: segment %d asks for %d processes; need at least 1", i, c)
		}
		total += c
		if total > maxExpanded*16 {
			return nil, fmt.Errorf("placement: more than %d processes", maxExpanded*16)
		}
	}
	if opt.PPN < 0 {
		return nil, fmt.Errorf("placement: -ppn %d must be positive", opt.PPN)
	}
	slots := make([]int, len(hosts))
	for i, h := range hosts {
		slots[i] = h.Slots
		if opt.PPN > 0 {
			slots[i] = opt.PPN
		}
		if slots[i] < 1 {
			slots[i] = 1
		}
	}
	used := make([]int, len(hosts))
	hostOf := make([]int, total)
	h, inHost := 0, 0
	for r := 0; r < total; r++ {
		// Find the next host with room under max_slots; at most one full lap.
		tries := 0
		for {
			full := hosts[h].MaxSlots > 0 && used[h] >= hosts[h].MaxSlots
			turnOver := opt.Policy == RoundRobin && inHost >= 1 || inHost >= slots[h]
			if !full && !turnOver {
				break
			}
			h, inHost = (h+1)%len(hosts), 0
			tries++
			if tries > len(hosts) {
				return nil, fmt.Errorf("placement: rank %d: %w (every host is at max_slots)", r, ErrNoSlots)
			}
		}
		hostOf[r] = h
		used[h]++
		inHost++
	}
	// Compact to the hosts that got ranks, one per name: entries of a host
	// listed apart (a,b,a) take ranks in Hydra's interleaved order but
	// share one proxy, whose slots are those of its entries that got ranks
	// (what Hydra's -usize SYSTEM counts).
	newIdx := make([]int, len(hosts))
	byName := map[string]int{}
	l := &Layout{}
	for i, hst := range hosts {
		newIdx[i] = -1
		if used[i] == 0 {
			continue
		}
		hst.Slots = slots[i]
		if k, ok := byName[hst.Name]; ok {
			newIdx[i] = k
			if err := merge(&l.Hosts[k], hst); err != nil {
				return nil, fmt.Errorf("placement: %w", err)
			}
			continue
		}
		newIdx[i] = len(l.Hosts)
		byName[hst.Name] = len(l.Hosts)
		l.Hosts = append(l.Hosts, hst)
	}
	local := make([]int, len(l.Hosts))
	l.Ranks = make([]Rank, total)
	r := 0
	for app, c := range counts {
		for k := 0; k < c; k++ {
			hi := newIdx[hostOf[r]]
			l.Ranks[r] = Rank{Rank: r, Host: hi, LocalRank: local[hi], AppNum: app}
			local[hi]++
			r++
		}
	}
	return l, nil
}

// Size is the number of ranks.
func (l *Layout) Size() int { return len(l.Ranks) }

// RanksOn lists the global ranks on Hosts[host] in ascending order.
func (l *Layout) RanksOn(host int) []int {
	var out []int
	for _, r := range l.Ranks {
		if r.Host == host {
			out = append(out, r.Rank)
		}
	}
	return out
}

// LocalSize is the number of ranks on Hosts[host].
func (l *Layout) LocalSize(host int) int {
	n := 0
	for _, r := range l.Ranks {
		if r.Host == host {
			n++
		}
	}
	return n
}

// maxMappingLen keeps PMI_process_mapping well inside the 674-byte value
// limit of MPICH 4.0.2's PMI-1 client.
const maxMappingLen = 600

type block struct{ start, count, ppn int }

// ProcessMapping renders MPICH's PMI_process_mapping, "(vector,(S,C,P),...)",
// from the actual placement: node ids are indexes in Hosts. ok is false when
// the string would be too long; PMI then answers "not found" and MPICH falls
// back to exchanging host names.
func (l *Layout) ProcessMapping() (string, bool) {
	nodes := make([]int, len(l.Ranks))
	for i, r := range l.Ranks {
		nodes[i] = r.Host
	}
	blocks := mappingBlocks(nodes)
	// The decoder wraps around to the first block, so the shortest prefix
	// that reproduces the whole map is the compact form (round-robin
	// placements become a single block).
	best := blocks
	if len(blocks) > 0 && blocks[0].start == 0 {
		for k := 1; k < len(blocks); k++ {
			if equalInts(decodeMapping(blocks[:k], len(nodes)), nodes) {
				best = blocks[:k]
				break
			}
		}
	}
	var sb strings.Builder
	sb.WriteString("(vector")
	for _, b := range best {
		fmt.Fprintf(&sb, ",(%d,%d,%d)", b.start, b.count, b.ppn)
	}
	sb.WriteString(")")
	if sb.Len() > maxMappingLen || len(nodes) == 0 {
		return "", false
	}
	return sb.String(), true
}

// mappingBlocks turns a rank→node list into blocks without wrap-around.
func mappingBlocks(nodes []int) []block {
	type run struct{ node, n int }
	var runs []run
	for _, n := range nodes {
		if len(runs) > 0 && runs[len(runs)-1].node == n {
			runs[len(runs)-1].n++
			continue
		}
		runs = append(runs, run{n, 1})
	}
	var blocks []block
	for _, r := range runs {
		if len(blocks) > 0 {
			b := &blocks[len(blocks)-1]
			if b.ppn == r.n && b.start+b.count == r.node {
				b.count++
				continue
			}
		}
		blocks = append(blocks, block{r.node, 1, r.n})
	}
	return blocks
}

// decodeMapping applies MPICH's reading of the blocks to size ranks.
func decodeMapping(blocks []block, size int) []int {
	out := make([]int, 0, size)
	for len(out) < size {
		for _, b := range blocks {
			for n := b.start; n < b.start+b.count; n++ {
				for k := 0; k < b.ppn && len(out) < size; k++ {
					out = append(out, n)
				}
			}
		}
	}
	return out
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
