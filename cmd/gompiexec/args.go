package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// options is the parsed command line.
type options struct {
	hostfile, hosts       string
	ppn                   int
	roundRobin            bool
	genv                  []string
	envMode               string // "all", "none", "list"
	envList               []string
	prepend               bool
	launcher, launcherExe string
	verbose               bool
	timeout               time.Duration
	grace                 time.Duration
	graceSet              bool // -grace 0 means at once, not the default
	printAll              bool
	pmiPort, pmiTrace     bool
	place                 placeOpts // -bind-to, -map-by, -membind, -iface (place.go)
	ckptPrefix            string
	ckptInterval          time.Duration
	ckptNum, ckptKeep     int
	ckptCache             string
	ckptPartner           bool
	ioCache               []string // -io-cache, absolute
	maxRestarts           int
	proxyPath             string
	fanout                int
	sshAcceptNew          bool
	noProxyUpload         bool
	sshConnectTimeout     time.Duration
	proxyPersist          time.Duration // -proxy-persist; -1 when not given
	help, version         bool
	segments              []segment
	hydraOpts             // session 27's Hydra options (hydraopts.go)
	hostOpts              // -rmk, -skip-launch-node, -order-nodes (hostopts.go)
	envOpts               // hostname propagation, -gpus-per-proc (envopts.go)
}

type segment struct {
	n      int // 0: not given
	nSet   bool
	env    []string
	wdir   string
	argv   []string
	segEnv // -envall, -envnone, -envlist (hydraopts.go)
}

// UsageError is a command-line mistake; main prints it with a hint.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

func usagef(format string, a ...any) error { return &UsageError{fmt.Sprintf(format, a...)} }

type optSpec struct {
	arity int // values taken
	local bool
	apply func(o *options, s *segment, v []string) error
}

func intArg(name, v string, min int) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < min {
		return 0, usagef("-%s %q: want an integer >= %d", name, v, min)
	}
	return n, nil
}

func durArg(name, v string) (time.Duration, error) {
	return parseDur("-"+name+" ", v)
}

// envDur reads a duration from environment variable name.
func envDur(name, v string) (time.Duration, error) {
	return parseDur(name+"=", v)
}

// parseDur reads seconds or a Go duration; label names where v came from
// ("-timeout " or "MPIEXEC_TIMEOUT=").
func parseDur(label, v string) (time.Duration, error) {
	if n, err := strconv.ParseFloat(v, 64); err == nil && n >= 0 {
		return time.Duration(n * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, usagef("%s%q: want seconds or a duration like 90s", label, v)
	}
	return d, nil
}

func envPair(name string, v []string) (string, error) {
	if len(v) == 1 {
		if !strings.Contains(v[0], "=") {
			return "", usagef("-%s %q: want NAME VALUE or NAME=VALUE", name, v[0])
		}
		return v[0], nil
	}
	if v[0] == "" || strings.Contains(v[0], "=") {
		return "", usagef("-%s: bad variable name %q", name, v[0])
	}
	return v[0] + "=" + v[1], nil
}

var specs = map[string]optSpec{}

func alias(spec optSpec, names ...string) {
	for _, n := range names {
		specs[n] = spec
	}
}

func init() {
	alias(optSpec{1, true, func(o *options, s *segment, v []string) error {
		if s.nSet {
			// Hydra refuses a duplicate too: which one was meant?
			return usagef("-n given twice for one program (%d, then %q)", s.n, v[0])
		}
		n, err := strconv.Atoi(v[0])
		if err != nil {
			return usagef("-n %q: not a number", v[0])
		}
		if n < 1 {
			return usagef("-n %q: need at least 1 process", v[0])
		}
		s.n, s.nSet = n, true
		return nil
	}}, "n", "np")
	// The host list and -ppn are the job's, once, as Hydra's: a second
	// one (say per MPMD segment, as Open MPI reads it) would otherwise
	// silently replace the first for every segment.
	for _, n := range []string{"f", "hostfile", "machinefile"} {
		alias(optSpec{1, false, func(o *options, _ *segment, v []string) error {
			o.hostfile = v[0]
			return o.once("-f or -hosts", n)
		}}, n)
	}
	for _, n := range []string{"hosts", "host", "hostlist", "machine", "machines", "machinelist"} {
		alias(optSpec{1, false, func(o *options, _ *segment, v []string) error {
			o.hosts = v[0]
			return o.once("-f or -hosts", n)
		}}, n)
	}
	alias(optSpec{1, false, func(o *options, _ *segment, v []string) (err error) {
		if o.ppn, err = intArg("ppn", v[0], 1); err != nil {
			return err
		}
		return o.once("ppn", "ppn")
	}}, "ppn")
	alias(optSpec{0, false, func(o *options, _ *segment, _ []string) error { o.roundRobin = true; return nil }}, "rr")
	alias(optSpec{2, false, func(o *options, _ *segment, v []string) error {
		kv, err := envPair("genv", v)
		o.genv = append(o.genv, kv)
		return err
	}}, "genv")
	// Hydra refuses a second environment mode, as -l twice (hydraopts.go).
	alias(optSpec{0, false, func(o *options, _ *segment, _ []string) error {
		o.envMode, o.envModeSet = "all", true
		return o.once("-genvall, -genvnone or -genvlist", "genvall")
	}}, "genvall")
	alias(optSpec{0, false, func(o *options, _ *segment, _ []string) error {
		o.envMode, o.envModeSet = "none", true
		return o.once("-genvall, -genvnone or -genvlist", "genvnone")
	}}, "genvnone")
	alias(optSpec{1, false, func(o *options, _ *segment, v []string) error {
		o.envMode, o.envList, o.envModeSet = "list", strings.Split(v[0], ","), true
		return o.once("-genvall, -genvnone or -genvlist", "genvlist")
	}}, "genvlist")
	alias(optSpec{2, true, func(o *options, s *segment, v []string) error {
		kv, err := envPair("env", v)
		s.env = append(s.env, kv)
		return err
	}}, "env")
	alias(optSpec{1, true, func(o *options, s *segment, v []string) error { s.wdir = v[0]; return nil }}, "wdir", "dir")
	alias(optSpec{0, false, func(o *options, _ *segment, _ []string) error {
		o.prepend, o.prependPat = true, nil
		return o.once("-l or -prepend-pattern", "l")
	}}, "l", "prepend-rank")
	alias(optSpec{1, false, func(o *options, _ *segment, v []string) error {
		switch v[0] {
		case "fork", "ssh", "rsh", "slurm":
		default:
			return usagef("-launcher %q: known launchers are fork, ssh, rsh, slurm", v[0])
		}
		o.launcher = v[0]
		return nil
	}}, "launcher", "bootstrap")
	alias(optSpec{1, false, func(o *options, _ *segment, v []string) error { o.launcherExe = v[0]; return nil }}, "launcher-exec", "bootstrap-exec")
	alias(optSpec{0, false, func(o *options, _ *segment, _ []string) error { o.verbose = true; return nil }}, "v", "verbose", "debug")
	alias(optSpec{1, false, func(o *options, _ *segment, v []string) (err error) { o.timeout, err = durArg("timeout", v[0]); return }}, "timeout")
	alias(optSpec{1, false, func(o *options, _ *segment, v []string) (err error) {
		o.grace, err = durArg("grace", v[0])
		o.graceSet = true
		return
	}}, "grace")
	alias(optSpec{0, false, func(o *options, _ *segment, _ []string) error { o.printAll = true; return nil }}, "print-all-exitcodes")
	alias(optSpec{0, false, func(o *options, _ *segment, _ []string) error { o.pmiPort = true; return nil }}, "pmi-port")
	alias(optSpec{0, false, func(o *options, _ *segment, _ []string) error { o.pmiTrace = true; return nil }}, "pmi-trace")
	alias(optSpec{1, false, func(o *options, _ *segment, v []string) error {
		// Every host replays it in its own file system: a relative name
		// would mean a different directory on each.
		if !filepath.IsAbs(v[0]) {
			return usagef("-io-cache %q: need an absolute directory", v[0])
		}
		o.ioCache = append(o.ioCache, filepath.Clean(v[0]))
		return nil
	}}, "io-cache")
	alias(optSpec{1, false, func(o *options, _ *segment, v []string) error { o.ckptPrefix = v[0]; return nil }}, "ckpoint-prefix")
	alias(optSpec{1, false, func(o *options, _ *segment, v []string) (err error) {
		o.ckptInterval, err = durArg("ckpoint-interval", v[0])
		return
	}}, "ckpoint-interval")
	alias(optSpec{1, false, func(o *options, _ *segment, v []string) (err error) {
		o.ckptNum, err = intArg("ckpoint-num", v[0], 1)
		return
	}}, "ckpoint-num")
	alias(optSpec{1, false, func(o *options, _ *segment, v []string) (err error) {
		o.ckptKeep, err = intArg("ckpoint-keep", v[0], 1)
		return
	}}, "ckpoint-keep")
	alias(optSpec{1, false, func(o *options, _ *segment, v []string) error { o.ckptCache = v[0]; return nil }}, "ckpoint-cache")
	alias(optSpec{0, false, func(o *options, _ *segment, _ []string) error { o.ckptPartner = true; return nil }}, "ckpoint-partner")
	alias(optSpec{1, false, func(o *options, _ *segment, v []string) (err error) {
		o.maxRestarts, err = intArg("max-restarts", v[0], 0)
		return
	}}, "max-restarts")
	alias(optSpec{1, false, func(o *options, _ *segment, v []string) error { o.proxyPath = v[0]; return nil }}, "proxy-path")
	alias(optSpec{1, false, func(o *options, _ *segment, v []string) (err error) {
		o.fanout, err = intArg("fanout", v[0], 1)
		return
	}}, "fanout", "tree-width")
	alias(optSpec{0, false, func(o *options, _ *segment, _ []string) error { o.sshAcceptNew = true; return nil }}, "ssh-accept-new")
	alias(optSpec{0, false, func(o *options, _ *segment, _ []string) error { o.noProxyUpload = true; return nil }}, "no-proxy-upload")
	alias(optSpec{1, false, func(o *options, _ *segment, v []string) (err error) {
		o.sshConnectTimeout, err = durArg("ssh-connect-timeout", v[0])
		if err == nil && o.sshConnectTimeout == 0 {
			err = usagef("-ssh-connect-timeout %q: must be more than 0", v[0])
		}
		return
	}}, "ssh-connect-timeout")
	alias(optSpec{1, false, func(o *options, _ *segment, v []string) (err error) {
		o.proxyPersist, err = durArg("proxy-persist", v[0])
		return
	}}, "proxy-persist")
	alias(optSpec{0, false, func(o *options, _ *segment, _ []string) error { o.help = true; return nil }}, "h", "help")
	alias(optSpec{0, false, func(o *options, _ *segment, _ []string) error { o.version = true; return nil }}, "version", "info")
}

// parseArgs reads Hydra-style arguments: options before each program, one
// or two leading dashes, `-opt=value` accepted, MPMD segments split by ":".
// The default config file's global options (HYDRA_CONFIG_FILE,
// ~/.mpiexec.hydra.conf, the system one) come first, so the command line's
// win; -configfile's lines are segments after the command line's options.
func parseArgs(args []string) (*options, error) {
	o := &options{envMode: "all", proxyPersist: -1}
	o.hydraOpts = newHydraOpts()
	p := &parser{o: o, seg: &segment{}}
	if err := p.defaults(defaultConfig(os.Getenv)); err != nil {
		return nil, err
	}
	if err := p.parse(args); err != nil {
		return nil, err
	}
	if o.hostfile == "" && o.hosts == "" {
		o.hostfile, o.hosts = p.defHostfile, p.defHosts
	}
	if o.configFile != "" {
		if err := p.configFile(); err != nil {
			return nil, err
		}
	} else if seg := p.seg; len(seg.argv) > 0 {
		o.segments = append(o.segments, *seg)
	} else if len(o.segments) > 0 || seg.nSet || len(seg.env) > 0 || seg.envMode != "" {
		return nil, usagef("no program given after the last options")
	}
	if err := hydraEnv(o, os.Getenv); err != nil {
		return nil, err
	}
	if err := hostEnv(o, os.Getenv); err != nil {
		return nil, err
	}
	if o.help || o.version {
		return o, nil
	}
	if len(o.segments) == 0 {
		return nil, usagef("no program given")
	}
	if o.hostfile != "" && o.hosts != "" {
		return nil, errors.New("give either -f or -hosts, not both")
	}
	if o.ckptPrefix == "" && (o.ckptInterval > 0 || o.ckptNum > 0 || o.ckptKeep > 0 || o.ckptCache != "" || o.ckptPartner) {
		return nil, usagef("-ckpoint-interval, -ckpoint-num, -ckpoint-keep, -ckpoint-cache and -ckpoint-partner need -ckpoint-prefix")
	}
	if o.ckptPartner && o.ckptCache == "" {
		return nil, usagef("-ckpoint-partner needs -ckpoint-cache (partner copies live in the node-local caches)")
	}
	return o, nil
}
