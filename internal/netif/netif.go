// Package netif resolves a network interface name (gompiexec -iface,
// HYDRA_IFACE) to the IPv4 address ranks and listeners use on this host.
package netif

import (
	"fmt"
	"net"
	"strings"
)

// IPv4 is the first IPv4 address of the interface called name. Errors name
// the interface and list the ones this host has.
func IPv4(name string) (net.IP, error) {
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
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
			return ipn.IP.To4(), nil
		}
	}
	if ifi.Flags&net.FlagUp == 0 {
		return nil, fmt.Errorf("network interface %s is down and has no IPv4 address", name)
	}
	return nil, fmt.Errorf("network interface %s has no IPv4 address", name)
}
