package main

import (
	"fmt"
	"os"

	"github.com/gompi/gompi/hostfile"
	"github.com/gompi/gompi/internal/bind"
)

// placeOpts are the placement and network options: where ranks run on a
// host and which interface they talk over. Kept apart from args.go's
// table so that each group's additions merge on their own.
type placeOpts struct {
	bindTo  string // -bind-to, checked; "" for none
	mapBy   string // -map-by, checked; "" for the binding's objects
	membind string // -membind, checked; "" for none
	iface   string // -iface; "" for none
}

func init() {
	alias(optSpec{1, false, func(o *options, _ *segment, v []string) (err error) {
		o.place.bindTo, err = checkBind(v[0])
		return
	}}, "bind-to", "binding")
	alias(optSpec{1, false, func(o *options, _ *segment, v []string) (err error) {
		o.place.mapBy, err = checkMap(v[0])
		return
	}}, "map-by", "mapping")
	alias(optSpec{1, false, func(o *options, _ *segment, v []string) (err error) {
		o.place.membind, err = checkMembind(v[0])
		return
	}}, "membind")
	alias(optSpec{1, false, func(o *options, _ *segment, v []string) error {
		if v[0] == "" {
			return usagef("-iface: empty interface name")
		}
		o.place.iface = v[0]
		return nil
	}}, "iface")
}

// checkBind is -bind-to's value as proxies read it; "" for none.
func checkBind(v string) (string, error) {
	spec, err := bind.Parse(v)
	if err != nil || spec.None() {
		return "", usageErr(err)
	}
	return spec.String(), nil
}

func checkMap(v string) (string, error) {
	spec, err := bind.ParseMap(v)
	if err != nil || spec.None() {
		return "", usageErr(err)
	}
	return spec.String(), nil
}

func checkMembind(v string) (string, error) {
	spec, err := bind.ParseMem(v)
	if err != nil || spec.None() {
		return "", usageErr(err)
	}
	return spec.String(), nil
}

func usageErr(err error) error {
	if err == nil {
		return nil
	}
	return usagef("%v", err)
}

// placeDefaults fills what the command line left unset from Hydra's
// variables (HYDRA_BINDING, HYDRA_MAPPING, HYDRA_MEMBIND, HYDRA_IFACE),
// and checks every host's binding= from the host file.
func placeDefaults(p *placeOpts, getenv func(string) string, hosts []hostfile.Host) error {
	for _, e := range []struct {
		name  string
		dst   *string
		check func(string) (string, error)
	}{
		{"HYDRA_BINDING", &p.bindTo, checkBind},
		{"HYDRA_MAPPING", &p.mapBy, checkMap},
		{"HYDRA_MEMBIND", &p.membind, checkMembind},
		{"HYDRA_IFACE", &p.iface, func(v string) (string, error) { return v, nil }},
	} {
		v := getenv(e.name)
		if *e.dst != "" || v == "" {
			continue
		}
		var err error
		if *e.dst, err = e.check(v); err != nil {
			return fmt.Errorf("%s=%s: %w", e.name, v, err)
		}
	}
	for i, h := range hosts {
		if h.Binding == "" {
			continue
		}
		v, err := checkBind(h.Binding)
		if err != nil {
			return fmt.Errorf("host %s: binding=%s: %w", h.Name, h.Binding, err)
		}
		if v == "" {
			v = "none" // replaces -bind-to on that host all the same
		}
		hosts[i].Binding = v
	}
	if p.membind == "nexttouch" {
		fmt.Fprintln(os.Stderr, "gompiexec: warning: -membind nexttouch: Linux has no next-touch policy; "+
			"ranks keep the default (first-touch) placement, as under Hydra")
	}
	return nil
}
