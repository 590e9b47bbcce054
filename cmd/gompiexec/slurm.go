package main

import (
	"fmt"
	"log/slog"
	"net"
	"os"

	"github.com/gompi/gompi/hostfile"
	"github.com/gompi/gompi/internal/launcher"
	"github.com/gompi/gompi/internal/netif"
)

// useSlurm: -launcher slurm, or no launcher chosen inside a Slurm
// allocation (as Hydra does), where proxies belong in a job step.
func useSlurm(o *options) bool {
	if o.launcher == "slurm" {
		return true
	}
	return o.launcher == "" && o.launcherExe == "" && inSlurmAllocation(os.Getenv)
}

func inSlurmAllocation(getenv func(string) string) bool {
	return getenv("SLURM_JOB_ID") != "" && (getenv("SLURM_JOB_NODELIST") != "" || getenv("SLURM_NODELIST") != "")
}

var slurmBE *launcher.Slurm

// slurmBackend starts every host's proxy in one srun step. With -iface the
// proxies connect back to that interface's address only.
func slurmBackend(log *slog.Logger, iface string) (func(hostfile.Host) launcher.Backend, error) {
	cfg := launcher.SlurmConfig{Stderr: os.Stderr, Log: log}
	ports, err := portRange(os.Getenv)
	if err != nil {
		return nil, err
	}
	cfg.Ports = ports
	if iface != "" {
		ip, err := netif.IPv4(iface)
		if err != nil {
			return nil, fmt.Errorf("-iface %s on this host (gompiexec's): %w", iface, err)
		}
		cfg.Listen = net.JoinHostPort(ip.String(), "0")
	}
	be, err := launcher.NewSlurm(cfg)
	if err != nil {
		return nil, err
	}
	slurmBE = be
	log.Debug("launcher chosen", "launcher", "slurm", "job", os.Getenv("SLURM_JOB_ID"))
	return func(hostfile.Host) launcher.Backend { return be }, nil
}

// portRangeVars are where Hydra looks for the port range of its
// connect-back listener, first set wins (MPICH's CVAR and its aliases).
var portRangeVars = []string{"MPIR_CVAR_CH3_PORT_RANGE", "MPIR_PARAM_CH3_PORT_RANGE", "MPICH_CH3_PORT_RANGE",
	"MPIR_CVAR_PORTRANGE", "MPIR_CVAR_PORT_RANGE", "MPIR_PARAM_PORTRANGE", "MPIR_PARAM_PORT_RANGE",
	"MPICH_PORTRANGE", "MPICH_PORT_RANGE", "MPIEXEC_PORTRANGE", "MPIEXEC_PORT_RANGE"}

// portRange is the range the slurm launcher's listener takes its port
// from, nil when none is set.
func portRange(getenv func(string) string) (*launcher.PortRange, error) {
	for _, k := range portRangeVars {
		if v := getenv(k); v != "" {
			return launcher.ParsePortRange(k, v)
		}
	}
	return nil, nil
}

func closeSlurm() {
	if slurmBE != nil {
		slurmBE.Close()
	}
}
