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
	// Ranks must not inherit the secret nor the address.
	os.Unsetenv(launcher.ConnectSecretEnv)
	os.Unsetenv(launcher.ConnectEnv)
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
