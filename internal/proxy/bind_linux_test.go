package proxy

import (
	"bytes"
	"io"
	"log/slog"
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
	around, err := affinityAround(last)
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

// A host whose topology cannot be read refuses the job naming itself, and
// -bind-to none (or absent) leaves the fork path without a wrapper.
func TestPlanBinding(t *testing.T) {
	defer func(r string) { sysfsRoot = r }(sysfsRoot)
	ranks := []control.RankSpec{{Rank: 4, LocalRank: 0}, {Rank: 5, LocalRank: 1}}
	for _, tc := range []struct {
		bindTo, root string
		wantErr      string
		wantBind     bool
	}{
		{"", "/sys/devices/system", "", false},
		{"core", "/sys/devices/system", "", true},
		{"core", t.TempDir(), "host node7: -bind-to core: reading the topology", false},
		{"cores", "/sys/devices/system", `host node7: -bind-to "cores": unknown type`, false},
	} {
		sysfsRoot = tc.root
		p := &proxy{log: slog.New(slog.NewTextHandler(io.Discard, nil)),
			job: &control.Job{Host: "node7", BindTo: tc.bindTo, Ranks: ranks}}
		err := p.planBinding()
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q in %s: err %v, want %q", tc.bindTo, tc.root, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", tc.bindTo, err)
		}
		if (p.bind != nil) != tc.wantBind || (tc.wantBind && (p.bind[4] == nil || p.bind[5] == nil)) {
			t.Errorf("%q: bind %v, want a wrapper per rank: %v", tc.bindTo, p.bind, tc.wantBind)
		}
	}
}
