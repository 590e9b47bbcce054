package proxy

import (
	"fmt"

	"github.com/gompi/gompi/internal/control"
	"github.com/gompi/gompi/internal/netif"
)

// ifaceEnv is what -iface sets in every rank's environment: the address
// of the interface on this host for the Go runtime (GOMPI_HOST, the
// address its peers dial) and the name for MPICH's ch3 TCP netmod, as
// Hydra sets it. It goes after the user's variables (Hydra's system
// environment), so it wins. A host without the interface fails the job.
func ifaceEnv(job *control.Job) ([]string, error) {
	if job.Iface == "" {
		return nil, nil
	}
	ip, err := netif.IPv4(job.Iface)
	if err != nil {
		return nil, fmt.Errorf("proxy: host %s: -iface %s: %w", job.Host, job.Iface, err)
	}
	return []string{"GOMPI_HOST=" + ip.String(), "MPIR_CVAR_NEMESIS_TCP_NETWORK_IFACE=" + job.Iface}, nil
}
