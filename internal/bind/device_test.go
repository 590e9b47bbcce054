package bind

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// fakeDevices writes, under a sysfs root, two PCI functions local to one
// socket each (as on a two-socket server), a virtio NIC with no locality,
// InfiniBand and Ethernet interfaces, two DRM GPUs (with a connector and
// a render node beside them) and an Omni-Path adapter.
func fakeDevices(t *testing.T) string {
	t.Helper()
	sys := t.TempDir()
	mk := func(p, content string) {
		t.Helper()
		p = filepath.Join(sys, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, p string) {
		t.Helper()
		p = filepath.Join(sys, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(sys, target), p); err != nil {
			t.Fatal(err)
		}
	}
	s0, s1 := "devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0", "devices/pci0000:ae/0000:ae:00.0/0000:af:00.0"
	mk(s0+"/local_cpulist", "0-1,4-5\n")
	mk(s1+"/local_cpulist", "2-3,6-7\n")
	mk("devices/platform/virtio2/vendor", "0x1af4\n")
	link(s0, "bus/pci/devices/0000:3b:00.0")
	link(s1, "bus/pci/devices/0000:af:00.0")
	link(s0, "class/net/ib0/device")
	link(s1, "class/net/ib1/device")
	link("devices/platform/virtio2", "class/net/eth0/device")
	mk("class/net/lo/type", "772\n") // no device: not a NIC
	link(s1, "class/drm/card0/device")
	link(s0, "class/drm/card1/device")
	link(s1, "class/drm/card0-DP-1/device")
	link(s1, "class/drm/renderD128/device")
	link(s0, "class/infiniband/hfi1_0/device")
	return sys
}

// Each rank is bound to the CPUs near one device of the kind, in turn, as
// Hydra binds with hwloc's I/O objects.
func TestPlanDevices(t *testing.T) {
	sys := fakeDevices(t)
	all8 := []int{0, 1, 2, 3, 4, 5, 6, 7}
	for _, tc := range []struct {
		spec, mapBy string
		allowed     []int
		want        []string
	}{
		{"ib", "", all8, []string{"0-1,4-5", "2-3,6-7", "0-1,4-5"}},
		{"ib1", "", all8, []string{"2-3,6-7", "2-3,6-7"}},
		{"gpu", "", all8, []string{"2-3,6-7", "0-1,4-5", "2-3,6-7"}},
		{"gpu1", "", all8, []string{"0-1,4-5", "0-1,4-5"}},
		{"gpu", "gpu", all8, []string{"2-3,6-7", "0-1,4-5"}},
		{"pci:3b:00.0", "", all8, []string{"0-1,4-5", "0-1,4-5"}},
		{"pci:0000:AF:00.0", "", all8, []string{"2-3,6-7"}},
		{"hfi", "", all8, []string{"0-1,4-5", "0-1,4-5"}},
		{"eth0", "", all8, []string{"0-7", "0-7"}}, // no locality: the machine
		{"ib", "", []int{2, 3}, []string{"2-3", "2-3"}},
		{"gpu:2", "", all8, []string{"0-7", "0-7"}},
	} {
		t.Run(tc.spec+" "+tc.mapBy, func(t *testing.T) {
			b, err := Parse(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			m, err := ParseMap(tc.mapBy)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range []*Spec{&b, &m} {
				if s.Device() {
					if err := ReadDevices(sys, s); err != nil {
						t.Fatal(err)
					}
				}
			}
			topo, err := Read(fakeSysfs(t, twoSockets), tc.allowed)
			if err != nil {
				t.Fatal(err)
			}
			sets, err := topo.Plan(b, m)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for l := range tc.want {
				got = append(got, Format(Pick(sets, b, l)))
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestDeviceErrors(t *testing.T) {
	sys := fakeDevices(t)
	for _, tc := range []struct{ spec, wantErr string }{
		{"pci:00:09.0", "-bind-to pci:0000:00:09.0: no such PCI device on this host"},
		{"ib7", "no InfiniBand network interface (ib*) named ib7 on this host"},
		{"gpu2", "no GPU (/sys/class/drm/cardN) named gpu2"},
		{"eth1", "no network interface on a device named eth1"},
		{"lo", `unknown type "lo"`},
	} {
		b, err := Parse(tc.spec)
		if err == nil {
			err = ReadDevices(sys, &b)
		}
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: err %v, want %q", tc.spec, err, tc.wantErr)
		}
	}
	// A host without the class directories has no such devices.
	for _, typ := range []string{"gpu", "hfi", "ib", "en"} {
		b, _ := Parse(typ)
		if err := ReadDevices(t.TempDir(), &b); err == nil || !strings.Contains(err.Error(), "on this host") {
			t.Errorf("%s on an empty sysfs: %v", typ, err)
		}
	}
	// As Hydra: devices map only by devices of their own kind.
	topo, err := Read(fakeSysfs(t, twoSockets), []int{0, 1, 2, 3, 4, 5, 6, 7})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range [][2]string{{"ib", "socket"}, {"core", "gpu"}, {"ib", "gpu"}} {
		b, _ := Parse(tc[0])
		m, _ := ParseMap(tc[1])
		for _, s := range []*Spec{&b, &m} {
			if s.Device() {
				if err := ReadDevices(sys, s); err != nil {
					t.Fatal(err)
				}
			}
		}
		if _, err := topo.Plan(b, m); err == nil || !strings.Contains(err.Error(), "map by their own devices only") {
			t.Errorf("-bind-to %s -map-by %s: %v", tc[0], tc[1], err)
		}
	}
}
