package bind

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseMem(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    MemSpec
		wantErr string
	}{
		{"", MemSpec{}, ""},
		{"none", MemSpec{}, ""},
		{"firsttouch", MemSpec{Policy: "firsttouch"}, ""},
		{"nexttouch", MemSpec{Policy: "nexttouch"}, ""},
		{"bind:1,0", MemSpec{Policy: "bind", Nodes: []int{0, 1}}, ""},
		{"interleave:0-2", MemSpec{Policy: "interleave", Nodes: []int{0, 1, 2}}, ""},
		{"bind:", MemSpec{Policy: "bind"}, ""},
		{"bind", MemSpec{Policy: "bind"}, ""},
		{"firsttouch:0", MemSpec{}, "takes no node list"},
		{"bind:x", MemSpec{}, `node list "x"`},
		{"replicate:0", MemSpec{}, `unknown policy "replicate"`},
	} {
		got, err := ParseMem(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseMem(%q) err = %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseMem(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if back, err := ParseMem(got.String()); err != nil || !reflect.DeepEqual(back, got) {
			t.Errorf("ParseMem(%q.String() = %q) = %v, %v", tc.in, got.String(), back, err)
		}
	}
}

// The nodes a policy applies: the listed ones if the host has them, else
// those of the rank's CPUs.
func TestMemNodes(t *testing.T) {
	root := fakeSysfs(t, twoSockets)
	hostNodes, err := ReadNodes(root)
	if err != nil || !reflect.DeepEqual(hostNodes, []int{0, 1}) {
		t.Fatalf("ReadNodes = %v, %v", hostNodes, err)
	}
	topo, err := Read(root, []int{0, 1, 2, 3, 4, 5, 6, 7})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		spec    string
		cpus    []int
		want    []int
		wantErr string
	}{
		{"bind:1", []int{0, 4}, []int{1}, ""},
		{"interleave:0-1", nil, []int{0, 1}, ""},
		{"bind:", []int{2, 6}, []int{1}, ""},
		{"firsttouch", []int{0, 4}, []int{0}, ""},
		{"interleave:", []int{1, 2}, []int{0, 1}, ""},
		{"bind:", nil, []int{0, 1}, ""},
		{"bind:2", []int{0}, nil, "NUMA node 2 does not exist here (nodes: 0-1)"},
	} {
		m, err := ParseMem(tc.spec)
		if err != nil {
			t.Fatal(err)
		}
		got, err := topo.MemNodes(m, tc.cpus, hostNodes)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s on %v: err %v, want %q", tc.spec, tc.cpus, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s on %v: %v, %v; want %v", tc.spec, tc.cpus, got, err, tc.want)
		}
	}
	// Without NUMA in the kernel: node 0 alone.
	os.RemoveAll(filepath.Join(root, "node"))
	if n, err := ReadNodes(root); err != nil || !reflect.DeepEqual(n, []int{0}) {
		t.Errorf("no node dir: %v, %v", n, err)
	}
}
