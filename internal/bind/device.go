package bind

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Hydra binds ranks near I/O devices too: -bind-to pci:BUSID, gpu[N],
// ib[NAME], hfi[NAME], en or eth[NAME] give each rank in turn the CPUs
// local to one such device (hwloc's non-I/O ancestor: the NUMA node or
// package the device hangs off, the whole machine when the kernel gives
// it no locality). They are found in sysfs, as hwloc's Linux backend does.

// deviceTypes are the Spec types that name devices.
var deviceTypes = []string{"pci", "gpu", "ib", "hfi", "en"}

// Device reports whether s binds to I/O devices.
func (s Spec) Device() bool { return slices.Contains(deviceTypes, s.Type) }

// gpuName matches DRM cards (card0), not their connectors (card0-DP-1).
// No regexp: package init must not allocate (gompi-proxy starts it).
func gpuName(n string) bool {
	d, ok := strings.CutPrefix(n, "card")
	return ok && d != "" && strings.Trim(d, "0123456789") == ""
}

// parseDevice reads the device forms of -bind-to and -map-by; ok is false
// when v is not one.
func parseDevice(opt, v string) (s Spec, ok bool, err error) {
	if rest, isPCI := strings.CutPrefix(v, "pci:"); isPCI {
		id, err := pciID(rest)
		if err != nil {
			return Spec{}, true, fmt.Errorf("%s %q: %w", opt, v, err)
		}
		return Spec{Type: "pci", Name: id, N: 1}, true, nil
	}
	typ, count, hasN := strings.Cut(v, ":")
	var prefix string
	for _, p := range []string{"gpu", "ib", "hfi", "eth", "en"} {
		if strings.HasPrefix(typ, p) {
			prefix = p
			break
		}
	}
	if prefix == "" {
		return Spec{}, false, nil
	}
	s = Spec{Type: prefix, N: 1}
	if prefix == "eth" {
		s.Type = "en" // one kind for Hydra: network interfaces
	}
	if name := typ[len(prefix):]; name != "" {
		s.Name = typ // a device by its name (eth0, ib0, hfi1_0) or gpuN
		if prefix == "gpu" {
			if _, err := strconv.Atoi(name); err != nil {
				return Spec{}, true, fmt.Errorf("%s %q: want gpu or gpuN, N the GPU's index", opt, v)
			}
		}
		if strings.ContainsAny(name, "/") {
			return Spec{}, true, fmt.Errorf("%s %q: bad device name", opt, v)
		}
	}
	if hasN {
		n, err := strconv.Atoi(count)
		if err != nil || n < 1 {
			return Spec{}, true, fmt.Errorf("%s %q: count %q: want an integer >= 1", opt, v, count)
		}
		s.N = n
	}
	return s, true, nil
}

// pciID normalises a PCI bus id ("00:02.0", "0000:00:02.0") to sysfs's
// form.
func pciID(s string) (string, error) {
	bad := fmt.Errorf("%q is not a PCI bus id (want [DOMAIN:]BUS:DEVICE.FUNCTION, e.g. 0000:3b:00.0)", s)
	parts := strings.Split(strings.ToLower(s), ":")
	if len(parts) == 2 {
		parts = append([]string{"0"}, parts...)
	}
	if len(parts) != 3 {
		return "", bad
	}
	dev, fn, ok := strings.Cut(parts[2], ".")
	if !ok || len(fn) != 1 || fn[0] < '0' || fn[0] > '7' {
		return "", bad
	}
	var out [3]uint64
	for i, v := range []string{parts[0], parts[1], dev} {
		width := 2
		if i == 0 {
			width = 4
		}
		n, err := strconv.ParseUint(v, 16, 16)
		if err != nil || len(v) > width || strings.HasPrefix(v, "+") {
			return "", bad
		}
		out[i] = n
	}
	return fmt.Sprintf("%04x:%02x:%02x.%s", out[0], out[1], out[2], fn), nil
}

// ReadDevices finds the devices s names under the sysfs tree sys
// (normally /sys) and sets s.Devices to each one's local CPUs (nil: no
// locality, the whole machine), in sysfs name order. None found is an
// error naming what was looked for.
func ReadDevices(sys string, s *Spec) error {
	var dirs []string // each device's directory (its class entry)
	switch s.Type {
	case "pci":
		dirs = []string{filepath.Join(sys, "bus", "pci", "devices", s.Name)}
		if _, err := os.Stat(dirs[0]); err != nil {
			return fmt.Errorf("-bind-to pci:%s: no such PCI device on this host", s.Name)
		}
	case "en", "ib":
		names, err := classEntries(filepath.Join(sys, "class", "net"), func(n string) bool {
			return s.Type == "en" || strings.HasPrefix(n, "ib")
		})
		if err != nil {
			return err
		}
		for _, n := range names {
			// Only interfaces on a device (not lo, bridges, veths).
			if _, err := os.Stat(filepath.Join(sys, "class", "net", n, "device")); err == nil {
				dirs = append(dirs, filepath.Join(sys, "class", "net", n, "device"))
			}
		}
	case "hfi":
		names, err := classEntries(filepath.Join(sys, "class", "infiniband"), func(n string) bool { return strings.HasPrefix(n, "hfi") })
		if err != nil {
			return err
		}
		for _, n := range names {
			dirs = append(dirs, filepath.Join(sys, "class", "infiniband", n, "device"))
		}
	case "gpu":
		names, err := classEntries(filepath.Join(sys, "class", "drm"), gpuName)
		if err != nil {
			return err
		}
		slices.SortFunc(names, func(a, b string) int {
			x, _ := strconv.Atoi(a[len("card"):])
			y, _ := strconv.Atoi(b[len("card"):])
			return x - y
		})
		for _, n := range names {
			dirs = append(dirs, filepath.Join(sys, "class", "drm", n, "device"))
		}
	default:
		return fmt.Errorf("bind: %s is not a device type", s.Type)
	}
	if s.Name != "" && s.Type != "pci" {
		dirs = pickNamed(s, dirs)
	}
	if len(dirs) == 0 {
		what := map[string]string{"en": "network interface on a device", "ib": "InfiniBand network interface (ib*)",
			"hfi": "Omni-Path adapter (hfi*)", "gpu": "GPU (/sys/class/drm/cardN)"}[s.Type]
		if s.Name != "" {
			what = what + " named " + s.Name
		}
		return fmt.Errorf("-bind-to %s: no %s on this host", s, what)
	}
	s.Devices = make([][]int, len(dirs))
	for i, d := range dirs {
		cpus, err := localCPUs(d)
		if err != nil {
			return err
		}
		s.Devices[i] = cpus
	}
	return nil
}

// pickNamed keeps the device s names among dirs (class entries' device
// links): gpuN is the Nth GPU, other names are the entry's own.
func pickNamed(s *Spec, dirs []string) []string {
	if s.Type == "gpu" {
		n, _ := strconv.Atoi(s.Name[len("gpu"):])
		if n < len(dirs) {
			return dirs[n : n+1]
		}
		return nil
	}
	for _, d := range dirs {
		if filepath.Base(filepath.Dir(d)) == s.Name {
			return []string{d}
		}
	}
	return nil
}

// classEntries lists a sysfs class directory's entries that keep says to
// (none when the class does not exist: no such devices).
func classEntries(dir string, keep func(string) bool) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if keep(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// localCPUs is the local_cpulist of the device at dir or of the nearest
// bus device above it that has one (a PCI function's); nil when none has:
// the device is local to the whole machine.
func localCPUs(dir string) ([]int, error) {
	d, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, err
	}
	for ; d != "/" && d != "." && filepath.Base(d) != "devices"; d = filepath.Dir(d) {
		l, err := readList(filepath.Join(d, "local_cpulist"))
		if err == nil && len(l) > 0 {
			return l, nil
		}
		if err != nil && !os.IsNotExist(err) {
			return nil, err
		}
	}
	return nil, nil
}
