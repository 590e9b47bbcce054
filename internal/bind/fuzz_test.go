package bind

import (
	"reflect"
	"testing"
)

// FuzzParse: no -bind-to, -map-by, -membind or CPU list value panics or
// makes the parser allocate without bound, and every accepted value reads
// back from its String (what gompiexec sends the proxies).
func FuzzParse(f *testing.F) {
	for _, s := range []string{"core", "core:2", "l3cache:1", "user:0+2,1+3", "user:0-3", "rr", "none", "",
		"bind:0-1", "interleave:0,2", "firsttouch", "0-3,8", "user:0-99999999", "bind:0-4294967296", "core:-1",
		"gpu1:2", "eth0", "pci:0000:3b:00.0", "ib", "hfi1_0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		if l, err := ParseList(v); err == nil && len(l) > MaxCPU+1 {
			t.Fatalf("ParseList(%q): %d entries", v, len(l))
		}
		for _, p := range []func(string) (Spec, error){Parse, ParseMap} {
			s, err := p(v)
			if err != nil {
				continue
			}
			back, err := p(s.String())
			if err != nil || !reflect.DeepEqual(back, s) {
				t.Fatalf("%q: %+v; its String %q reads back as %+v, %v", v, s, s.String(), back, err)
			}
		}
		if m, err := ParseMem(v); err == nil {
			back, err := ParseMem(m.String())
			if err != nil || back.Policy != m.Policy || !reflect.DeepEqual(append([]int{}, back.Nodes...), append([]int{}, m.Nodes...)) {
				t.Fatalf("-membind %q: %+v; its String %q reads back as %+v, %v", v, m, m.String(), back, err)
			}
		}
	})
}

// A range past any CPU number Linux can have is an error at once, not a
// list of billions of numbers (gompiexec -bind-to user:0-999999999 took
// 20 s and 4.7 GB before it was cut off).
func TestListBound(t *testing.T) {
	for _, s := range []string{"0-999999999", "0-4294967296", "65536", "0,1-99999999999"} {
		if l, err := ParseList(s); err == nil {
			t.Errorf("ParseList(%q): %d CPUs, no error", s, len(l))
		}
	}
	if _, err := Parse("user:0-999999999"); err == nil {
		t.Error("-bind-to user:0-999999999: no error")
	}
	if _, err := ParseMem("bind:0-9999999999"); err == nil {
		t.Error("-membind bind:0-9999999999: no error")
	}
	if l, err := ParseList("0-65535"); err != nil || len(l) != MaxCPU+1 {
		t.Errorf("ParseList(0-65535) = %d CPUs, %v", len(l), err)
	}
}
