package proxy

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/gompi/gompi/internal/bind"
	"github.com/gompi/gompi/internal/control"
	"github.com/gompi/gompi/internal/launcher"
)

// childCPUs starts grep on /proc/self/status through start and returns the
// child's Cpus_allowed_list.
func childCPUs(t *testing.T, start func(*exec.Cmd) error) string {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command("grep", "^Cpus_allowed_list:", "/proc/self/status")
	cmd.Stdout = &out
	if err := start(cmd); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(strings.TrimPrefix(out.String(), "Cpus_allowed_list:"))
}

// A bound fork gets its CPUs, and the fork thread gets its own mask back:
// forks after it (other ranks, child proxies) are not confined.
func TestAffinityAroundRestoresForkThread(t *testing.T) {
	allowed, err := allowedCPUs()
	if err != nil {
		t.Fatal(err)
	}
	if len(allowed) < 2 {
		t.Skipf("one CPU allowed (%v): nothing to bind apart", allowed)
	}
	full := bind.Format(allowed)
	last := allowed[len(allowed)-1:]
	around, err := placeAround(last, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	bound := func(c *exec.Cmd) error { return launcher.StartLockedWith(c, around) }
	for i := 0; i < 3; i++ {
		if got := childCPUs(t, bound); got != bind.Format(last) {
			t.Fatalf("bound child: Cpus_allowed_list %s, want %s", got, bind.Format(last))
		}
		if got := childCPUs(t, launcher.StartLocked); got != full {
			t.Fatalf("child forked after a bound one: Cpus_allowed_list %s, want %s", got, full)
		}
	}
	if got, _ := allowedCPUs(); bind.Format(got) != full {
		t.Fatalf("proxy's own mask changed to %v", got)
	}
}

// childPolicy starts a shell through start that prints the policy of its
// first mapping in /proc/self/numa_maps (the policy the process started
// with: exec keeps the forking thread's).
func childPolicy(t *testing.T, start func(*exec.Cmd) error) string {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command("sh", "-c", "head -1 /proc/self/numa_maps")
	cmd.Stdout = &out
	if err := start(cmd); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(out.String())
	if len(f) < 2 {
		t.Fatalf("numa_maps line %q", out.String())
	}
	return f[1]
}

// A -membind fork starts with its policy and the fork thread gets its own
// (the default) back. This VM has node 0 only, so node 0 is used.
func TestMemPolicyAround(t *testing.T) {
	if _, err := os.Stat("/proc/self/numa_maps"); err != nil {
		t.Fatalf("no numa_maps (kernel without NUMA?): %v", err)
	}
	for _, tc := range []struct {
		policy string
		nodes  []int
		want   string
	}{
		{"bind", []int{0}, "bind:0"},
		{"interleave", []int{0}, "interleave:0"},
		{"firsttouch", nil, "local"},
	} {
		around, err := placeAround(nil, tc.policy, tc.nodes)
		if err != nil {
			t.Fatal(err)
		}
		bound := func(c *exec.Cmd) error { return launcher.StartLockedWith(c, around) }
		for i := 0; i < 2; i++ {
			if got := childPolicy(t, bound); got != tc.want {
				t.Errorf("%s: child's policy %s, want %s", tc.policy, got, tc.want)
			}
			if got := childPolicy(t, launcher.StartLocked); got != "default" {
				t.Errorf("child forked after a %s one: policy %s, want default", tc.policy, got)
			}
		}
	}
}

// A host whose topology cannot be read refuses the job naming itself, and
// without -bind-to or -membind (or with none) the fork path has no wrapper.
func TestPlanBinding(t *testing.T) {
	defer func(r string) { sysfsRoot = r }(sysfsRoot)
	ranks := []control.RankSpec{{Rank: 4, LocalRank: 0}, {Rank: 5, LocalRank: 1}}
	allowed, err := allowedCPUs()
	if err != nil {
		t.Fatal(err)
	}
	sys := "/sys/devices/system"
	for _, tc := range []struct {
		job      control.Job
		root     string
		wantErr  string
		wantBind []bool // a wrapper for rank 4, 5
	}{
		{control.Job{}, sys, "", nil},
		{control.Job{BindTo: "core"}, sys, "", []bool{true, true}},
		{control.Job{BindTo: "core", MapBy: "socket"}, sys, "", []bool{true, true}},
		{control.Job{Membind: "interleave:0"}, sys, "", []bool{true, true}},
		{control.Job{Membind: "nexttouch"}, sys, "", nil},
		// user: binds the ranks it lists only.
		{control.Job{BindTo: fmt.Sprintf("user:%d", allowed[0])}, sys, "", []bool{true, false}},
		// The host file's binding= replaces -bind-to on its host.
		{control.Job{BindTo: "core", HostBindTo: "none"}, sys, "", nil},
		{control.Job{HostBindTo: "core"}, sys, "", []bool{true, true}},
		{control.Job{BindTo: "core"}, t.TempDir(), "host node7: -bind-to core: reading the topology", nil},
		{control.Job{BindTo: "cores"}, sys, `host node7: -bind-to "cores": unknown type`, nil},
		{control.Job{BindTo: "core", MapBy: "board"}, sys, `host node7: -map-by "board": unknown type`, nil},
		{control.Job{BindTo: "l7cache"}, sys, "host node7: -bind-to l7cache: no l7cache among the CPUs", nil},
		{control.Job{BindTo: "user:4095"}, sys, "host node7: rank 4: -bind-to user:4095: CPU 4095 is not among the CPUs this host allows", nil},
		{control.Job{Membind: "bind:77"}, sys, "host node7: rank 4: -membind bind:77: NUMA node 77 does not exist here", nil},
	} {
		sysfsRoot = tc.root
		job := tc.job
		job.Host, job.Ranks = "node7", ranks
		p := &proxy{log: slog.New(slog.NewTextHandler(io.Discard, nil)), job: &job}
		err := p.planBinding()
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%+v in %s: err %v, want %q", tc.job, tc.root, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%+v: %v", tc.job, err)
		}
		if tc.wantBind == nil {
			if p.bind != nil {
				t.Errorf("%+v: wrappers %v, want none", tc.job, p.bind)
			}
			continue
		}
		for i, r := range []int{4, 5} {
			if (p.bind[r] != nil) != tc.wantBind[i] {
				t.Errorf("%+v: rank %d wrapper %v, want one: %v", tc.job, r, p.bind[r] != nil, tc.wantBind[i])
			}
		}
	}
}
