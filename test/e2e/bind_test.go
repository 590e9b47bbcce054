package e2e

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/gompi/gompi/internal/bind"
)

// ownCPUs is this test's Cpus_allowed_list: gompiexec and its proxy
// inherit it, so the ranks are bound among these.
func ownCPUs(t *testing.T) []int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
			cpus, err := bind.ParseList(v)
			if err != nil {
				t.Fatal(err)
			}
			return cpus
		}
	}
	t.Fatal("no Cpus_allowed_list in /proc/self/status")
	return nil
}

// Every rank's own affinity (what it, numactl --show or hwloc-bind --get
// report) is its -bind-to share of this machine's real topology.
func TestBindTo(t *testing.T) {
	allowed := ownCPUs(t)
	topo, err := bind.Read("/sys/devices/system", allowed)
	if err != nil {
		t.Fatal(err)
	}
	const n = 4
	script := `echo "$PMI_RANK $MPI_LOCALRANKID $(grep Cpus_allowed_list: /proc/self/status | cut -f2)"`
	for _, tc := range []struct{ flag, spec string }{
		{"-bind-to", "core"},
		{"--bind-to", "hwthread"},
		{"-bind-to", "socket"},
		{"-bind-to", "core:2"},
		{"-bind-to", "none"},
		{"", ""}, // no option: none
	} {
		t.Run(tc.flag+" "+tc.spec, func(t *testing.T) {
			args := []string{"-n", fmt.Sprint(n), "/bin/sh", "-c", script}
			if tc.flag != "" {
				args = append([]string{tc.flag, tc.spec}, args...)
			}
			r := runJob(t, "", args...)
			if r.Code != 0 {
				t.Fatalf("exit %d: %s", r.Code, r.Stderr)
			}
			spec, err := bind.Parse(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			sets, err := topo.Plan(spec, bind.Spec{})
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for l := 0; l < n; l++ {
				cpus := allowed
				if !spec.None() {
					cpus = bind.Pick(sets, spec, l)
				}
				want = append(want, fmt.Sprintf("%d %d %s", l, l, bind.Format(cpus)))
			}
			got := strings.Split(strings.TrimSpace(r.Stdout), "\n")
			sort.Strings(got)
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("rank local Cpus_allowed_list:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

func TestBindToRefusesUnknownType(t *testing.T) {
	r := runJob(t, "", "-bind-to", "cores", "-n", "2", bin("rankprog"), "env")
	if r.Code != 255 || !strings.Contains(r.Stderr, `unknown type "cores"`) || r.Stdout != "" {
		t.Fatalf("exit %d, stdout %q, stderr %q; want 255 naming \"cores\" and no rank run", r.Code, r.Stdout, r.Stderr)
	}
}
