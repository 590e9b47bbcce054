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
var twoSockets = []fakeCPU{
	{0, 0, 0, "0,4", 0}, {1, 0, 1, "1,5", 0}, {2, 1, 0, "2,6", 1}, {3, 1, 1, "3,7", 1},
	{4, 0, 0, "0,4", 0}, {5, 0, 1, "1,5", 0}, {6, 1, 0, "2,6", 1}, {7, 1, 1, "3,7", 1},
}

var oneSocket = []fakeCPU{{0, 0, 0, "0", 0}, {1, 0, 1, "1", 0}}

func TestAssign(t *testing.T) {
	all8 := []int{0, 1, 2, 3, 4, 5, 6, 7}
	for _, tc := range []struct {
		name    string
		cpus    []fakeCPU
		allowed []int
		spec    string
		ranks   int
		want    []string // Cpus_allowed_list of local rank 0, 1, ...
	}{
		{"2x2x2 hwthread", twoSockets, all8, "hwthread", 8, []string{"0", "4", "1", "5", "2", "6", "3", "7"}},
		{"2x2x2 core", twoSockets, all8, "core", 5, []string{"0,4", "1,5", "2,6", "3,7", "0,4"}},
		{"2x2x2 core:2", twoSockets, all8, "core:2", 3, []string{"0-1,4-5", "2-3,6-7", "0-1,4-5"}},
		{"2x2x2 socket", twoSockets, all8, "socket", 3, []string{"0-1,4-5", "2-3,6-7", "0-1,4-5"}},
		{"2x2x2 numa", twoSockets, all8, "numa", 2, []string{"0-1,4-5", "2-3,6-7"}},
		{"2x2x2 socket:2 wraps onto itself", twoSockets, all8, "socket:2", 2, []string{"0-7", "0-7"}},
		// A cgroup or Slurm step allowing cpus 1, 5 and 6: a core keeps only
		// its allowed threads, and objects without any are skipped.
		{"restricted core", twoSockets, []int{1, 5, 6}, "core", 3, []string{"1,5", "6", "1,5"}},
		{"restricted hwthread", twoSockets, []int{1, 5, 6}, "hwthread", 4, []string{"1", "5", "6", "1"}},
		{"restricted socket", twoSockets, []int{1, 5, 6}, "socket", 2, []string{"1,5", "6"}},
		{"1x2 core", oneSocket, []int{0, 1}, "core", 4, []string{"0", "1", "0", "1"}},
		{"1x2 hwthread", oneSocket, []int{0, 1}, "hwthread", 2, []string{"0", "1"}},
		{"1x2 socket", oneSocket, []int{0, 1}, "socket", 2, []string{"0-1", "0-1"}},
		{"1x2 numa", oneSocket, []int{0, 1}, "numa", 1, []string{"0-1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topo, err := Read(fakeSysfs(t, tc.cpus), tc.allowed)
			if err != nil {
				t.Fatal(err)
			}
			spec, err := Parse(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			objs := topo.Objects(spec.Type)
			var got []string
			for l := 0; l < tc.ranks; l++ {
				got = append(got, Format(Assign(objs, l, spec.N)))
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
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
		{"core", Spec{"core", 1}, ""},
		{"hwthread:2", Spec{"hwthread", 2}, ""},
		{"socket", Spec{"socket", 1}, ""},
		{"numa:1", Spec{"numa", 1}, ""},
		{"cores", Spec{}, `unknown type "cores"`},
		{"core:0", Spec{}, `count "0"`},
		{"core:x", Spec{}, `count "x"`},
		{"none:2", Spec{}, "none takes no count"},
	} {
		got, err := Parse(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Parse(%q) err = %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
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
