package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Start builds a cluster for a test and tears it down in t.Cleanup (even
// when the test fails). It skips the test when Check fails, unless $CI is
// set, where a missing prerequisite is an error.
func Start(t testing.TB, cfg Config) *Cluster {
	t.Helper()
	if err := Check(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("test cluster unavailable: %v", err)
		}
		t.Skipf("test cluster unavailable: %v", err)
	}
	if cfg.Logf == nil {
		cfg.Logf = t.Logf
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			c.dumpLogs(t.Logf)
		}
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	return c
}

// dumpLogs passes the tail of every sshd log to logf.
func (c *Cluster) dumpLogs(logf func(string, ...any)) {
	for _, h := range c.Hosts {
		b, err := os.ReadFile(h.Log)
		if err == nil {
			logf("sshd log of %s (%s):\n%s", h.Name, h.Addr, tail(b))
		}
	}
}

// HostList returns "n1:slots,n2:slots,..." for gompiexec -hosts.
func (c *Cluster) HostList(slots int) string {
	parts := make([]string, len(c.Hosts))
	for i, h := range c.Hosts {
		parts[i] = fmt.Sprintf("%s:%d", h.Name, slots)
	}
	return strings.Join(parts, ",")
}

// Hostfile writes an MPICH-style host file ("name:slots" per line) into
// Dir and returns its path.
func (c *Cluster) Hostfile(slots int) (string, error) {
	var b strings.Builder
	for _, h := range c.Hosts {
		fmt.Fprintf(&b, "%s:%d\n", h.Name, slots)
	}
	p := filepath.Join(c.Dir, fmt.Sprintf("hosts-%d", slots))
	return p, os.WriteFile(p, []byte(b.String()), 0o644)
}

// Host returns the host called name, or nil.
func (c *Cluster) Host(name string) *Host {
	for _, h := range c.Hosts {
		if h.Name == name {
			return h
		}
	}
	return nil
}
