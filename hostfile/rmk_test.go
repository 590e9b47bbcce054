package hostfile

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestFromRMK(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	sge := file("pe", "n1 4 all.q@n1 UNDEFINED\nn2 2 all.q@n2 UNDEFINED\n\n")
	pbs := file("pbs", "p1\np1\np2\n")
	cobalt := file("cobalt", "c1\nc2\n")
	ll := file("ll", "l1\nl1\n")
	two := []Host{{Name: "n1", Slots: 4}, {Name: "n2", Slots: 2}}
	tests := []struct {
		name, rmk string
		env       map[string]string
		want      []Host
		src, err  string
	}{
		{"nothing", "", nil, nil, "", ""},
		{"slurm detected", "", map[string]string{"SLURM_JOB_NODELIST": "s[1-2]", "SLURM_TASKS_PER_NODE": "3(x2)", "PE_HOSTFILE": sge},
			[]Host{{Name: "s1", Slots: 3}, {Name: "s2", Slots: 3}}, "slurm", ""},
		{"lsf", "", map[string]string{"LSB_MCPU_HOSTS": "n1 4 n2 2"}, two, "lsf", ""},
		{"sge", "", map[string]string{"PE_HOSTFILE": sge}, two, "sge", ""},
		{"sge before pbs", "", map[string]string{"PE_HOSTFILE": sge, "PBS_NODEFILE": pbs}, two, "sge", ""},
		{"pbs", "", map[string]string{"PBS_NODEFILE": pbs}, []Host{{Name: "p1", Slots: 2}, {Name: "p2", Slots: 1}}, "pbs", ""},
		{"cobalt", "", map[string]string{"COBALT_NODEFILE": cobalt}, []Host{{Name: "c1", Slots: 1}, {Name: "c2", Slots: 1}}, "cobalt", ""},
		{"ll", "", map[string]string{"LOADL_HOSTFILE": ll}, []Host{{Name: "l1", Slots: 2}}, "ll", ""},
		{"-rmk user ignores slurm", "user", map[string]string{"SLURM_JOB_NODELIST": "s1"}, nil, "", ""},
		{"-rmk pbs inside slurm", "pbs", map[string]string{"SLURM_JOB_NODELIST": "s1", "PBS_NODEFILE": pbs},
			[]Host{{Name: "p1", Slots: 2}, {Name: "p2", Slots: 1}}, "pbs", ""},
		{"-rmk sge without one", "sge", nil, nil, "sge", "sge: no allocation here (PE_HOSTFILE not set)"},
		{"-rmk unknown", "condor", nil, nil, "", `unknown resource manager "condor"`},
		{"missing node file", "", map[string]string{"COBALT_NODEFILE": filepath.Join(dir, "nope")}, nil, "cobalt", "COBALT_NODEFILE: open"},
		{"bad lsf", "", map[string]string{"LSB_MCPU_HOSTS": "n1 4 n2"}, nil, "lsf", "the last host has no count"},
		{"bad sge", "", map[string]string{"PE_HOSTFILE": file("bad", "n1 x q p\n")}, nil, "sge", "bad:1: bad slot count"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, src, err := FromRMK(tc.rmk, func(k string) string { return tc.env[k] })
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || src != tc.src || !reflect.DeepEqual(h, tc.want) {
				t.Fatalf("got %v, %q, %v; want %v, %q", h, src, err, tc.want, tc.src)
			}
		})
	}
}

func FuzzParseLSF(f *testing.F) {
	for _, s := range []string{"a 4 b 2", "a", "a 0", "a 4 a 4", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if hosts, err := ParseLSF(s); err == nil {
			checkHosts(t, hosts)
		}
	})
}

func FuzzParseSGE(f *testing.F) {
	for _, s := range []string{"n1 4 all.q@n1 UNDEFINED\n", "n1\n", "n1 x\n", "\n", "a 1\na 2\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if hosts, err := ParseSGE(strings.NewReader(s), "fuzz"); err == nil {
			checkHosts(t, hosts)
		}
	})
}
