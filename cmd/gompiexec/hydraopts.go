package main

// Hydra's per-segment environment options, output routing, -configfile,
// -usize and the HYDRA_* environment equivalents. Kept apart from args.go
// so that option work there merges without touching these.

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gompi/gompi/internal/mpiexec"
)

type hydraOpts struct {
	outFile, errFile *mpiexec.Pattern // -outfile-pattern, -errfile-pattern
	prependPat       *mpiexec.Pattern // -prepend-pattern
	outputFrom       int              // -output-from; -1: every rank
	usize            int              // -usize: n, or mpiexec.UniverseInfinite/System
	configFile       string           // -configfile
	noAutoCleanup    bool             // -disable-auto-cleanup
	envModeSet       bool             // -genvall/-genvnone/-genvlist given (HYDRA_ENV yields)
	// seen holds the options Hydra allows once ("duplicate setting"); it
	// is reset after HYDRA_CONFIG_FILE, whose settings the command line
	// overrides.
	seen map[string]bool
}

func newHydraOpts() hydraOpts {
	return hydraOpts{outputFrom: -1, usize: mpiexec.UniverseInfinite, seen: map[string]bool{}}
}

// once refuses a second setting of an option (or of one of a group that
// set the same thing, like -l and -prepend-pattern), as Hydra does.
func (h *hydraOpts) once(group, name string) error {
	if h.seen[group] {
		return usagef("duplicate setting: -%s (%s is already set)", name, group)
	}
	h.seen[group] = true
	return nil
}

// segEnv is a segment's own choice of inherited environment.
type segEnv struct {
	envMode string // "" (the global one), "all", "none", "list"
	envList []string
}

func setSegEnv(s *segment, name, mode string, list []string) error {
	if s.envMode != "" {
		return usagef("duplicate environment setting for one program: -%s after -env%s", name, s.envMode)
	}
	s.envMode, s.envList = mode, list
	return nil
}

func patternArg(name, v string) (*mpiexec.Pattern, error) {
	if v == "" && name != "prepend-pattern" {
		return nil, usagef("-%s: empty file name", name)
	}
	p, err := mpiexec.ParsePattern(v)
	if err != nil {
		return nil, usagef("-%s: %v", name, err)
	}
	return p, nil
}

func init() {
	alias(optSpec{0, true, func(_ *options, s *segment, _ []string) error { return setSegEnv(s, "envall", "all", nil) }}, "envall")
	alias(optSpec{0, true, func(_ *options, s *segment, _ []string) error { return setSegEnv(s, "envnone", "none", nil) }}, "envnone")
	alias(optSpec{1, true, func(_ *options, s *segment, v []string) error {
		return setSegEnv(s, "envlist", "list", strings.Split(v[0], ","))
	}}, "envlist")
	alias(optSpec{1, false, func(o *options, _ *segment, v []string) (err error) {
		if err = o.once("outfile-pattern", "outfile-pattern"); err == nil {
			o.outFile, err = patternArg("outfile-pattern", v[0])
		}
		return
	}}, "outfile-pattern", "outfile")
	alias(optSpec{1, false, func(o *options, _ *segment, v []string) (err error) {
		if err = o.once("errfile-pattern", "errfile-pattern"); err == nil {
			o.errFile, err = patternArg("errfile-pattern", v[0])
		}
		return
	}}, "errfile-pattern", "errfile")
	alias(optSpec{1, false, func(o *options, _ *segment, v []string) (err error) {
		// -l is -prepend-pattern "[%r] " in Hydra: one or the other.
		if err = o.once("-l or -prepend-pattern", "prepend-pattern"); err == nil {
			o.prepend = false
			o.prependPat, err = patternArg("prepend-pattern", v[0])
		}
		return
	}}, "prepend-pattern")
	alias(optSpec{1, false, func(o *options, _ *segment, v []string) (err error) {
		if err = o.once("output-from", "output-from"); err == nil {
			o.outputFrom, err = intArg("output-from", v[0], 0)
		}
		return
	}}, "output-from")
	alias(optSpec{1, false, func(o *options, _ *segment, v []string) error {
		if err := o.once("usize", "usize"); err != nil {
			return err
		}
		switch v[0] {
		case "INFINITE":
			o.usize = mpiexec.UniverseInfinite
		case "SYSTEM":
			o.usize = mpiexec.UniverseSystem
		default:
			n, err := strconv.Atoi(v[0])
			if err != nil || n < 1 {
				return usagef("-usize %q: want SYSTEM, INFINITE or a number >= 1", v[0])
			}
			o.usize = n
		}
		return nil
	}}, "usize")
	alias(optSpec{0, false, func(o *options, _ *segment, _ []string) error {
		o.noAutoCleanup = true
		return o.once("auto-cleanup", "disable-auto-cleanup")
	}}, "disable-auto-cleanup", "dac")
	alias(optSpec{0, false, func(o *options, _ *segment, _ []string) error {
		o.noAutoCleanup = false
		return o.once("auto-cleanup", "enable-auto-cleanup")
	}}, "enable-auto-cleanup")
	alias(optSpec{1, false, func(o *options, _ *segment, v []string) error {
		if err := o.once("configfile", "configfile"); err != nil {
			return err
		}
		o.configFile = v[0]
		return nil
	}}, "configfile")
}

// parser reads options into o; seg is the segment being built.
type parser struct {
	o          *options
	seg        *segment
	globalOnly string // non-empty: where global options only are allowed (HYDRA_CONFIG_FILE)
	inConfig   bool   // reading -configfile
	// The default config file's host list, held aside: the command
	// line's -f or -hosts replaces either (Hydra ignores the file's then).
	defHostfile, defHosts string
}

// parse reads one command line (or one line of a config file).
func (p *parser) parse(args []string) error {
	o := p.o
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == ":" {
			if err := p.endSegment(); err != nil {
				return err
			}
			continue
		}
		if !strings.HasPrefix(a, "-") || a == "-" || len(p.seg.argv) > 0 {
			if p.globalOnly != "" {
				return usagef("program %q: %s holds global options only", a, p.globalOnly)
			}
			// The program and its arguments run up to the next ":".
			j := i
			for j < len(args) && args[j] != ":" {
				j++
			}
			p.seg.argv = append(p.seg.argv, args[i:j]...)
			i = j - 1
			continue
		}
		name := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		var inline []string
		if k, v, ok := strings.Cut(name, "="); ok {
			name, inline = k, []string{v}
		}
		spec, ok := specs[strings.ToLower(name)]
		if !ok {
			return usagef("unknown option %s", a)
		}
		if spec.local && p.globalOnly != "" {
			return usagef("option %s: %s holds global options only", a, p.globalOnly)
		}
		if (p.inConfig || p.globalOnly != "") && strings.EqualFold(name, "configfile") {
			return usagef("option %s: not inside a config file", a)
		}
		vals := inline
		need := spec.arity
		if need == 2 && len(inline) == 1 {
			need = 1 // -genv K=V
		}
		if need == 2 && i+1 < len(args) && strings.Contains(args[i+1], "=") && !strings.HasPrefix(args[i+1], "-") {
			need = 1
		}
		if len(inline) == 0 {
			if i+need > len(args)-1 {
				return usagef("option %s needs %d value(s)", a, need)
			}
			vals = args[i+1 : i+1+need]
			i += need
		} else if spec.arity == 0 {
			return usagef("option -%s takes no value", name)
		}
		if err := spec.apply(o, p.seg, vals); err != nil {
			return err
		}
	}
	return nil
}

func (p *parser) endSegment() error {
	if len(p.seg.argv) == 0 {
		return usagef("':' must follow a program (segment %d has none)", len(p.o.segments)+1)
	}
	p.o.segments = append(p.o.segments, *p.seg)
	p.seg = &segment{}
	return nil
}

// configLines reads a Hydra config file: one command line per line, split
// at blanks (no quoting, as Hydra), text from the first '#' on dropped.
func configLines(path string) (lines [][]string, nums []int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		if toks := strings.Fields(line); len(toks) > 0 {
			lines, nums = append(lines, toks), append(nums, n)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return lines, nums, nil
}

// configFile reads -configfile: each line is one MPMD segment (options
// and program), after the command line's global options.
func (p *parser) configFile() error {
	path := p.o.configFile
	if path == "" {
		return nil
	}
	if len(p.o.segments) > 0 || len(p.seg.argv) > 0 {
		return usagef("-configfile %s: give the programs there or on the command line, not both", path)
	}
	lines, nums, err := configLines(path)
	if err != nil {
		return usagef("-configfile: %v", err)
	}
	p.inConfig = true
	for i, toks := range lines {
		if err := p.parse(toks); err != nil {
			return usagef("%s:%d: %v", path, nums[i], err)
		}
		if len(p.seg.argv) > 0 {
			p.o.segments = append(p.o.segments, *p.seg)
			p.seg = &segment{}
		} else if p.seg.nSet || len(p.seg.env) > 0 || p.seg.envMode != "" || p.seg.wdir != "" {
			return usagef("%s:%d: no program after the options", path, nums[i])
		}
	}
	if len(p.o.segments) == 0 {
		return usagef("-configfile %s: no program in it", path)
	}
	return nil
}

// systemConfigFiles are where Hydra's own build looks for its system-wide
// defaults (<sysconfdir>/mpiexec.hydra.conf): /etc for a build with
// --sysconfdir=/etc, /usr/etc for Debian's (--prefix=/usr alone).
var systemConfigFiles = []string{"/etc/mpiexec.hydra.conf", "/usr/etc/mpiexec.hydra.conf"}

// defaultConfig is the file of default options Hydra reads, and how errors
// name it: the first that opens of $HYDRA_CONFIG_FILE,
// $HOME/.mpiexec.hydra.conf and the system file. As Hydra, a file that
// does not open is passed over silently, and only one file is read.
func defaultConfig(getenv func(string) string) (path, label string) {
	try := func(p string) bool {
		f, err := os.Open(p)
		if err != nil {
			return false
		}
		f.Close()
		return true
	}
	if p := getenv("HYDRA_CONFIG_FILE"); p != "" && try(p) {
		return p, "HYDRA_CONFIG_FILE " + p
	}
	if h := getenv("HOME"); h != "" {
		if p := filepath.Join(h, ".mpiexec.hydra.conf"); try(p) {
			return p, p
		}
	}
	for _, p := range systemConfigFiles {
		if try(p) {
			return p, p
		}
	}
	return "", ""
}

// defaults reads the default config file's global options (Hydra reads
// them after the command line and lets the command line win; reading them
// first gives the same result here).
func (p *parser) defaults(path, label string) error {
	if path == "" {
		return nil
	}
	lines, nums, err := configLines(path)
	if err != nil {
		return usagef("%s: %v", label, err)
	}
	p.globalOnly = "the default config file"
	for i, toks := range lines {
		if err := p.parse(toks); err != nil {
			return usagef("%s:%d: %v", label, nums[i], err)
		}
	}
	p.globalOnly = ""
	p.defHostfile, p.defHosts = p.o.hostfile, p.o.hosts
	p.o.hostfile, p.o.hosts = "", ""
	p.o.seen = map[string]bool{}
	p.o.envModeSet = false
	return nil
}

// hydraEnv applies the HYDRA_* variables Hydra reads in place of options
// the command line did not give.
func hydraEnv(o *options, getenv func(string) string) error {
	if o.launcher == "" {
		for _, k := range []string{"HYDRA_LAUNCHER", "HYDRA_BOOTSTRAP"} {
			if v := getenv(k); v != "" {
				if err := specs["launcher"].apply(o, nil, []string{v}); err != nil {
					return usagef("%s=%s: %v", k, v, err)
				}
				break
			}
		}
	}
	if o.launcherExe == "" {
		for _, k := range []string{"HYDRA_LAUNCHER_EXEC", "HYDRA_BOOTSTRAP_EXEC"} {
			if v := getenv(k); v != "" {
				o.launcherExe = v
				break
			}
		}
	}
	if !o.verbose {
		o.verbose = envBool(getenv("HYDRA_DEBUG"))
	}
	if v := getenv("HYDRA_ENV"); v != "" && !o.envModeSet {
		// Hydra: "all" passes everything, any other value nothing.
		o.envMode, o.envList = "none", nil
		if v == "all" {
			o.envMode = "all"
		}
	}
	return nil
}

// envBool reads a yes/no variable as MPL_env2bool does.
func envBool(v string) bool {
	switch strings.ToLower(v) {
	case "1", "yes", "true", "on", "y", "t":
		return true
	}
	return false
}

// segmentEnv sets, when some segment chose its own inherited environment,
// every segment's inherited variables and leaves only the -genv pairs in
// cfg.Env; otherwise it leaves cfg as the global options made it.
func segmentEnv(o *options, cfg *mpiexec.Config, environ []string, lookup func(string) (string, bool)) {
	own := false
	for _, s := range o.segments {
		own = own || s.envMode != ""
	}
	if !own {
		return
	}
	inherit := func(mode string, list []string) (bool, []string) {
		switch mode {
		case "none":
			return true, nil
		case "list":
			var kvs []string
			for _, k := range list {
				if v, ok := lookup(k); ok {
					kvs = append(kvs, k+"="+v)
				}
			}
			return true, kvs
		}
		return false, environ
	}
	for i, s := range o.segments {
		mode, list := s.envMode, s.envList
		if mode == "" {
			mode, list = o.envMode, o.envList
		}
		seg := &cfg.Segments[i]
		seg.EnvSet = true
		seg.EnvNone, seg.Inherit = inherit(mode, list)
	}
	cfg.Env, cfg.EnvNone = append([]string(nil), o.genv...), false
}

// notInherited is what Hydra never passes on from its own environment,
// whatever -genvall or -genvlist say (-genv still can). Its ssh and rsh
// launchers drop DISPLAY, since this host's display means nothing on
// another and a login's own (ssh -X) must stay; a forked proxy has it in
// its own environment, which ranks start from. Its slurm launcher drops
// instead the variables that describe a step and its task (Hydra 4's
// list): the proxy's own, from its srun step, stay, so a rank sees
// SLURM_PROCID, SLURM_NODEID, SLURM_TASKS_PER_NODE, ... of the proxies'
// step, not gompiexec's (the batch script's).
var notInherited = map[string]bool{"DISPLAY": true}

var slurmNotInherited = func() map[string]bool {
	m := map[string]bool{}
	for _, k := range []string{"SLURM_ACCOUNT", "SLURM_CPU_BIND", "SLURM_CPUS_PER_TASK", "SLURM_CONN_TYPE",
		"SLURM_CORE_FORMAT", "SLURM_DEBUG", "SLURMD_DEBUG", "SLURM_DISABLE_STATUS", "SLURM_DISTRIBUTION",
		"SLURM_GEOMETRY", "SLURM_LABELIO", "SLURM_MEM_BIND", "SLURM_NETWORK", "SLURM_NNODES", "SLURM_NO_ROTATE",
		"SLURM_NPROCS", "SLURM_OVERCOMMIT", "SLURM_PARTITION", "SLURM_REMOTE_CWD", "SLURM_SRUN_COMM_IFHN",
		"SLURM_STDERRMODE", "SLURM_STDINMODE", "SLURM_STDOUTMODE", "SLURM_TASK_EPILOG", "SLURM_TASK_PROLOG",
		"SLURM_TIMELIMIT", "SLURM_WAIT", "SLURM_CPU_BIND_VERBOSE", "SLURM_CPU_BIND_TYPE", "SLURM_CPU_BIND_LIST",
		"SLURM_CPUS_ON_NODE", "SLURM_JOBID", "SLURM_LAUNCH_NODE_IPADDR", "SLURM_LOCALID", "SLURM_MEM_BIND_VERBOSE",
		"SLURM_MEM_BIND_TYPE", "SLURM_MEM_BIND_LIST", "SLURM_NODEID", "SLURM_NODELIST", "SLURM_PROCID",
		"SLURM_TASKS_PER_NODE", "MAX_TASKS_PER_NODE", "SLURM_HOSTFILE"} {
		m[k] = true
	}
	return m
}()

// excluded is what this job's launcher does not pass on.
func excluded(o *options) map[string]bool {
	if useSlurm(o) {
		return slurmNotInherited
	}
	return notInherited
}

// inheritable is environ without what o's launcher does not pass on.
func inheritable(o *options, environ []string) []string {
	skip := excluded(o)
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		if k, _, _ := strings.Cut(kv, "="); !skip[k] {
			out = append(out, kv)
		}
	}
	return out
}

// lookupInheritable is os.LookupEnv for what ranks may inherit under o's
// launcher.
func lookupInheritable(o *options) func(k string) (string, bool) {
	skip := excluded(o)
	return func(k string) (string, bool) {
		if skip[k] {
			return "", false
		}
		return os.LookupEnv(k)
	}
}

// hydraConfig carries this file's options into cfg (after buildConfig has
// set the segments, hosts and global environment).
func hydraConfig(o *options, cfg *mpiexec.Config) error {
	segmentEnv(o, cfg, inheritable(o, os.Environ()), lookupInheritable(o))
	cfg.Output = mpiexec.OutputConfig{OutFile: o.outFile, ErrFile: o.errFile, Prepend: o.prependPat}
	if o.outputFrom >= 0 {
		size := 0
		for _, s := range cfg.Segments {
			size += s.N
		}
		if o.outputFrom >= size {
			// Hydra shows nothing then; that is never what was meant.
			return usagef("-output-from %d: the job has ranks 0-%d", o.outputFrom, size-1)
		}
		cfg.Output.From, cfg.Output.FromSet = o.outputFrom, true
	}
	cfg.Universe = o.usize
	return nil
}
