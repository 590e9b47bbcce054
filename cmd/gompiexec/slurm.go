package main

import (
	"log/slog"
	"os"

	"github.com/gompi/gompi/hostfile"
	"github.com/gompi/gompi/internal/launcher"
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

// slurmBackend starts every host's proxy in one srun step.
func slurmBackend(log *slog.Logger) (func(hostfile.Host) launcher.Backend, error) {
	be, err := launcher.NewSlurm(launcher.SlurmConfig{Stderr: os.Stderr, Log: log})
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
