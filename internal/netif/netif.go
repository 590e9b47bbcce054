// Package netif resolves a network interface name (gompiexec -iface,
// HYDRA_IFACE) to the address ranks and listeners use on this host.
package netif

import (
	"fmt"
	"net"
	"strings"
)

// Addr is the interface's first IPv4 address or, on an interface with
// none, its first global IPv6 address (unique-local included; link-local
// ones need a zone that peers on other hosts cannot use). Errors name the
// interface and list the ones this host has.
func Addr(name string) (net.IP, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		var names []string
		if all, err := net.Interfaces(); err == nil {
			for _, i := range all {
				names = append(names, i.Name)
			}
		}
		return nil, fmt.Errorf("no network interface %q here (interfaces: %s)", name, strings.Join(names, ", "))
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		return nil, fmt.Errorf("network interface %s: %w", name, err)
	}
	var v6 net.IP
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		if ip4 := ipn.IP.To4(); ip4 != nil {
			return ip4, nil
		}
		if v6 == nil && ipn.IP.IsGlobalUnicast() {
			v6 = ipn.IP
		}
	}
	if v6 != nil {
		return v6, nil
	}
	if ifi.Flags&net.FlagUp == 0 {
		return nil, fmt.Errorf("network interface %s is down and has no IPv4 or global IPv6 address", name)
	}
	return nil, fmt.Errorf("network interface %s has no IPv4 or global IPv6 address", name)
}
