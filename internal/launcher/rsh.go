package launcher

import (
	"context"
	"errors"
	"strings"
)

// RSH starts proxies through an rsh-style agent: `Agent [Args...] HOST
// proxy-command...`. OpenSSH's ssh client and `kubectl exec` wrappers (as
// mpi-operator's kubexec.sh) satisfy this contract.
type RSH struct {
	// Agent is the agent command; Args go before the host.
	Agent string
	Args  []string
}

// Name implements Backend.
func (r RSH) Name() string { return "rsh" }

// Start implements Backend.
func (r RSH) Start(ctx context.Context, spec Spec) (Proc, error) {
	if r.Agent == "" || len(spec.Argv) == 0 {
		return nil, errors.New("rsh: agent and proxy command are required")
	}
	host := spec.Host
	if spec.User != "" {
		host = spec.User + "@" + host
	}
	argv := append(append([]string{r.Agent}, r.Args...), host)
	// The agent hands the command to a remote shell: pass environment as
	// env(1) assignments and quote every word.
	var words []string
	if len(spec.Env) > 0 {
		words = append(words, "env")
		for _, kv := range spec.Env {
			words = append(words, shellQuote(kv))
		}
	}
	for _, a := range spec.Argv {
		words = append(words, shellQuote(a))
	}
	argv = append(argv, words...)
	return startLocal(ctx, argv, Spec{Stderr: spec.Stderr})
}

// shellQuote quotes s for a POSIX shell unless it is plainly safe.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:@,+") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// OpenSSH is an RSH backend using the OpenSSH client in batch mode: it never
// prompts, and an unknown or changed host key is an error from ssh itself.
func OpenSSH() RSH {
	return RSH{Agent: "ssh", Args: []string{"-x", "-T", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
		"-o", "ServerAliveInterval=2", "-o", "ServerAliveCountMax=3"}}
}
