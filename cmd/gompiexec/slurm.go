package main

import (
	"fmt"
	"log/slog"
	"net"
	"os"

	"github.com/gompi/gompi/hostfile"
	"github.com/gompi/gompi/internal/launcher"
	"github.com/gompi/gompi/internal/netif"
	"github.com/gompi/gompi/internal/portrange"
)

// useSlurm: -launcher slurm, or no launcher chosen inside a Slurm
// allocation (as Hydra does), where proxies belong in a job step.
func useSlurm(o *options) bool {
	if o.launcher == "slurm" {
		return true
	}
	// Another -rmk's hosts (or none, -rmk user) are not the allocation's:
	// srun could not start proxies there.
	return o.launcher == "" && o.launcherExe == "" && (o.rmk == "" || o.rmk == "slurm") && inSlurmAllocation(os.Getenv)
}

func inSlurmAllocation(getenv func(string) string) bool {
	return getenv("SLURM_JOB_ID") != "" && (getenv("SLURM_JOB_NODELIST") != "" || getenv("SLURM_NODELIST") != "")
}

// slurmJobNodes are the allocation's nodes, which alone srun can start
// proxies on; none outside an allocation and in a heterogeneous job (its
// components' node lists are separate).
func slurmJobNodes(getenv func(string) string) ([]string, error) {
	if getenv("SLURM_JOB_ID") == "" || getenv("SLURM_HET_SIZE") != "" {
		return nil, nil
	}
	list := getenv("SLURM_JOB_NODELIST")
	if list == "" {
		list = getenv("SLURM_NODELIST")
	}
	if list == "" {
		return nil, nil
	}
	nodes, err := hostfile.ExpandNodeList(list)
	if err != nil {
		return nil, fmt.Errorf("slurm allocation: SLURM_JOB_NODELIST: %w", err)
	}
	return nodes, nil
}

var slurmBE *launcher.Slurm

// slurmBackend starts every host's proxy in one srun step. With -iface the
// proxies connect back to that interface's address only; with -localhost
// to that name.
func slurmBackend(log *slog.Logger, iface, localhost string) (func(hostfile.Host) launcher.Backend, error) {
	cfg := launcher.SlurmConfig{Stderr: os.Stderr, Log: log, AdvertiseHost: localhost}
	ports, err := portrange.FromEnv(os.Getenv)
	if err != nil {
		return nil, err
	}
	cfg.Ports = ports
	if cfg.JobNodes, err = slurmJobNodes(os.Getenv); err != nil {
		return nil, err
	}
	cfg.JobID = os.Getenv("SLURM_JOB_ID")
	if iface != "" {
		ip, err := netif.Addr(iface)
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

func closeSlurm() {
	if slurmBE != nil {
		slurmBE.Close()
	}
}
