package bind

import (
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// fakeCPU is one CPU of a fake sysfs tree.
type fakeCPU struct {
	id, pkg, core int
	siblings      string
	node          int
	l2, l3        string // shared_cpu_list of the L2 and L3 caches; "": no cache files
}

// fakeSysfs writes cpu/cpuN/topology and node/nodeN/cpulist under a
// temporary root.
func fakeSysfs(t *testing.T, cpus []fakeCPU) string {
	t.Helper()
	root := t.TempDir()
	nodes := map[int][]int{}
	for _, c := range cpus {
		dir := filepath.Join(root, "cpu", "cpu"+strconv.Itoa(c.id), "topology")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, v := range map[string]string{
			"physical_package_id":  strconv.Itoa(c.pkg),
			"core_id":              strconv.Itoa(c.core),
			"thread_siblings_list": c.siblings,
		} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		nodes[c.node] = append(nodes[c.node], c.id)
		if c.l2 == "" {
			continue
		}
		// L1 data and instruction caches are the thread siblings'.
		for i, idx := range []struct{ level, typ, shared string }{
			{"1", "Data", c.siblings}, {"1", "Instruction", c.siblings}, {"2", "Unified", c.l2}, {"3", "Unified", c.l3},
		} {
			dir := filepath.Join(root, "cpu", "cpu"+strconv.Itoa(c.id), "cache", "index"+strconv.Itoa(i))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			for name, v := range map[string]string{"level": idx.level, "type": idx.typ, "shared_cpu_list": idx.shared} {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for n, ids := range nodes {
		dir := filepath.Join(root, "node", "node"+strconv.Itoa(n))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "cpulist"), []byte(Format(ids)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// twoSockets is 2 sockets x 2 cores x 2 threads, numbered as Linux does
// on Intel: the second thread of every core comes after all first threads
// (cpu0 and cpu4 share a core), and one NUMA node per socket.
// Each core has its own L2; each socket one L3.
var twoSockets = []fakeCPU{
	{0, 0, 0, "0,4", 0, "0,4", "0-1,4-5"}, {1, 0, 1, "1,5", 0, "1,5", "0-1,4-5"},
	{2, 1, 0, "2,6", 1, "2,6", "2-3,6-7"}, {3, 1, 1, "3,7", 1, "3,7", "2-3,6-7"},
	{4, 0, 0, "0,4", 0, "0,4", "0-1,4-5"}, {5, 0, 1, "1,5", 0, "1,5", "0-1,4-5"},
	{6, 1, 0, "2,6", 1, "2,6", "2-3,6-7"}, {7, 1, 1, "3,7", 1, "3,7", "2-3,6-7"},
}

// oneSocket is this VM's shape: 2 cores, an L2 each, a shared L3.
var oneSocket = []fakeCPU{{0, 0, 0, "0", 0, "0", "0-1"}, {1, 0, 1, "1", 0, "1", "0-1"}}

func TestPlan(t *testing.T) {
	all8 := []int{0, 1, 2, 3, 4, 5, 6, 7}
	for _, tc := range []struct {
		name        string
		cpus        []fakeCPU
		allowed     []int
		spec, mapBy string
		ranks       int
		want        []string // Cpus_allowed_list of local rank 0, 1, ... ("": not bound)
	}{
		{"2x2x2 hwthread", twoSockets, all8, "hwthread", "", 8, []string{"0", "4", "1", "5", "2", "6", "3", "7"}},
		{"2x2x2 core", twoSockets, all8, "core", "", 5, []string{"0,4", "1,5", "2,6", "3,7", "0,4"}},
		{"2x2x2 core:2", twoSockets, all8, "core:2", "", 3, []string{"0-1,4-5", "2-3,6-7", "0-1,4-5"}},
		{"2x2x2 socket", twoSockets, all8, "socket", "", 3, []string{"0-1,4-5", "2-3,6-7", "0-1,4-5"}},
		{"2x2x2 numa", twoSockets, all8, "numa", "", 2, []string{"0-1,4-5", "2-3,6-7"}},
		{"2x2x2 socket:2 wraps onto itself", twoSockets, all8, "socket:2", "", 2, []string{"0-7", "0-7"}},
		{"2x2x2 machine", twoSockets, all8, "machine", "", 2, []string{"0-7", "0-7"}},
		{"2x2x2 l1cache", twoSockets, all8, "l1cache", "", 3, []string{"0,4", "1,5", "2,6"}},
		{"2x2x2 l2cache", twoSockets, all8, "l2cache", "", 3, []string{"0,4", "1,5", "2,6"}},
		{"2x2x2 l3cache", twoSockets, all8, "l3cache", "", 3, []string{"0-1,4-5", "2-3,6-7", "0-1,4-5"}},
		{"2x2x2 user", twoSockets, all8, "user:0+4,3", "", 3, []string{"0,4", "3", ""}},
		{"2x2x2 rr", twoSockets, all8, "rr", "socket", 9, []string{"0", "1", "2", "3", "4", "5", "6", "7", "0"}},
		{"restricted rr", twoSockets, []int{1, 5, 6}, "rr", "", 4, []string{"1", "5", "6", "1"}},
		// -map-by: consecutive ranks on different mapping objects.
		{"2x2x2 core map-by socket", twoSockets, all8, "core", "socket", 5, []string{"0,4", "2,6", "1,5", "3,7", "0,4"}},
		{"2x2x2 core map-by numa", twoSockets, all8, "core", "numa", 4, []string{"0,4", "2,6", "1,5", "3,7"}},
		{"2x2x2 core map-by l3cache", twoSockets, all8, "core", "l3cache", 4, []string{"0,4", "2,6", "1,5", "3,7"}},
		{"2x2x2 hwthread map-by socket", twoSockets, all8, "hwthread", "socket", 8, []string{"0", "2", "4", "6", "1", "3", "5", "7"}},
		{"2x2x2 hwthread map-by core", twoSockets, all8, "hwthread", "core", 8, []string{"0", "1", "2", "3", "4", "5", "6", "7"}},
		{"2x2x2 core:2 map-by socket", twoSockets, all8, "core:2", "socket", 3, []string{"0-1,4-5", "2-3,6-7", "0-1,4-5"}},
		// A binding larger than the mapping object: ranks mapped to cores
		// in order, each bound to its core's socket.
		{"2x2x2 socket map-by core", twoSockets, all8, "socket", "core", 4, []string{"0-1,4-5", "0-1,4-5", "2-3,6-7", "2-3,6-7"}},
		{"2x2x2 core map-by socket:2", twoSockets, all8, "core", "socket:2", 4, []string{"0,4", "1,5", "2,6", "3,7"}},
		// A cgroup or Slurm step allowing cpus 1, 5 and 6: a core keeps only
		// its allowed threads, and objects without any are skipped.
		{"restricted core", twoSockets, []int{1, 5, 6}, "core", "", 3, []string{"1,5", "6", "1,5"}},
		{"restricted hwthread", twoSockets, []int{1, 5, 6}, "hwthread", "", 4, []string{"1", "5", "6", "1"}},
		{"restricted socket", twoSockets, []int{1, 5, 6}, "socket", "", 2, []string{"1,5", "6"}},
		{"restricted core map-by socket", twoSockets, []int{1, 5, 6}, "core", "socket", 3, []string{"1,5", "6", "1,5"}},
		// This VM, as mpiexec.hydra binds on it (test/e2e compares the two).
		{"1x2 core", oneSocket, []int{0, 1}, "core", "", 4, []string{"0", "1", "0", "1"}},
		{"1x2 hwthread", oneSocket, []int{0, 1}, "hwthread", "", 2, []string{"0", "1"}},
		{"1x2 socket", oneSocket, []int{0, 1}, "socket", "", 2, []string{"0-1", "0-1"}},
		{"1x2 numa", oneSocket, []int{0, 1}, "numa", "", 1, []string{"0-1"}},
		{"1x2 core map-by socket", oneSocket, []int{0, 1}, "core", "socket", 3, []string{"0", "1", "0"}},
		{"1x2 l2cache", oneSocket, []int{0, 1}, "l2cache", "", 3, []string{"0", "1", "0"}},
		{"1x2 l3cache", oneSocket, []int{0, 1}, "l3cache", "", 2, []string{"0-1", "0-1"}},
		{"1x2 user", oneSocket, []int{0, 1}, "user:1,0", "", 3, []string{"1", "0", ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, err := Parse(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			mapBy, err := ParseMap(tc.mapBy)
			if err != nil {
				t.Fatal(err)
			}
			topo, err := Read(fakeSysfs(t, tc.cpus), tc.allowed, CacheLevels(spec, mapBy)...)
			if err != nil {
				t.Fatal(err)
			}
			sets, err := topo.Plan(spec, mapBy)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for l := 0; l < tc.ranks; l++ {
				got = append(got, Format(Pick(sets, spec, l)))
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestPlanErrors(t *testing.T) {
	for _, tc := range []struct {
		cpus                 []fakeCPU
		spec, mapBy, wantErr string
	}{
		{twoSockets, "l4cache", "", "no l4cache among the CPUs this host allows (0-7)"},
		{twoSockets, "core", "socket:3", "-map-by socket:3: 3 socket objects span more than the 8 CPUs"},
		{oneSocket, "core", "socket:2", "-map-by socket:2"},
	} {
		spec, _ := Parse(tc.spec)
		mapBy, _ := ParseMap(tc.mapBy)
		var allowed []int
		for _, c := range tc.cpus {
			allowed = append(allowed, c.id)
		}
		topo, err := Read(fakeSysfs(t, tc.cpus), allowed, CacheLevels(spec, mapBy)...)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := topo.Plan(spec, mapBy); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s map-by %s: err %v, want %q", tc.spec, tc.mapBy, err, tc.wantErr)
		}
	}
}

func TestReadErrors(t *testing.T) {
	root := fakeSysfs(t, oneSocket)
	// A CPU the mask allows but sysfs lacks is named, not silently dropped.
	if _, err := Read(root, []int{0, 9}); err == nil || !strings.Contains(err.Error(), "cpu9") {
		t.Errorf("missing cpu9: err = %v", err)
	}
	os.WriteFile(filepath.Join(root, "cpu", "cpu1", "topology", "physical_package_id"), []byte("x\n"), 0o644)
	if _, err := Read(root, []int{0, 1}); err == nil || !strings.Contains(err.Error(), "physical_package_id") {
		t.Errorf("bad package id: err = %v", err)
	}
	// No node directory: one node holding everything.
	root = fakeSysfs(t, oneSocket)
	os.RemoveAll(filepath.Join(root, "node"))
	topo, err := Read(root, []int{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	if got := topo.Objects("numa"); !reflect.DeepEqual(got, [][]int{{0, 1}}) {
		t.Errorf("no node dir: numa objects %v", got)
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Spec
		wantErr string
	}{
		{"", Spec{}, ""},
		{"none", Spec{}, ""},
		{"core", Spec{Type: "core", N: 1}, ""},
		{"hwthread:2", Spec{Type: "hwthread", N: 2}, ""},
		{"socket", Spec{Type: "socket", N: 1}, ""},
		{"numa:1", Spec{Type: "numa", N: 1}, ""},
		{"machine", Spec{Type: "machine", N: 1}, ""},
		{"l2cache:2", Spec{Type: "l2cache", N: 2}, ""},
		{"user:0+2,1+4", Spec{Type: "user", N: 1, User: [][]int{{0, 2}, {1, 4}}}, ""},
		{"user:3,0-1", Spec{Type: "user", N: 1, User: [][]int{{3}, {0, 1}}}, ""},
		{"user:", Spec{}, "user: needs CPU lists"},
		{"user:0,,1", Spec{}, `rank 1's CPUs ""`},
		{"user:a", Spec{}, `rank 0's CPUs "a"`},
		{"lcache", Spec{}, `unknown type "lcache"`},
		{"rr", Spec{Type: "rr", N: 1}, ""},
		{"rr:2", Spec{}, "rr takes no count"},
		{"cores", Spec{}, `unknown type "cores"`},
		{"core:0", Spec{}, `count "0"`},
		{"core:x", Spec{}, `count "x"`},
		{"none:2", Spec{}, "none takes no count"},
		{"gpu", Spec{Type: "gpu", N: 1}, ""},
		{"gpu3:2", Spec{Type: "gpu", N: 2, Name: "gpu3"}, ""},
		{"gpux", Spec{}, "want gpu or gpuN"},
		{"eth", Spec{Type: "en", N: 1}, ""},
		{"en", Spec{Type: "en", N: 1}, ""},
		{"enp59s0f0", Spec{Type: "en", N: 1, Name: "enp59s0f0"}, ""},
		{"ib0", Spec{Type: "ib", N: 1, Name: "ib0"}, ""},
		{"hfi1_0", Spec{Type: "hfi", N: 1, Name: "hfi1_0"}, ""},
		{"pci:3B:00.0", Spec{Type: "pci", N: 1, Name: "0000:3b:00.0"}, ""},
		{"pci:0001:3b:00.7", Spec{Type: "pci", N: 1, Name: "0001:3b:00.7"}, ""},
		{"pci:3b:00", Spec{}, "is not a PCI bus id"},
		{"pci:", Spec{}, "is not a PCI bus id"},
	} {
		got, err := Parse(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Parse(%q) err = %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Parse(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		// String is what gompiexec sends the proxies: it must read back.
		if back, err := Parse(got.String()); err != nil || !reflect.DeepEqual(back, got) {
			t.Errorf("Parse(%q.String() = %q) = %v, %v", tc.in, got.String(), back, err)
		}
	}
}

func TestList(t *testing.T) {
	for _, s := range []string{"0", "0-3", "0-1,4-5", "1,3,5", "0-2,7,9-10"} {
		l, err := ParseList(s)
		if err != nil || Format(l) != s {
			t.Errorf("ParseList(%q) = %v, %v; Format back %q", s, l, err, Format(l))
		}
	}
	for _, s := range []string{"a", "3-1", "-1", "1,,2"} {
		if _, err := ParseList(s); err == nil {
			t.Errorf("ParseList(%q): no error", s)
		}
	}
}
