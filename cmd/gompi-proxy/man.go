package main

import (
	"fmt"
	"os"

	"github.com/gompi/gompi/internal/buildinfo"
	"github.com/gompi/gompi/internal/launcher"
	"github.com/gompi/gompi/internal/manpage/roff"
)

const proxyHelp = `gompi-proxy is gompi's per-host agent. gompiexec starts one on every host of a
job (as a child process, over SSH, through an rsh-style agent, or in one srun step
inside a Slurm allocation); it starts the host's ranks, serves them PMI, forwards
their output, signals and exit statuses, and kills them when the job ends or its
launcher is lost. Users do not run it by hand.

It speaks gompi's control protocol (docs/control.md) over its standard input and
output, or, under the slurm launcher, over a TCP connection back to gompiexec that
both sides authenticate with a per-job secret.

Usage:
  gompi-proxy                 serve one job (launched by gompiexec)
  gompi-proxy -version        print the build's version, commit and sha256
  gompi-proxy -persist-start IDLE [SHA256]
                              find or start this host's persistent proxy and print
                              its socket (what gompiexec -proxy-persist runs; docs/ssh.md)
  gompi-proxy -help           this text
`

// writeMan writes gompi-proxy.1 into dir (gompi-proxy --gen-man DIR). Not
// through cobra as the other commands: see package roff.
func writeMan(dir string) int {
	page := roff.Render(roff.Page{Name: "gompi-proxy", Short: "gompi's per-host process manager agent",
		Source: "gompi " + buildinfo.Version(), Text: proxyHelp,
		Options: []roff.Item{
			{"-version", "print the build's version, commit, control protocol version and sha256"},
		},
		Env: []roff.Item{
			{launcher.HeartbeatEnv, "ping the launcher at this interval (a Go duration) and end the job on this host after about three unanswered intervals"},
			{"GOMPI_PROXY_DEBUG", "when set, log the proxy's steps to standard error"},
			{launcher.ConnectEnv, "host:port list to connect back to instead of using standard input and output (slurm launcher); an empty host means SLURM_LAUNCH_NODE_IPADDR"},
			{launcher.ConnectSecretEnv, "per-job secret proving the connection to gompiexec and back (slurm launcher)"},
		},
		Exit: []roff.Item{
			{"0", "the job on this host ended and was reported to gompiexec"},
			{"1", "the launcher was lost, the connect-back failed, or the proxy could not serve the job"},
			{"2", "an argument it does not know (gompiexec starts it without any)"},
		},
		SeeAlso: []string{"gompiexec(1)"},
	})
	if err := roff.Write(dir, "gompi-proxy", page); err != nil {
		fmt.Fprintln(os.Stderr, "gompi-proxy:", err)
		return 1
	}
	return 0
}
