package hostfile

import (
	"errors"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name, in string
		want     []Host
	}{
		{"mpich", "a\nb:4\n", []Host{{Name: "a", Slots: 1}, {Name: "b", Slots: 4}}},
		{"openmpi", "a slots=2 max_slots=4\n", []Host{{Name: "a", Slots: 2, MaxSlots: 4}}},
		{"comments", "# head\n\n  a:2 # two\n\t\nb # one\n", []Host{{Name: "a", Slots: 2}, {Name: "b", Slots: 1}}},
		{"adjacent repeat merges", "a\na:2\nb\n", []Host{{Name: "a", Slots: 3}, {Name: "b", Slots: 1}}},
		// As Hydra: a host named again after another is a further entry.
		{"repeat after another host", "a\nb\na\n", []Host{{Name: "a", Slots: 1}, {Name: "b", Slots: 1}, {Name: "a", Slots: 1}}},
		{"pbs style", "n1\nn1\nn1\nn2\n", []Host{{Name: "n1", Slots: 3}, {Name: "n2", Slots: 1}}},
		{"user", "a:2 user=bob\n", []Host{{Name: "a", Slots: 2, User: "bob"}}},
		{"binding", "a:2 binding=user:0+1,2\nb binding=none\na\n", []Host{{Name: "a", Slots: 2, Binding: "user:0+1,2"}, {Name: "b", Slots: 1, Binding: "none"}, {Name: "a", Slots: 1}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(strings.NewReader(tc.in), "hosts")
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		in, wantMsg string
		line        int
		token       string
	}{
		{"a\nb:x\n", "hosts:2: bad slot count", 2, "b:x"},
		{"a:0\n", "out of range", 1, "a:0"},
		{"a:-3\n", "out of range", 1, "a:-3"},
		{"a:99999999999999999999\n", "bad slot count", 1, "a:99999999999999999999"},
		{"a ifhn=x\n", "unsupported token", 1, "ifhn=x"},
		{"a slots\n", "expected key=value", 1, "slots"},
		{"a slots=2 max_slots=1\n", "max_slots=1 is less than slots=2", 1, "a"},
		{"a:2 slots=3\n", "slot count given twice", 1, "slots=3"},
		{"a\nb:2:3\n", "hosts:2: ", 2, "b:2:3"},
		{"a/b\n", "bad character", 1, "a/b"},
		{"# only comments\n", "no hosts listed", 0, ""},
		{"a user=x\na user=y\n", "users x and y", 2, "a"},
		{"a binding=core\na binding=socket\n", "binding=core and binding=socket", 2, "a"},
		{"a user=x\nb\na user=y\n", "users x and y", 3, "a"}, // one proxy runs both entries
		{"a binding=\n", "empty binding", 1, "binding="},
	}
	for _, tc := range tests {
		_, err := Parse(strings.NewReader(tc.in), "hosts")
		var pe *ParseError
		if !errors.As(err, &pe) {
			t.Fatalf("%q: want *ParseError, got %v", tc.in, err)
		}
		if !strings.Contains(err.Error(), tc.wantMsg) || pe.Line != tc.line || pe.Token != tc.token {
			t.Errorf("%q: got %q (line %d token %q), want %q line %d token %q",
				tc.in, err, pe.Line, pe.Token, tc.wantMsg, tc.line, tc.token)
		}
	}
}

func TestParseFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(p, []byte("x:3\nnode@bad\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := ParseFile(p)
	if err == nil || !strings.Contains(err.Error(), p+":2:") {
		t.Fatalf("want error naming %s:2, got %v", p, err)
	}
	if _, err := ParseFile(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: got %v", err)
	}
}

func TestParseList(t *testing.T) {
	got, err := ParseList("a,a,b:2,a")
	if err != nil {
		t.Fatal(err)
	}
	want := []Host{{Name: "a", Slots: 2}, {Name: "b", Slots: 2}, {Name: "a", Slots: 1}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v", got)
	}
	for _, bad := range []string{"", "a,,b", "a:0", "a:b", "a:2:3"} {
		if _, err := ParseList(bad); err == nil {
			t.Errorf("ParseList(%q) succeeded", bad)
		}
	}
}

func TestSlurm(t *testing.T) {
	tests := []struct {
		nodes, tasks string
		want         []Host
	}{
		{"node[01-03,07]", "2(x3),1", []Host{{Name: "node01", Slots: 2}, {Name: "node02", Slots: 2}, {Name: "node03", Slots: 2}, {Name: "node07", Slots: 1}}},
		{"a,b", "", []Host{{Name: "a", Slots: 1}, {Name: "b", Slots: 1}}},
		{"r[1-2]-n[8-9]", "1(x4)", []Host{{Name: "r1-n8", Slots: 1}, {Name: "r1-n9", Slots: 1}, {Name: "r2-n8", Slots: 1}, {Name: "r2-n9", Slots: 1}}},
		{"gpu[9-11],cpu3", "4,4,4,8", []Host{{Name: "gpu9", Slots: 4}, {Name: "gpu10", Slots: 4}, {Name: "gpu11", Slots: 4}, {Name: "cpu3", Slots: 8}}},
		// Checked with Slurm 22.05's `scontrol show hostnames`: the width is the
		// range start's, several bracket groups, zero padding.
		{"n[001-003,010],gpu[1-2]", "2(x3),1,4(x2)", []Host{{Name: "n001", Slots: 2}, {Name: "n002", Slots: 2}, {Name: "n003", Slots: 2},
			{Name: "n010", Slots: 1}, {Name: "gpu1", Slots: 4}, {Name: "gpu2", Slots: 4}}},
		{"n[098-101]", "1(x4)", []Host{{Name: "n098", Slots: 1}, {Name: "n099", Slots: 1}, {Name: "n100", Slots: 1}, {Name: "n101", Slots: 1}}},
		{"n[8-010]", "", []Host{{Name: "n8", Slots: 1}, {Name: "n9", Slots: 1}, {Name: "n10", Slots: 1}}},
		{"n[01-3]", "", []Host{{Name: "n01", Slots: 1}, {Name: "n02", Slots: 1}, {Name: "n03", Slots: 1}}},
	}
	for _, tc := range tests {
		got, err := ParseSlurm(tc.nodes, tc.tasks)
		if err != nil {
			t.Fatalf("%s: %v", tc.nodes, err)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s %s: got %+v", tc.nodes, tc.tasks, got)
		}
	}
	bad := [][2]string{{"n[1-", ""}, {"n[3-1]", ""}, {"n]", ""}, {"n[1-2]", "1"}, {"n1", "2(x"}, {"n[1-9999999]", ""}, {"a,,b", ""}}
	for _, b := range bad {
		if _, err := ParseSlurm(b[0], b[1]); err == nil {
			t.Errorf("ParseSlurm(%q, %q) succeeded", b[0], b[1])
		}
	}
}

func TestFromEnvironment(t *testing.T) {
	env := map[string]string{"SLURM_JOB_NODELIST": "c[1-2]", "SLURM_TASKS_PER_NODE": "3(x2)"}
	h, src, err := FromEnvironment(func(k string) string { return env[k] })
	if err != nil || src != "slurm" || len(h) != 2 || h[1].Slots != 3 {
		t.Fatalf("slurm: %v %s %+v", err, src, h)
	}
	p := filepath.Join(t.TempDir(), "nodefile")
	os.WriteFile(p, []byte("n1\nn1\nn2\n"), 0o644)
	env = map[string]string{"PBS_NODEFILE": p}
	h, src, err = FromEnvironment(func(k string) string { return env[k] })
	if err != nil || src != "pbs" || !reflect.DeepEqual(h, []Host{{Name: "n1", Slots: 2}, {Name: "n2", Slots: 1}}) {
		t.Fatalf("pbs: %v %s %+v", err, src, h)
	}
	h, src, err = FromEnvironment(func(string) string { return "" })
	if h != nil || src != "" || err != nil {
		t.Fatalf("none: %v %s %v", h, src, err)
	}
	// Inside a job step (srun --pty bash, an interactive step) the tasks
	// per node are the step's, the node list the job's: the error says so
	// (mpiexec.hydra 4.0.2 dies of SIGFPE there).
	env = map[string]string{"SLURM_JOB_NODELIST": "n[1-3]", "SLURM_NODELIST": "n[1-3]", "SLURM_TASKS_PER_NODE": "1",
		"SLURM_STEP_ID": "0", "SLURM_STEP_NODELIST": "n1"}
	_, _, err = FromEnvironment(func(k string) string { return env[k] })
	if err == nil || !strings.Contains(err.Error(), "inside job step 0") || !strings.Contains(err.Error(), "-hosts") {
		t.Fatalf("in a step: %v", err)
	}
}

func hostsOf(l *Layout) []int {
	out := make([]int, len(l.Ranks))
	for i, r := range l.Ranks {
		out[i] = r.Host
	}
	return out
}

func TestPlace(t *testing.T) {
	ab := []Host{{Name: "a", Slots: 2}, {Name: "b", Slots: 2}}
	aba := []Host{{Name: "a", Slots: 1}, {Name: "b", Slots: 1}, {Name: "a", Slots: 1}}
	tests := []struct {
		name    string
		hosts   []Host
		counts  []int
		opt     Options
		want    []int
		mapping string
	}{
		{"fill", ab, []int{4}, Options{}, []int{0, 0, 1, 1}, "(vector,(0,2,2))"},
		{"wrap", ab, []int{6}, Options{}, []int{0, 0, 1, 1, 0, 0}, "(vector,(0,2,2))"},
		{"partial", ab, []int{3}, Options{}, []int{0, 0, 1}, "(vector,(0,1,2),(1,1,1))"},
		{"rr", ab, []int{4}, Options{Policy: RoundRobin}, []int{0, 1, 0, 1}, "(vector,(0,2,1))"},
		{"ppn", ab, []int{4}, Options{PPN: 1}, []int{0, 1, 0, 1}, "(vector,(0,2,1))"},
		{"one host", []Host{{Name: "l", Slots: 2}}, []int{5}, Options{}, []int{0, 0, 0, 0, 0}, "(vector,(0,1,5))"},
		{"unused host dropped", []Host{{Name: "a", Slots: 4}, {Name: "b", Slots: 1}}, []int{2}, Options{}, []int{0, 0}, "(vector,(0,1,2))"},
		{"max_slots", []Host{{Name: "a", Slots: 1, MaxSlots: 1}, {Name: "b", Slots: 1}}, []int{3}, Options{}, []int{0, 1, 1}, "(vector,(0,1,1),(1,1,2))"},
		{"mpmd", ab, []int{1, 3}, Options{}, []int{0, 0, 1, 1}, "(vector,(0,2,2))"},
		// A host listed apart (a,b,a) takes ranks in Hydra's order, one
		// proxy (one node of the mapping) for all of its entries.
		{"interleaved", aba, []int{3}, Options{}, []int{0, 1, 0}, "(vector,(0,2,1))"},
		{"interleaved wrap", aba, []int{6}, Options{}, []int{0, 1, 0, 0, 1, 0}, "(vector,(0,2,1),(0,1,2),(1,1,1))"},
		{"interleaved slots", []Host{{Name: "a", Slots: 2}, {Name: "b", Slots: 1}, {Name: "a", Slots: 1}}, []int{5}, Options{}, []int{0, 0, 1, 0, 0}, "(vector,(0,1,2),(1,1,1))"},
		{"interleaved ppn", aba, []int{6}, Options{PPN: 2}, []int{0, 0, 1, 1, 0, 0}, "(vector,(0,2,2))"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, err := Place(tc.hosts, tc.counts, tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			if got := hostsOf(l); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("hosts %v, want %v", got, tc.want)
			}
			m, ok := l.ProcessMapping()
			if !ok || m != tc.mapping {
				t.Fatalf("mapping %q %v, want %q", m, ok, tc.mapping)
			}
			for h := range l.Hosts {
				rs := l.RanksOn(h)
				if len(rs) != l.LocalSize(h) {
					t.Fatalf("RanksOn/LocalSize disagree")
				}
				for i, r := range rs {
					if l.Ranks[r].LocalRank != i {
						t.Fatalf("rank %d local rank %d, want %d", r, l.Ranks[r].LocalRank, i)
					}
				}
			}
		})
	}
	// Slots of a host listed apart: those of its entries that got ranks.
	l, _ := Place([]Host{{Name: "a", Slots: 2}, {Name: "b", Slots: 1}, {Name: "a", Slots: 3}, {Name: "c", Slots: 4}}, []int{4}, Options{})
	if len(l.Hosts) != 2 || l.Hosts[0].Name != "a" || l.Hosts[0].Slots != 5 || l.Hosts[1].Slots != 1 {
		t.Fatalf("hosts %+v, want a with 5 slots and b with 1", l.Hosts)
	}
	l, _ = Place(ab, []int{1, 3}, Options{})
	if l.Ranks[0].AppNum != 0 || l.Ranks[3].AppNum != 1 {
		t.Fatalf("appnums %+v", l.Ranks)
	}
	if _, err := Place(ab, []int{0}, Options{}); err == nil {
		t.Fatal("-n 0 accepted")
	}
	if _, err := Place(nil, []int{1}, Options{}); err == nil {
		t.Fatal("no hosts accepted")
	}
	if _, err := Place([]Host{{Name: "a", Slots: 1, MaxSlots: 1}}, []int{2}, Options{}); !errors.Is(err, ErrNoSlots) {
		t.Fatalf("max_slots overflow: %v", err)
	}
}

// TestMappingRoundTrip decodes the rendered mapping the way MPICH does and
// checks it reproduces random placements exactly.
func TestMappingRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 2000; i++ {
		var hosts []Host
		for h := 0; h < 1+rng.Intn(6); h++ {
			hosts = append(hosts, Host{Name: string(rune('a' + h)), Slots: 1 + rng.Intn(4)})
		}
		counts := []int{1 + rng.Intn(20)}
		l, err := Place(hosts, counts, Options{Policy: Policy(rng.Intn(2)), PPN: rng.Intn(3)})
		if err != nil {
			t.Fatal(err)
		}
		m, ok := l.ProcessMapping()
		if !ok {
			continue
		}
		blocks := parseMapping(t, m)
		if got := decodeMapping(blocks, l.Size()); !reflect.DeepEqual(got, hostsOf(l)) {
			t.Fatalf("mapping %s decodes to %v, placement is %v", m, got, hostsOf(l))
		}
	}
}

func parseMapping(t *testing.T, s string) []block {
	t.Helper()
	body := strings.TrimSuffix(strings.TrimPrefix(s, "(vector,"), ")")
	var out []block
	for _, p := range strings.Split(body, "),(") {
		var b block
		p = strings.Trim(p, "()")
		if _, err := fmtSscanf(p, &b); err != nil {
			t.Fatalf("bad mapping %q: %v", s, err)
		}
		out = append(out, b)
	}
	return out
}
