package hostfile

import (
	"fmt"
	"strings"
	"testing"
)

func fmtSscanf(p string, b *block) (int, error) {
	return fmt.Sscanf(p, "%d,%d,%d", &b.start, &b.count, &b.ppn)
}

func checkHosts(t *testing.T, hosts []Host) {
	for _, h := range hosts {
		if h.Name == "" || h.Slots < 1 {
			t.Fatalf("bad host %+v", h)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"a\nb:4\n", "a slots=2 max_slots=4 # x\n", "a user=u\na:2\n", "x:y\n", "\n#\n", "a binding=core:2\na binding=core:2\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		hosts, err := Parse(strings.NewReader(s), "fuzz")
		if err == nil {
			checkHosts(t, hosts)
			if _, err := Place(hosts, []int{7}, Options{}); err != nil && !strings.Contains(err.Error(), "max_slots") {
				t.Fatalf("place: %v", err)
			}
		}
	})
}

func FuzzParseList(f *testing.F) {
	for _, s := range []string{"a,b:2", "a", ",", "a:0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if hosts, err := ParseList(s); err == nil {
			checkHosts(t, hosts)
		}
	})
}

func FuzzParseSlurm(f *testing.F) {
	f.Add("node[01-04,07],gpu3", "2(x3),1,1")
	f.Add("r[1-2]-n[1-3]", "")
	f.Add("a[", "1")
	f.Fuzz(func(t *testing.T, nodes, tasks string) {
		if hosts, err := ParseSlurm(nodes, tasks); err == nil {
			checkHosts(t, hosts)
		}
	})
}
