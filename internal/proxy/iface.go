package proxy

import (
	"fmt"
	"strconv"
	"strings"

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
	ip, err := netif.Addr(job.Iface)
	if err != nil {
		return nil, fmt.Errorf("proxy: host %s: -iface %s: %w", job.Host, job.Iface, err)
	}
	return []string{"GOMPI_HOST=" + ip.String(), "MPIR_CVAR_NEMESIS_TCP_NETWORK_IFACE=" + job.Iface}, nil
}

// hostnameEnv is Hydra's hostname propagation: MPICH's ch3 advertises
// the name the host list gives this host instead of resolving its own.
func hostnameEnv(job *control.Job) []string {
	if job.Hostname == "" {
		return nil
	}
	return []string{"MPIR_CVAR_CH3_INTERFACE_HOSTNAME=" + job.Hostname}
}

// cudaDevices is CUDA_VISIBLE_DEVICES for the proxy's local rank local
// under -gpus-per-proc per, as Hydra numbers them: consecutive blocks of
// per devices by local rank, "-1" (no device) for 0. Hydra does not
// wrap at the host's device count; neither does this.
func cudaDevices(per, local int) string {
	if per <= 0 {
		return "-1"
	}
	var b strings.Builder
	for k := range per {
		if k > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(local*per + k))
	}
	return b.String()
}
