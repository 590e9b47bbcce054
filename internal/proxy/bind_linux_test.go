package proxy

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"

	"github.com/gompi/gompi/internal/bind"
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
