package main

import (
	"context"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/gompi/gompi/hostfile"
	"github.com/gompi/gompi/pmi/nameserver"
)

// More of Hydra's options: where the host list comes from and how it is
// ordered, and options that choose Hydra internals gompiexec does not have
// (accepted, so scripts written for mpiexec.hydra run unchanged).
type hostOpts struct {
	rmk            string // -rmk, HYDRA_RMK: "" detects
	skipLaunchNode bool   // -skip-launch-node
	orderNodes     string // -order-nodes: "", "ascending", "descending"
	localhost      string // -localhost: the name proxies connect back to
	nameserver     string // -nameserver HOST:PORT, checked
}

func init() {
	alias(optSpec{1, false, func(o *options, _ *segment, v []string) error {
		if err := o.once("rmk", "rmk"); err != nil {
			return err
		}
		return setRMK(o, "-rmk ", v[0])
	}}, "rmk")
	alias(optSpec{1, false, func(o *options, _ *segment, v []string) error {
		if err := o.once("localhost", "localhost"); err != nil {
			return err
		}
		if v[0] == "" || strings.ContainsAny(v[0], " \t,") {
			return usagef("-localhost %q: want this host's name or address as the other hosts reach it", v[0])
		}
		o.localhost = v[0]
		return nil
	}}, "localhost")
	alias(optSpec{1, false, func(o *options, _ *segment, v []string) error {
		if err := o.once("nameserver", "nameserver"); err != nil {
			return err
		}
		addr, err := nameserver.ParseAddr(v[0])
		if err != nil {
			return usagef("-nameserver: %v", err)
		}
		o.nameserver = addr
		return nil
	}}, "nameserver")
	alias(optSpec{0, false, func(o *options, _ *segment, _ []string) error {
		o.skipLaunchNode = true
		return nil
	}}, "skip-launch-node")
	alias(optSpec{1, false, func(o *options, _ *segment, v []string) error {
		if err := o.once("order-nodes", "order-nodes"); err != nil {
			return err
		}
		switch strings.ToLower(v[0]) {
		case "ascending", "up":
			o.orderNodes = "ascending"
		case "descending", "down":
			o.orderNodes = "descending"
		default:
			return usagef("-order-nodes %q: want ASCENDING or DESCENDING (or up, down)", v[0])
		}
		return nil
	}}, "order-nodes")
	// Hydra's event engine and topology library: gompiexec has one of
	// each (Go's poller, Linux sysfs), so these choose nothing.
	alias(optSpec{1, false, func(_ *options, _ *segment, v []string) error {
		if v[0] != "poll" && v[0] != "select" {
			return usagef("-demux %q: want poll or select", v[0])
		}
		return nil
	}}, "demux")
	alias(optSpec{1, false, func(_ *options, _ *segment, v []string) error {
		if v[0] != "hwloc" {
			return usagef("-topolib %q: want hwloc", v[0])
		}
		return nil
	}}, "topolib")
	alias(optSpec{0, false, func(*options, *segment, []string) error { return nil }}, "disable-x")
	alias(optSpec{0, false, func(*options, *segment, []string) error {
		return usagef("-enable-x: gompiexec forwards no X11 connections (as Hydra's default, -disable-x); set DISPLAY for the ranks with -genv DISPLAY if they can reach an X server")
	}}, "enable-x")
}

func setRMK(o *options, label, v string) error {
	v = strings.ToLower(v)
	if v != "user" && !slices.Contains(hostfile.RMKs, v) {
		return usagef("%s%q: known resource managers are user, %s", label, v, strings.Join(hostfile.RMKs, ", "))
	}
	o.rmk = v
	return nil
}

// arrangeHosts applies -skip-launch-node and -order-nodes to the host list.
func arrangeHosts(o *options, hosts []hostfile.Host) ([]hostfile.Host, error) {
	if o.skipLaunchNode {
		kept := hosts[:0:0]
		for _, h := range hosts {
			if !isLaunchNode(h.Name) {
				kept = append(kept, h)
			}
		}
		if len(kept) == 0 {
			return nil, usagef("-skip-launch-node: every host of the list is this one (%s)", hosts[0].Name)
		}
		hosts = kept
	}
	switch o.orderNodes {
	case "ascending":
		slices.SortStableFunc(hosts, func(a, b hostfile.Host) int { return a.Slots - b.Slots })
	case "descending":
		slices.SortStableFunc(hosts, func(a, b hostfile.Host) int { return b.Slots - a.Slots })
	}
	return hosts, nil
}

// isLaunchNode: name is this machine, by name, by address, or by what it
// resolves to (Hydra's test; bounded, since a slow resolver must not hang
// the start).
func isLaunchNode(name string) bool {
	if localNames()[name] {
		return true
	}
	mine := map[string]bool{}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				mine[ipn.IP.String()] = true
			}
		}
	}
	if ip := net.ParseIP(name); ip != nil {
		return ip.IsLoopback() || mine[ip.String()]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupIP(ctx, "ip", name)
	if err != nil {
		return false
	}
	for _, ip := range ips {
		if ip.IsLoopback() || mine[ip.String()] {
			return true
		}
	}
	return false
}

// hostEnv reads the environment variables of these options and Hydra's
// older checkpoint ones (HYDRA_CKPOINT_PREFIX, HYDRA_CKPOINT_INT), where
// the command line did not set them.
func hostEnv(o *options, getenv func(string) string) error {
	if v := getenv("HYDRA_RMK"); v != "" && !o.seen["rmk"] {
		if err := setRMK(o, "HYDRA_RMK=", v); err != nil {
			return err
		}
	}
	if v := getenv("HYDRA_CKPOINT_PREFIX"); v != "" && o.ckptPrefix == "" {
		// Hydra 3 took a ':'-list and used its first directory.
		o.ckptPrefix, _, _ = strings.Cut(v, ":")
	}
	if v := getenv("HYDRA_CKPOINT_INT"); v != "" && o.ckptInterval == 0 && o.ckptPrefix != "" {
		d, err := envDur("HYDRA_CKPOINT_INT", v)
		if err != nil {
			return err
		}
		o.ckptInterval = d
	}
	return nil
}

// useLocalhost is Hydra's host file name for "this machine, one slot".
const useLocalhost = "HYDRA_USE_LOCALHOST"

func localhostOne() []hostfile.Host { return []hostfile.Host{{Name: "localhost", Slots: 1}} }
