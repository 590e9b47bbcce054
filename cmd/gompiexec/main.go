// Command gompiexec runs MPI jobs: gompiexec -n 4 ./app.
package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gompi/gompi/hostfile"
	"github.com/gompi/gompi/internal/buildinfo"
	"github.com/gompi/gompi/internal/launcher"
	"github.com/gompi/gompi/internal/manpage/roff"
	"github.com/gompi/gompi/internal/mpiexec"
	"github.com/spf13/cobra"
)

const helpText = `gompiexec runs an MPI job: it places ranks on hosts, starts one gompi-proxy
per host, forwards stdio and signals, and tears the job down when a rank fails.

Usage:
  gompiexec [global options] [local options] program [args] [: [local options] program [args]]...

Examples:
  gompiexec -n 4 ./app                      4 ranks on this machine
  gompiexec -l -n 4 ./app                   prefix output lines with [rank]
  gompiexec -f hosts -n 64 ./app            hosts: "node:4" or "node slots=4" per line
  gompiexec -hosts a,b:2 -ppn 2 -n 8 ./app
  gompiexec -n 1 ./server : -n 3 ./client   MPMD, appnum 0 and 1
  gompiexec -genv OMP_NUM_THREADS 2 -timeout 600 -n 8 ./app
  gompiexec -bind-to core -n 4 ./app        one core per rank (all its hwthreads)
  gompiexec -bind-to core -map-by socket -n 4 ./app   consecutive ranks on alternate sockets

Options take one or two leading dashes; -opt=value also works.

Local options (per program segment):
  -n, -np N                 number of processes (default: all slots)
  -env NAME VALUE           set a variable for this segment's ranks
  -wdir DIR                 working directory
  -envall, -envnone, -envlist A,B
                            this segment's ranks inherit all, none or only these of
                            gompiexec's variables, whatever -genvall/-genvnone/-genvlist say

Output, config file and universe (Hydra's):
  -outfile-pattern, -outfile P   write each rank's stdout to the file P names on this
                            host, opened at its first output, created 0600, not
                            truncated (as Hydra); ranks whose names agree share one
  -errfile-pattern, -errfile P   the same for stderr
  -prepend-pattern P        prefix every output line with P (-l is "[%r] ")
                            Patterns: %r rank, %g process group (0), %p proxy (host index),
                            %h host, %t seconds since the start, %% a percent sign
  -output-from R            show (or write) only rank R's output
  -configfile F             MPMD segments from F, one command line per line: options and
                            program split at blanks (no quoting), # starts a comment
  -usize SYSTEM|INFINITE|N  what MPI_UNIVERSE_SIZE says: slots of the hosts used, unset (default), N

Global options:
  -f, -hostfile, -machinefile FILE   host file (MPICH "host:N" or Open MPI "host slots=N")
  -hosts LIST               comma-separated hosts, "host:N" for N slots
  -ppn N                    processes per host (overrides slot counts)
  -rr                       place ranks round-robin over hosts
  -rmk user|slurm|lsf|sge|pbs|cobalt|ll  read this resource manager's allocation
                            (default: the first one present; user: none)
  -skip-launch-node         place no ranks on this machine (by name or address)
  -order-nodes ASCENDING|DESCENDING  hosts in order of their slot counts
  -genv NAME VALUE          set a variable for all ranks
  -genvall                  pass gompiexec's whole environment (default)
  -genvnone                 pass none of it (ranks get PATH, HOME, USER, ... only)
  -genvlist A,B             pass only these variables
  -l, -prepend-rank         prefix every output line with [rank]
  -launcher fork|ssh|rsh|slurm  how proxies are started (default: slurm inside a
                            Slurm allocation; else fork for this host, the built-in
                            SSH client for other hosts); also -bootstrap
  -launcher-exec PATH       rsh-style agent: runs "PATH host command..." (-launcher-exec ssh
                            uses OpenSSH's client in batch mode instead of the built-in one)
  -proxy-path PATH          gompi-proxy on every host (default: next to gompiexec)
  -fanout N                 proxies started by gompiexec and by each proxy; more hosts
                            are started through a tree of proxies (default 32)
  -ssh-accept-new           record unknown SSH host keys in ~/.ssh/known_hosts and go on
                            (changed keys are always refused)
  -ssh-connect-timeout SECONDS  per-host SSH connect and login budget (default 10)
  -no-proxy-upload          never copy gompi-proxy to hosts that lack it or have another
                            build (by default it is cached in ~/.cache/gompi there)
  -proxy-persist SECONDS    keep a persistent proxy on each SSH host, gone after this
                            long without jobs: later launches need no login shell there
                            (also GOMPI_PROXY_PERSIST; default 0, off)
  -timeout SECONDS          kill the job after this long (also MPIEXEC_TIMEOUT); exit code 124
  -grace SECONDS            time between SIGTERM and SIGKILL when tearing down (default 3;
                            0: SIGKILL at once)
  -print-all-exitcodes      print every rank's exit status
  -disable-auto-cleanup, -dac  a failed rank does not end the job: the others go on
                            (PMI_dead_processes lists it; Go ranks get *PeerError);
                            an abort still does; exit status as below. Undone by
                            -enable-auto-cleanup
  -bind-to TYPE[:N]         bind each host's ranks round-robin to the host's objects of
                            TYPE, N of them per rank, among the CPUs the proxy may use:
                            hwthread, core, l1cache, l2cache, l3cache, socket, numa or
                            machine (default none); also -binding, HYDRA_BINDING; a host
                            file's "binding=TYPE" replaces it on that host
  -bind-to user:CPUS,...    local rank i gets the i-th list (CPUs joined by +, e.g.
                            user:0+2,1+3); ranks beyond the lists are not bound
  -bind-to rr               one hardware thread per rank, in CPU number order
  -bind-to DEVICE[:N]       the CPUs near a device, one device per rank in turn:
                            pci:BUSID, gpu[N], ib[N], hfi, en or eth[NAME]
  -map-by TYPE[:N]          the objects (groups of N) local ranks go to in turn, each
                            bound inside the one it goes to (default: -bind-to's own;
                            no effect without -bind-to, as in Hydra); also HYDRA_MAPPING
  -membind POLICY           each rank's memory policy: firsttouch (local node), bind:NODES
                            or interleave:NODES (e.g. bind:0-1; no NODES: those of the
                            rank's CPUs); nexttouch is accepted and does nothing (Linux
                            has no such policy, as under Hydra); also HYDRA_MEMBIND
  -iface IF                 ranks advertise IF's address on their host (IPv4, else global
                            IPv6) as GOMPI_HOST, MPICH ranks get
                            MPIR_CVAR_NEMESIS_TCP_NETWORK_IFACE=IF, and Slurm-launched
                            proxies connect back over it; also HYDRA_IFACE
  -nameserver HOST[:PORT]   ranks publish and look up names (MPI_Publish_name,
                            MPI_Lookup_name) at this name server, shared with other jobs:
                            gompi-nameserver or MPICH's hydra_nameserver (port 6392)
  -localhost NAME           Slurm-launched proxies connect back to NAME (this host's name
                            or address as the nodes reach it) and no other address
  -disable-hostname-propagation, -enable-hostname-propagation
                            whether MPICH ranks get MPIR_CVAR_CH3_INTERFACE_HOSTNAME, their
                            host's name as the host list gives it (default: on, off with
                            -iface; also HYDRA_HOSTNAME_PROPAGATION=yes|no)
  -gpus-per-proc N|AUTO, -g local rank i gets CUDA_VISIBLE_DEVICES=i*N,...,i*N+N-1 (-1
                            for 0), as Hydra numbers them; AUTO (default) sets nothing
  -pmi-port                 serve PMI over TCP (PMI_PORT/PMI_ID) instead of PMI_FD
  -pmi-trace                print every PMI exchange to stderr (also GOMPI_PMI_TRACE=1)
  -profile                  after the job, print how many PMI requests reached gompiexec
                            (fences, name service, aborts; one per host each), as Hydra
  -io-cache DIR             before starting the job, replay on every host the unflushed
                            extents left in DIR, a node-local MPI-IO cache directory
                            (runtime/mpiio's gompi_cache_dir hint) by ranks that died
                            (absolute; may be repeated; docs/io.md)
  -ckpoint-prefix DIR       checkpoint directory (shared by all hosts) for ranks using
                            package ckpt; SIGUSR1 then requests a checkpoint instead of
                            reaching the ranks as a signal (docs/ckpt.md)
  -ckpoint-interval SECONDS checkpoint when this long has passed since the last one
  -ckpoint-num N            restart from epoch N (default: the newest intact one)
  -ckpoint-keep K           keep the newest K committed epochs (default 2)
  -ckpoint-cache DIR        node-local cache: checkpoints are written there first and
                            flushed to the prefix in the background
  -ckpoint-partner          with -ckpoint-cache: also copy each rank's checkpoint to a
                            rank on another host, so losing one host loses no epoch
  -max-restarts N           relaunch a job whose rank or host failed, up to N times,
                            from the newest checkpoint (or from the beginning without
                            one), on the hosts that are left
  -v, -verbose              log launch steps to stderr
  -h, -help                 this help;  -version  print the version

Environment: HYDRA_HOST_FILE (as -f), MPIEXEC_TIMEOUT (as -timeout), GOMPI_PROXY
(as -proxy-path), GOMPI_PROXY_PERSIST (as -proxy-persist), HYDRA_BINDING,
HYDRA_MAPPING, HYDRA_MEMBIND, HYDRA_IFACE (as -bind-to, -map-by, -membind, -iface).
Without -f/-hosts, a Slurm, LoadLeveler, LSF, Grid Engine, PBS or Cobalt allocation
(SLURM_JOB_NODELIST, LOADL_HOSTFILE, LSB_MCPU_HOSTS, PE_HOSTFILE, PBS_NODEFILE,
COBALT_NODEFILE) is used when present, else this machine with one slot per CPU.

Exit status: 0 when every rank exits 0; else the first failing rank's exit code, or
128+signal when it was killed by a signal; 124 on timeout; 127 when a rank broke the
PMI protocol; 255 on launcher errors.

More of Hydra's variables: HYDRA_LAUNCHER or HYDRA_BOOTSTRAP (as -launcher),
HYDRA_LAUNCHER_EXEC or HYDRA_BOOTSTRAP_EXEC (as -launcher-exec), HYDRA_DEBUG=1 (as
-verbose), HYDRA_ENV (all: as -genvall, else -genvnone), HYDRA_RMK (as -rmk),
HYDRA_CKPOINT_PREFIX and HYDRA_CKPOINT_INT (as -ckpoint-prefix, -ckpoint-interval)
apply when the option is not given; HYDRA_LAUNCHER_EXTRA_ARGS are words an rsh agent
(-launcher-exec) gets before the host; HYDRA_LAUNCHER_AUTOFORK=0 starts this
machine's proxy through the launcher too. MPIEXEC_PORT_RANGE=MIN:MAX (or another of MPICH's
port-range names) confines the ports the slurm launcher's proxies connect back to and
Go ranks listen on, for firewalls. Accepted for Hydra's sake, choosing nothing here:
-demux poll|select, -topolib hwloc, -disable-x (X11 is never forwarded). Default global
options (config-file syntax), which the command line overrides, come from the first file
that opens of HYDRA_CONFIG_FILE, ~/.mpiexec.hydra.conf, /etc/mpiexec.hydra.conf and
/usr/etc/mpiexec.hydra.conf.

Shell completion: gompiexec completion bash|zsh|fish (only as the first argument: a
program called completion or help runs as any other, e.g. gompiexec -n 2 completion)
Checkpoints: gompiexec ckpt list|verify|rm [-keep K] [-all] PREFIX [EPOCH...]
`

func main() {
	if len(os.Args) == 3 && os.Args[1] == roff.GenFlag {
		os.Exit(writeMan(os.Args[2]))
	}
	os.Exit(run(os.Args[1:]))
}

func newRoot(code *int) *cobra.Command {
	root := &cobra.Command{
		Use:                "gompiexec [options] program [args] [: ...]",
		Short:              "Run an MPI job",
		Long:               helpText,
		Version:            buildinfo.Version(),
		DisableFlagParsing: true, // Hydra's grammar (-genv K V, ':' segments) is not pflag's
		SilenceUsage:       true,
		SilenceErrors:      true,
		Args:               cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := dispatch(args)
			*code = c
			return err
		},
	}
	root.SetHelpTemplate("{{.Long}}")
	return root
}

// cobraCommand reports whether args name one of cobra's commands:
// "completion" (and the hidden "__complete" its scripts call back) only as
// the first argument. Anywhere else, as in "gompiexec -n 2 completion",
// it is a program to run, as under Hydra; cobra would find it after any
// options, so job command lines never go through cobra.
func cobraCommand(args []string) bool {
	return len(args) > 0 && (args[0] == "completion" ||
		args[0] == cobra.ShellCompRequestCmd || args[0] == cobra.ShellCompNoDescRequestCmd)
}

// dispatch runs "gompiexec ckpt ..." or a job.
func dispatch(args []string) (int, error) {
	if len(args) > 0 && args[0] == "ckpt" {
		return ckptCommand(os.Stdout, args[1:])
	}
	return runJob(args)
}

func run(args []string) int {
	code := 0
	var err error
	if cobraCommand(args) {
		root := newRoot(&code)
		root.SetArgs(args)
		err = root.Execute()
	} else {
		code, err = dispatch(args)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "gompiexec: %v\n", err)
		var ue *UsageError
		if errors.As(err, &ue) {
			fmt.Fprintln(os.Stderr, "Run 'gompiexec --help' for usage.")
		}
		if code == 0 {
			code = mpiexec.ExitInternal
		}
	}
	return code
}

func runJob(args []string) (int, error) {
	launcher.WarmProcStart()
	o, err := parseArgs(args)
	if err != nil {
		return 0, err
	}
	if o.help {
		os.Stdout.WriteString(helpText)
		return 0, nil
	}
	if o.version {
		fmt.Println(buildinfo.String("gompiexec"))
		return 0, nil
	}
	cfg, err := buildConfig(o)
	if err != nil {
		return 0, err
	}
	ctx := context.Background()
	sigs := make(chan os.Signal, 8)
	// SIGQUIT (Ctrl-\) is forwarded as Hydra does, not Go's stack dump.
	// A signal ignored when gompiexec started stays ignored: nohup's
	// SIGHUP, or SIGINT and SIGQUIT of a shell script's background job,
	// are meant to leave the job running (Go's Notify would catch them).
	for _, sig := range []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2} {
		if !signal.Ignored(sig) {
			signal.Notify(sigs, sig)
		}
	}
	cfg.Signals = sigs
	defer closeSlurm()
	return mpiexec.Run(ctx, *cfg)
}

func buildConfig(o *options) (*mpiexec.Config, error) {
	cfg := &mpiexec.Config{
		PrependRank:       o.prepend,
		Grace:             o.grace,
		Fanout:            o.fanout,
		PrintAllExitCodes: o.printAll,
		NoAutoCleanup:     o.noAutoCleanup,
		PMIPort:           o.pmiPort,
		PMITrace:          o.pmiTrace || os.Getenv("GOMPI_PMI_TRACE") != "",
		IOCacheDirs:       o.ioCache,
		Stdin:             jobStdin(),
		Stdout:            os.Stdout,
		Stderr:            os.Stderr,
	}
	level := slog.LevelWarn
	if o.verbose {
		level = slog.LevelDebug
	}
	cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	hosts, err := resolveHosts(o)
	if err == nil {
		hosts, err = arrangeHosts(o, hosts)
	}
	if err != nil {
		return nil, err
	}
	cfg.Hosts = hosts
	if err := placeDefaults(&o.place, os.Getenv, hosts); err != nil {
		return nil, err
	}
	cfg.BindTo, cfg.MapBy, cfg.Membind, cfg.Iface = o.place.bindTo, o.place.mapBy, o.place.membind, o.place.iface
	if cfg.HostnameProp, err = hostnamePropagation(o, os.Getenv); err != nil {
		return nil, err
	}
	cfg.GPUsPerProc = o.gpusPerProc
	cfg.Nameserver = o.nameserver
	cfg.Profile = o.profile
	cfg.Place = hostfile.Options{PPN: o.ppn}
	if o.roundRobin {
		cfg.Place.Policy = hostfile.RoundRobin
	}

	cwd, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	remote := hasRemoteHosts(o, hosts)
	for i, s := range o.segments {
		wdir := cwd
		if s.wdir != "" {
			wdir = s.wdir
			if !filepath.IsAbs(wdir) {
				wdir = filepath.Join(cwd, wdir)
			}
			if st, err := os.Stat(wdir); (err != nil || !st.IsDir()) && !remote {
				return nil, usagef("-wdir %s: not a directory", s.wdir)
			}
		}
		prog, err := checkProgram(s.argv[0], wdir)
		if err != nil && remote {
			// Hydra resolves the program on each node: one that is not
			// here may be there. Each proxy looks for it (its PATH, the
			// rank's working directory) and names rank and host if not.
			cfg.Log.Debug("program not on this host; each host's proxy looks for it", "program", s.argv[0], "why", err)
			prog, err = "", nil
		}
		if err != nil {
			return nil, err
		}
		n := s.n
		if !s.nSet {
			if len(o.segments) > 1 {
				return nil, usagef("segment %d (%s): give -n for each MPMD segment", i+1, s.argv[0])
			}
			for _, h := range hosts {
				n += h.Slots
			}
			if o.ppn > 0 {
				n = o.ppn * len(hosts)
			}
		}
		cfg.Segments = append(cfg.Segments, mpiexec.Segment{Argv: s.argv, Path: prog, N: n, Env: s.env, Wdir: wdir})
	}

	switch o.envMode {
	case "all":
		cfg.Env = inheritable(o, os.Environ())
	case "none":
		cfg.EnvNone = true
	case "list":
		cfg.EnvNone = true
		for _, k := range o.envList {
			if v, ok := lookupInheritable(o)(k); ok {
				cfg.Env = append(cfg.Env, k+"="+v)
			}
		}
	}
	cfg.Env = append(cfg.Env, o.genv...)
	if err := hydraConfig(o, cfg); err != nil {
		return nil, err
	}

	cfg.Timeout = o.timeout
	if cfg.Timeout == 0 {
		if v := os.Getenv("MPIEXEC_TIMEOUT"); v != "" {
			if cfg.Timeout, err = envDur("MPIEXEC_TIMEOUT", v); err != nil {
				return nil, err
			}
		}
	}
	if !o.graceSet {
		cfg.Grace = 3 * time.Second
	} else if o.grace == 0 {
		cfg.Grace = -1 // at once (Config's zero is the default)
	}

	if err := checkpointConfig(o, cfg); err != nil {
		return nil, err
	}

	cfg.ProxyPath, err = proxyPath(o.proxyPath)
	if err != nil {
		return nil, err
	}
	cfg.Backend, err = backendFor(o, cfg.ProxyPath, cfg.Log)
	if err != nil {
		return nil, err
	}
	return cfg, nil
}

func resolveHosts(o *options) ([]hostfile.Host, error) {
	file, label := o.hostfile, ""
	if file == "" && o.hosts == "" {
		file, label = os.Getenv("HYDRA_HOST_FILE"), "HYDRA_HOST_FILE: "
	}
	switch {
	case file == useLocalhost:
		return localhostOne(), nil
	case file != "":
		hosts, err := hostfile.ParseFile(file)
		if err != nil && label != "" {
			// The user may not know it is set.
			err = fmt.Errorf("%s%w", label, err)
		}
		return hosts, err
	case o.hosts != "":
		return hostfile.ParseList(o.hosts)
	}
	hosts, _, err := hostfile.FromRMK(o.rmk, os.Getenv)
	if err != nil || hosts != nil {
		return hosts, err
	}
	return hostfile.Localhost(), nil
}

// checkProgram refuses a missing or non-executable program before anything
// starts. Paths with a slash are resolved against the rank's working
// directory, bare names through PATH.
func checkProgram(prog, wdir string) (string, error) {
	if !strings.Contains(prog, "/") {
		p, err := exec.LookPath(prog)
		if err != nil {
			return "", usagef("program %q not found in PATH", prog)
		}
		return p, nil
	}
	p := prog
	if !filepath.IsAbs(p) {
		p = filepath.Join(wdir, p)
	}
	st, err := os.Stat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", usagef("program %s not found (looked for %s)", prog, p)
	case err != nil:
		return "", usagef("program %s: %v", prog, err)
	case st.IsDir():
		return "", usagef("program %s is a directory", prog)
	case st.Mode().Perm()&0o111 == 0:
		return "", usagef("program %s is not executable (chmod +x %s)", prog, p)
	}
	return p, nil
}

func proxyPath(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	if p := os.Getenv("GOMPI_PROXY"); p != "" {
		return p, nil
	}
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	p := filepath.Join(filepath.Dir(self), "gompi-proxy")
	if _, err := os.Stat(p); err != nil {
		if lp, lerr := exec.LookPath("gompi-proxy"); lerr == nil {
			return lp, nil
		}
		return "", fmt.Errorf("gompi-proxy not found next to %s or in PATH (set -proxy-path)", self)
	}
	return p, nil
}

// backendFor chooses how each host's proxy is started: fork for this
// machine (and for every host under -launcher fork), otherwise the rsh
// agent from -launcher-exec, or the built-in SSH client.
func backendFor(o *options, proxy string, log *slog.Logger) (func(hostfile.Host) launcher.Backend, error) {
	var remote func() launcher.Backend
	if useSlurm(o) {
		return slurmBackend(log, o.place.iface, o.localhost)
	}
	switch {
	case o.launcher == "fork":
		return func(hostfile.Host) launcher.Backend { return launcher.Fork{} }, nil
	case o.launcherExe != "":
		if _, err := exec.LookPath(o.launcherExe); err != nil {
			return nil, usagef("-launcher-exec %s: not found or not executable", o.launcherExe)
		}
		agent := launcher.RSH{Agent: o.launcherExe}
		if filepath.Base(o.launcherExe) == "ssh" {
			// OpenSSH's client: batch mode, so it never prompts.
			agent = launcher.OpenSSH()
			agent.Agent = o.launcherExe
		}
		// Hydra's: words the agent gets before the host (-p 2222, -o ...).
		agent.Args = append(agent.Args, strings.Fields(os.Getenv("HYDRA_LAUNCHER_EXTRA_ARGS"))...)
		remote = func() launcher.Backend { return agent }
	case o.launcher == "rsh":
		return nil, usagef("-launcher rsh needs -launcher-exec AGENT (for example ssh or a kubectl exec wrapper)")
	default:
		persist := o.proxyPersist
		if persist < 0 {
			persist = 0
			if v := os.Getenv("GOMPI_PROXY_PERSIST"); v != "" {
				d, err := envDur("GOMPI_PROXY_PERSIST", v)
				if err != nil {
					return nil, err
				}
				persist = d
			}
		}
		cfg := launcher.SSHConfig{
			Persist:        persist,
			AcceptNew:      o.sshAcceptNew,
			NoProxyUpload:  o.noProxyUpload,
			ConnectTimeout: o.sshConnectTimeout,
			LocalProxy:     proxy,
			Log:            log,
		}
		if o.proxyPath != "" {
			// -proxy-path names the remote path; what we can upload is
			// the proxy installed with gompiexec, if any.
			cfg.LocalProxy, _ = proxyPath("")
		}
		// Built on first use: a broken ~/.ssh/config must not stop a
		// job that only runs on this machine.
		var once sync.Once
		var be launcher.Backend
		remote = func() launcher.Backend {
			once.Do(func() {
				if v := os.Getenv("HYDRA_LAUNCHER_EXTRA_ARGS"); strings.TrimSpace(v) != "" {
					be = failedBackend{"ssh", fmt.Errorf("HYDRA_LAUNCHER_EXTRA_ARGS=%q: gompiexec's built-in SSH client takes no ssh arguments; put them in ~/.ssh/config (Port, User, IdentityFile), or pass them to OpenSSH's client with -launcher-exec ssh", v)}
					return
				}
				b, err := launcher.NewSSH(cfg)
				if err != nil {
					be = failedBackend{"ssh", err}
					return
				}
				be = b
			})
			return be
		}
	}
	local := localNames()
	// HYDRA_LAUNCHER_AUTOFORK=0: this machine too is reached through the
	// launcher, as any other host.
	autofork := os.Getenv("HYDRA_LAUNCHER_AUTOFORK") == "" || envBool(os.Getenv("HYDRA_LAUNCHER_AUTOFORK"))
	return func(h hostfile.Host) launcher.Backend {
		if local[h.Name] && o.launcherExe == "" && autofork {
			return launcher.Fork{}
		}
		return remote()
	}, nil
}

// failedBackend reports, for every host it is asked to start, why the
// backend could not be set up.
type failedBackend struct {
	name string
	err  error
}

func (f failedBackend) Name() string { return f.name }

func (f failedBackend) Start(context.Context, launcher.Spec) (launcher.Proc, error) {
	return nil, f.err
}

// hasRemoteHosts reports whether some proxy of the job may run on another
// machine: there, a program or working directory missing here may exist.
func hasRemoteHosts(o *options, hosts []hostfile.Host) bool {
	switch {
	case useSlurm(o), o.launcherExe != "":
		return true
	case o.launcher == "fork":
		return false
	}
	local := localNames()
	for _, h := range hosts {
		if !local[h.Name] {
			return true
		}
	}
	return false
}

// localNames are host names that mean this machine.
func localNames() map[string]bool {
	m := map[string]bool{"localhost": true, "127.0.0.1": true, "::1": true}
	if h, err := os.Hostname(); err == nil {
		m[h] = true
		short, _, _ := strings.Cut(h, ".")
		m[short] = true
	}
	return m
}
