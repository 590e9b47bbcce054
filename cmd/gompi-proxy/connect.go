package main

import (
	"context"
	"io"
	"os"
	"time"

	"github.com/gompi/gompi/internal/launcher"
)

// sessionStream is the byte stream the control session runs over: a TCP
// connection back to gompiexec when $GOMPI_CONNECT is set (slurm launcher,
// docs/control.md "Connect-back"), else stdin and stdout.
func sessionStream(ctx context.Context) (io.ReadWriteCloser, error) {
	v := os.Getenv(launcher.ConnectEnv)
	if v == "" {
		return newStdio(), nil
	}
	addrs, err := launcher.ParseConnectEnv(v, os.Getenv("SLURM_LAUNCH_NODE_IPADDR"))
	if err != nil {
		return nil, err
	}
	secret, err := launcher.ParseSecret(os.Getenv(launcher.ConnectSecretEnv))
	// Ranks must not inherit the secret nor the address, nor what srun
	// set for the proxies' own step (an srun a rank runs would take up
	// --overlap and --ntasks-per-node=1): what gompiexec had of those
	// still reaches them with its environment, as under Hydra.
	os.Unsetenv(launcher.ConnectSecretEnv)
	os.Unsetenv(launcher.ConnectEnv)
	os.Unsetenv("SLURM_OVERLAP")
	os.Unsetenv("SLURM_NTASKS_PER_NODE")
	if err != nil {
		return nil, err
	}
	name := os.Getenv("SLURMD_NODENAME")
	if name == "" {
		if name, err = os.Hostname(); err != nil {
			return nil, err
		}
	}
	return launcher.DialConnectBack(ctx, addrs, secret, name, 10*time.Second)
}
