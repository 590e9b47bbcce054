package cluster_test

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/gompi/gompi/test/cluster"
)

// TestIfaceAcrossHosts gives every host a second network (eth1, an
// address the launch host has no route to) and runs Go ranks with
// -iface eth1: each rank advertises its own host's eth1 address, and the
// collectives, whose connections go to the advertised addresses, work
// over it. A host without the interface fails the job naming both.
func TestIfaceAcrossHosts(t *testing.T) {
	c := setup(t)
	addrs, err := c.AddNetwork("eth1", "10.201.0")
	if err != nil {
		t.Fatal(err)
	}
	ifaceCollectives(t, c, "eth1", addrs)

	r := runJob(t, c, c.Client, "", "-iface", "eth2", "-hosts", c.Hosts[1].Name, "-n", "1", "/bin/true")
	if want := fmt.Sprintf(`host %s: -iface eth2: no network interface "eth2" here (interfaces: lo, eth0, eth1`, c.Hosts[1].Name); r.Code != 255 || !strings.Contains(r.Stderr, want) {
		t.Errorf("missing interface: exit %d, stderr %q; want 255 and %q", r.Code, r.Stderr, want)
	}
	if strings.Contains(r.Stderr, "lost connection") || strings.Count(r.Stderr, "no network interface") != 1 {
		t.Errorf("missing interface: the error should be said once, as the proxy's:\n%s", r.Stderr)
	}
}

// TestIfaceIPv6 gives every host a network with IPv6 addresses only and
// runs Go ranks with -iface on it: each rank advertises its host's IPv6
// address and the collectives' connections go over it. (Hydra takes
// IPv4 addresses only and fails here.)
func TestIfaceIPv6(t *testing.T) {
	c := setup(t)
	addrs, err := c.AddNetwork("eth6", "fd42:6::")
	if err != nil {
		t.Fatal(err)
	}
	ifaceCollectives(t, c, "eth6", addrs)
}

// ifaceCollectives runs a rank per host with -iface dev: each must
// advertise its host's address on dev (addrs, by host) and the
// collectives, whose connections go to those addresses, must work.
func ifaceCollectives(t *testing.T, c *cluster.Cluster, dev string, addrs []string) {
	t.Helper()
	n := len(c.Hosts)
	script := `echo "addr $PMI_RANK $(cat /tmp/gompi-host) $GOMPI_HOST $MPIR_CVAR_NEMESIS_TCP_NETWORK_IFACE"; exec ` + bin("nodeprog") + " coll"
	r := runJob(t, c, c.Client, "", "-iface", dev, "-pmi-trace", "-hosts", c.HostList(1), "-n", fmt.Sprint(n), "/bin/sh", "-c", script)
	if r.Code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
	}
	for i, h := range c.Hosts {
		if want := fmt.Sprintf("addr %d %s %s %s\n", i, h.Identity, addrs[i], dev); !strings.Contains(r.Stdout, want) {
			t.Errorf("missing %q in\n%s", want, r.Stdout)
		}
		// What the rank published for its peers to dial.
		if want := fmt.Sprintf("key=gompi-rt-addr-%d value=%s", i, net.JoinHostPort(addrs[i], "")); !strings.Contains(r.Stderr, want) {
			t.Errorf("rank %d did not advertise %s:\n%s", i, addrs[i], r.Stderr)
		}
	}
	if got := strings.Count(r.Stdout, "coll ok"); got != n {
		t.Errorf("%d ranks reported coll ok, want %d:\n%s", got, n, r.Stdout)
	}
}
