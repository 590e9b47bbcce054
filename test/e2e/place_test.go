package e2e

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/gompi/gompi/internal/bind"
	"github.com/gompi/gompi/internal/netif"
)

// rankCPUs prints "rank Cpus_allowed_list" per rank, under either launcher.
const rankCPUs = `echo "$PMI_RANK $(grep Cpus_allowed_list: /proc/self/status | cut -f2)"`

func sortedLines(s string) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	sort.Strings(l)
	return strings.Join(l, "\n")
}

// sameAsHydra runs args under gompiexec and under mpiexec.hydra: both must
// succeed and print the same lines (in any order).
func sameAsHydra(t *testing.T, args []string) {
	t.Helper()
	r := runJob(t, "", args...)
	if r.Code != 0 {
		t.Fatalf("gompiexec exit %d: %s", r.Code, r.Stderr)
	}
	out, err := exec.Command("mpiexec.hydra", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("mpiexec.hydra: %v\n%s", err, out)
	}
	if got, want := sortedLines(r.Stdout), sortedLines(string(out)); got != want {
		t.Errorf("gompiexec:\n%s\nmpiexec.hydra:\n%s", got, want)
	}
}

func needHydra(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("mpiexec.hydra"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("MPICH's mpiexec.hydra is not installed (test/setup.sh installs mpich)")
		}
		t.Skip("MPICH's mpiexec.hydra is not installed")
	}
}

// Placement options bind every rank to what mpiexec.hydra binds it to on
// this machine: both run the same options and the ranks report their own
// affinity.
func TestPlacementMatchesHydra(t *testing.T) {
	needHydra(t)
	if len(ownCPUs(t)) < 2 {
		t.Skip("one CPU allowed: every binding is the same")
	}
	for _, opts := range []string{
		"-bind-to core -map-by socket",
		"-bind-to core -map-by numa",
		"-bind-to hwthread -map-by core",
		"-bind-to socket -map-by core",
		"-bind-to core:2",
		"-map-by core", // no binding without -bind-to, as in Hydra
		"-bind-to l1cache",
		"-bind-to l2cache",
		"-bind-to l3cache",
		"-bind-to machine",
		"-bind-to user:1,0", // the third rank is not bound
		"-bind-to user:0+1",
		"-bind-to rr",
	} {
		t.Run(opts, func(t *testing.T) {
			args := append(strings.Fields(opts), "-n", "3", "/bin/sh", "-c", rankCPUs)
			sameAsHydra(t, args)
		})
	}
}

// A rank starts with the -membind policy (the first mapping of its
// numa_maps shows it), whether or not it is bound. This VM has one NUMA
// node; bind: without nodes takes the nodes of the rank's CPUs (node 0).
func TestMembind(t *testing.T) {
	if _, err := os.Stat("/proc/self/numa_maps"); err != nil {
		t.Fatalf("no numa_maps (kernel without NUMA?): %v", err)
	}
	script := `echo "$PMI_RANK $(head -1 /proc/self/numa_maps | cut -d' ' -f2)"`
	for _, tc := range []struct {
		opts, want string
	}{
		{"-membind bind:0", "bind:0"},
		{"-bind-to core -membind interleave:0", "interleave:0"},
		{"-bind-to core -membind bind:", "bind:0"},
		{"-membind firsttouch", "local"},
		{"-membind nexttouch", "default"}, // Linux has none: left alone, with a warning
		{"", "default"},
	} {
		t.Run(tc.opts, func(t *testing.T) {
			args := append(strings.Fields(tc.opts), "-n", "2", "/bin/sh", "-c", script)
			r := runJob(t, "", args...)
			if r.Code != 0 {
				t.Fatalf("exit %d: %s", r.Code, r.Stderr)
			}
			if got, want := sortedLines(r.Stdout), "0 "+tc.want+"\n1 "+tc.want; got != want {
				t.Errorf("rank policies:\n%s\nwant\n%s", got, want)
			}
		})
	}
	r := runJob(t, "", "-membind", "bind:7", "-n", "1", "/bin/true")
	if r.Code != 255 || !strings.Contains(r.Stderr, "-membind bind:7: NUMA node 7 does not exist here (nodes: 0)") {
		t.Errorf("node 7: exit %d, stderr %q", r.Code, r.Stderr)
	}
	oneLine(t, r.Stderr)
}

// A host file's binding= replaces -bind-to on its host only.
func TestHostfileBinding(t *testing.T) {
	cpus := ownCPUs(t)
	if len(cpus) < 2 {
		t.Skip("one CPU allowed: every binding is the same")
	}
	a, b := fmt.Sprint(cpus[0]), fmt.Sprint(cpus[1])
	hosts := filepath.Join(t.TempDir(), "hosts")
	os.WriteFile(hosts, []byte("nodeA:2 binding=user:"+b+","+a+"\nnodeB:2\nnodeC:1 binding=none\n"), 0o644)
	script := `echo "$PMI_RANK $(grep Cpus_allowed_list: /proc/self/status | cut -f2)"`
	want := sortedLines("0 " + b + "\n1 " + a + "\n2 " + a + "\n3 " + b + "\n4 " + bind.Format(cpus))
	// -fanout 1: nodeA's proxy starts nodeB's, which starts nodeC's.
	for _, fanout := range []string{"32", "1"} {
		r := runJob(t, "", "-launcher", "fork", "-fanout", fanout, "-f", hosts, "-bind-to", "user:"+a+","+b, "-n", "5", "/bin/sh", "-c", script)
		if r.Code != 0 {
			t.Fatalf("-fanout %s: exit %d: %s", fanout, r.Code, r.Stderr)
		}
		if got := sortedLines(r.Stdout); got != want {
			t.Errorf("-fanout %s: got\n%s\nwant\n%s", fanout, got, want)
		}
	}
	os.WriteFile(hosts, []byte("nodeA:2 binding=cores\n"), 0o644)
	r := runJob(t, "", "-launcher", "fork", "-f", hosts, "-n", "1", "/bin/true")
	if r.Code != 255 || !strings.Contains(r.Stderr, `host nodeA: binding=cores: -bind-to "cores": unknown type`) {
		t.Errorf("bad binding=: exit %d, stderr %q", r.Code, r.Stderr)
	}
}

// advertised are the addresses Go ranks published for their peers (the
// runtime's gompi-rt-addr-R keys in a -pmi-trace).
func advertised(trace string) []string {
	var out []string
	for _, l := range strings.Split(trace, "\n") {
		if !strings.Contains(l, " C: cmd=put ") || !strings.Contains(l, " key=gompi-rt-addr-") {
			continue
		}
		for _, f := range strings.Fields(l) {
			if v, ok := strings.CutPrefix(f, "value="); ok {
				host, _, _ := net.SplitHostPort(v)
				out = append(out, host)
			}
		}
	}
	return out
}

// -iface IF: every Go rank advertises IF's address (and talks: the job
// runs), whichever interface of this machine is named; MPICH ranks get
// the name. An interface the host lacks fails the job naming both.
func TestIface(t *testing.T) {
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	tried := 0
	for _, ifi := range ifs {
		ip, err := netif.Addr(ifi.Name)
		if err != nil || ifi.Flags&net.FlagUp == 0 {
			continue
		}
		tried++
		r := runJob(t, "", "-iface", ifi.Name, "-pmi-trace", "-n", "2", bin("pi"))
		if r.Code != 0 {
			t.Fatalf("-iface %s: exit %d: %s", ifi.Name, r.Code, r.Stderr)
		}
		if got := advertised(r.Stderr); len(got) != 2 || got[0] != ip.String() || got[1] != ip.String() {
			t.Errorf("-iface %s: ranks advertised %v, want %s twice", ifi.Name, got, ip)
		}
	}
	if tried < 2 {
		t.Fatalf("%d interfaces with IPv4 up here, want lo and another", tried)
	}
	// The interface's variables win over the user's; HYDRA_IFACE is -iface.
	script := `echo "$GOMPI_HOST $MPIR_CVAR_NEMESIS_TCP_NETWORK_IFACE"`
	r := runJob(t, "", "-genv", "GOMPI_HOST", "192.0.2.77", "-iface", "lo", "-n", "1", "/bin/sh", "-c", script)
	if r.Stdout != "127.0.0.1 lo\n" {
		t.Errorf("-iface lo: rank env %q, want \"127.0.0.1 lo\\n\" (%s)", r.Stdout, r.Stderr)
	}
	t.Setenv("HYDRA_IFACE", "lo")
	if r := runJob(t, "", "-n", "1", "/bin/sh", "-c", script); r.Stdout != "127.0.0.1 lo\n" {
		t.Errorf("HYDRA_IFACE=lo: rank env %q (%s)", r.Stdout, r.Stderr)
	}
	t.Setenv("HYDRA_IFACE", "")
	r = runJob(t, "", "-iface", "gompi-none0", "-n", "1", "/bin/true")
	if r.Code != 255 || !strings.Contains(r.Stderr, `host localhost: -iface gompi-none0: no network interface "gompi-none0" here`) {
		t.Errorf("unknown interface: exit %d, stderr %q", r.Code, r.Stderr)
	}
	oneLine(t, r.Stderr)
}

// oneLine checks that a proxy's set-up error is said once: not again by
// gompi-proxy itself, nor as a lost connection with its exit status.
func oneLine(t *testing.T, stderr string) {
	t.Helper()
	if n := strings.Count(strings.TrimSpace(stderr), "\n"); n != 0 {
		t.Errorf("stderr has %d lines, want the error once:\n%s", n+1, stderr)
	}
}

// A host named again after another (a,b,a) is a further entry of the host
// list, as in Hydra: ranks go to the entries in list order, so such lists
// interleave hosts, with every option that places ranks. Each rank
// reports its host by the name hostname propagation gives it.
func TestHostListOrderMatchesHydra(t *testing.T) {
	needHydra(t)
	self, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	hf := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(hf, []byte("localhost\nlocalhost\n"+self+"\nlocalhost # again\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const where = `echo "$PMI_RANK ${MPIR_CVAR_CH3_INTERFACE_HOSTNAME}"`
	for _, opts := range []string{
		"-hosts localhost," + self + ",localhost," + self + " -n 6",
		"-hosts localhost:2," + self + ",localhost:3 -n 9",
		"-hosts localhost," + self + ",localhost -ppn 2 -n 8",
		"-f " + hf + " -n 5",
		"-f " + hf + " -n 9",
	} {
		t.Run(opts, func(t *testing.T) {
			args := append(strings.Fields(opts), "/bin/sh", "-c", where)
			sameAsHydra(t, args)
		})
	}
}

// Binding near I/O devices (Hydra's pci:, en/eth, ib, gpu, hfi) binds
// every rank where mpiexec.hydra binds it on this machine, and a kind of
// device the machine lacks fails the job under both.
func TestDeviceBindingMatchesHydra(t *testing.T) {
	needHydra(t)
	cases := []struct {
		opts  string
		fails bool
	}{
		{opts: "-bind-to en"},
		{opts: "-bind-to eth -map-by eth"},
		{opts: "-bind-to ib", fails: true},
		{opts: "-bind-to gpu", fails: true},
		{opts: "-bind-to hfi", fails: true},
		{opts: "-bind-to pci:00:1f.7", fails: true},
	}
	// The PCI function of the first network interface on one, if any.
	if ents, err := os.ReadDir("/sys/class/net"); err == nil {
		for _, e := range ents {
			dev, err := filepath.EvalSymlinks(filepath.Join("/sys/class/net", e.Name(), "device"))
			if err != nil {
				continue
			}
			for d := dev; d != "/sys/devices" && d != "/"; d = filepath.Dir(d) {
				if b := filepath.Base(d); len(b) == len("0000:00:00.0") && b[4] == ':' && b[10] == '.' {
					cases = append(cases, struct {
						opts  string
						fails bool
					}{opts: "-bind-to pci:" + b})
					break
				}
			}
			break
		}
	}
	for _, tc := range cases {
		t.Run(tc.opts, func(t *testing.T) {
			args := append(strings.Fields(tc.opts), "-n", "3", "/bin/sh", "-c", rankCPUs)
			if !tc.fails {
				sameAsHydra(t, args)
				return
			}
			r := runJob(t, "", args...)
			out, herr := exec.Command("mpiexec.hydra", args...).CombinedOutput()
			if herr == nil || r.Code == 0 {
				t.Fatalf("want both to fail: mpiexec.hydra %v\n%s\ngompiexec exit %d\n%s", herr, out, r.Code, r.Stdout)
			}
			t.Logf("gompiexec: %s", strings.TrimSpace(r.Stderr))
		})
	}
}
