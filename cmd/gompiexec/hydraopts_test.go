package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gompi/gompi/internal/mpiexec"
)

func TestParseHydraOptions(t *testing.T) {
	t.Setenv("HYDRA_CONFIG_FILE", "")
	tests := []struct {
		args  []string
		check func(o *options) bool
	}{
		{[]string{"-n", "1", "-envnone", "a", ":", "-envlist", "A,B", "-n", "2", "b", ":", "-n", "1", "-envall", "c", ":", "-n", "1", "d"}, func(o *options) bool {
			m := []string{o.segments[0].envMode, o.segments[1].envMode, o.segments[2].envMode, o.segments[3].envMode}
			return reflect.DeepEqual(m, []string{"none", "list", "all", ""}) && reflect.DeepEqual(o.segments[1].envList, []string{"A", "B"}) && o.envMode == "all"
		}},
		{[]string{"-outfile-pattern", "o.%r", "--errfile=e.%r", "app"}, func(o *options) bool {
			return o.outFile.String() == "o.%r" && o.errFile.String() == "e.%r"
		}},
		{[]string{"-outfile", "x", "app"}, func(o *options) bool { return o.outFile.String() == "x" && o.errFile == nil }},
		{[]string{"-prepend-pattern", "%h: ", "app"}, func(o *options) bool { return o.prependPat.String() == "%h: " && !o.prepend }},
		{[]string{"-prepend-pattern=", "app"}, func(o *options) bool { return o.prependPat != nil && o.prependPat.String() == "" }},
		{[]string{"-output-from", "3", "app"}, func(o *options) bool { return o.outputFrom == 3 }},
		{[]string{"app"}, func(o *options) bool {
			return o.outputFrom == -1 && o.usize == mpiexec.UniverseInfinite && o.outFile == nil && o.prependPat == nil
		}},
		{[]string{"-usize", "SYSTEM", "app"}, func(o *options) bool { return o.usize == mpiexec.UniverseSystem }},
		{[]string{"-usize", "INFINITE", "app"}, func(o *options) bool { return o.usize == mpiexec.UniverseInfinite }},
		{[]string{"-usize=12", "app"}, func(o *options) bool { return o.usize == 12 }},
		{[]string{"-genvnone", "-n", "1", "app"}, func(o *options) bool { return o.envMode == "none" && o.envModeSet }},
		{[]string{"-disable-auto-cleanup", "app"}, func(o *options) bool { return o.noAutoCleanup }},
		{[]string{"--dac", "app"}, func(o *options) bool { return o.noAutoCleanup }},
		{[]string{"-enable-auto-cleanup", "app"}, func(o *options) bool { return !o.noAutoCleanup }},
		{[]string{"app"}, func(o *options) bool { return !o.noAutoCleanup }},
		// A program named like one of cobra's commands is a program.
		{[]string{"-n", "2", "completion", "bash"}, func(o *options) bool {
			return reflect.DeepEqual(o.segments[0].argv, []string{"completion", "bash"})
		}},
	}
	for _, tc := range tests {
		o, err := parseArgs(tc.args)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if !tc.check(o) {
			t.Errorf("%v: parsed %+v", tc.args, o)
		}
	}
}

func TestParseHydraOptionErrors(t *testing.T) {
	t.Setenv("HYDRA_CONFIG_FILE", "")
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"-n", "1", "-envall", "-envnone", "app"}, "duplicate environment setting"},
		{[]string{"-n", "1", "-envlist", "A", "-envlist", "B", "app"}, "duplicate environment setting"},
		{[]string{"-genvall", "-genvnone", "app"}, "duplicate setting: -genvnone"},
		{[]string{"-genvlist", "A", "-genvlist", "B", "app"}, "duplicate setting: -genvlist"},
		{[]string{"-l", "-prepend-pattern", "x", "app"}, "duplicate setting: -prepend-pattern"},
		{[]string{"-dac", "-enable-auto-cleanup", "app"}, "duplicate setting: -enable-auto-cleanup"},
		{[]string{"-prepend-pattern", "x", "-l", "app"}, "duplicate setting: -l"},
		{[]string{"-outfile", "a", "-outfile-pattern", "b", "app"}, "duplicate setting"},
		{[]string{"-outfile-pattern", "o.%q", "app"}, "unknown specifier %q"},
		{[]string{"-errfile-pattern", "o.%", "app"}, "dangling %"},
		{[]string{"-outfile=", "app"}, "empty file name"},
		{[]string{"-prepend-pattern", "%z", "app"}, "-prepend-pattern"},
		{[]string{"-output-from", "x", "app"}, "want an integer >= 0"},
		{[]string{"-output-from", "-1", "app"}, "want an integer >= 0"},
		{[]string{"-usize", "0", "app"}, "want SYSTEM, INFINITE or a number"},
		{[]string{"-usize", "system", "app"}, "want SYSTEM"}, // Hydra's values are upper case
		{[]string{"-usize", "3", "-usize", "4", "app"}, "duplicate setting: -usize"},
		// A second host list, say one per MPMD segment as Open MPI takes
		// it, used to replace the first for the whole job: the first
		// segment's ranks silently ran on the second's hosts. Hydra
		// refuses it ("duplicate host file or host list setting").
		{[]string{"-n", "2", "-hosts", "n3", "a", ":", "-n", "2", "-hosts", "n1,n2", "b"}, "duplicate setting: -hosts"},
		{[]string{"-hosts", "a", "-hosts", "b", "app"}, "duplicate setting: -hosts"},
		{[]string{"-f", "h1", "-machinefile", "h2", "app"}, "duplicate setting: -machinefile"},
		{[]string{"-hosts", "a", "-f", "h", "app"}, "duplicate setting: -f"},
		{[]string{"-n", "1", "-ppn", "1", "a", ":", "-n", "2", "-ppn", "2", "b"}, "duplicate setting: -ppn"},
		{[]string{"-n", "1", "-envnone"}, "no program given after the last options"},
		{[]string{"-configfile", "/nonexistent/cf"}, "/nonexistent/cf"},
	}
	for _, tc := range tests {
		_, err := parseArgs(tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want %q", tc.args, err, tc.want)
		}
	}
}

func writeConf(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "conf")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfigFile(t *testing.T) {
	t.Setenv("HYDRA_CONFIG_FILE", "")
	f := writeConf(t, "# MPMD job\n-n 1 -env X 1 ./server --port 7   # trailing comment\n\n  -n 3 ./client \"a b\"\n-genv G 2 -n 1 ./c2 : -n 1 ./c3\n")
	o, err := parseArgs([]string{"-l", "-configfile", f})
	if err != nil {
		t.Fatal(err)
	}
	var got [][]string
	for _, s := range o.segments {
		got = append(got, s.argv)
	}
	// No quoting, as Hydra: blanks split, quotes stay.
	want := [][]string{{"./server", "--port", "7"}, {"./client", `"a`, `b"`}, {"./c2"}, {"./c3"}}
	if !reflect.DeepEqual(got, want) || o.segments[1].n != 3 || o.segments[0].env[0] != "X=1" || !o.prepend ||
		!reflect.DeepEqual(o.genv, []string{"G=2"}) {
		t.Fatalf("segments %q, options %+v", got, o)
	}
}

func TestConfigFileErrorsNameFileAndLine(t *testing.T) {
	t.Setenv("HYDRA_CONFIG_FILE", "")
	tests := []struct{ text, want string }{
		{"-n 1 a\n# fine\n-n 2 -frob b\n", ":3: unknown option -frob"},
		{"-n 1 a\n-n 2\n", ":2: no program after the options"},
		{"-n 1 -n 2 a\n", ":1: -n given twice"},
		{"-configfile x\n", ":1: option -configfile: not inside a config file"},
		{"# nothing\n\n", "no program in it"},
	}
	for _, tc := range tests {
		f := writeConf(t, tc.text)
		_, err := parseArgs([]string{"-configfile", f})
		if err == nil || !strings.Contains(err.Error(), f+tc.want) && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.text, err, tc.want)
		}
		if err != nil && !strings.Contains(err.Error(), f) {
			t.Errorf("%q: error does not name the file: %v", tc.text, err)
		}
	}
	f := writeConf(t, "-n 1 a\n")
	if _, err := parseArgs([]string{"-configfile", f, "-n", "1", "b"}); err == nil || !strings.Contains(err.Error(), "not both") {
		t.Errorf("programs in both places: %v", err)
	}
}

func TestHydraConfigFileDefaults(t *testing.T) {
	f := writeConf(t, "-genv A 1 -l  # defaults\n-genvnone\n-usize 4\n")
	t.Setenv("HYDRA_CONFIG_FILE", f)
	o, err := parseArgs([]string{"-genv", "A", "2", "-prepend-pattern", "%r: ", "-genvall", "app"})
	if err != nil {
		t.Fatal(err)
	}
	// The command line wins: its -genv comes later, its settings replace.
	if !reflect.DeepEqual(o.genv, []string{"A=1", "A=2"}) || o.prepend || o.prependPat == nil || o.envMode != "all" || o.usize != 4 {
		t.Fatalf("parsed %+v", o)
	}
	for text, want := range map[string]string{
		"-n 2\n":               ":1: option -n: the default config file holds global options only",
		"-genv A 1\n./app\n":   `:2: program "./app"`,
		"-configfile x\n":      ":1: option -configfile: not inside a config file",
		"-genvall -genvnone\n": ":1: duplicate setting",
	} {
		t.Setenv("HYDRA_CONFIG_FILE", writeConf(t, text))
		if _, err := parseArgs([]string{"app"}); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "HYDRA_CONFIG_FILE") {
			t.Errorf("%q: got %v, want %q", text, err, want)
		}
	}
}

// TestHydraConfigFileHosts: a default config file's host list (say a site's
// "-f /etc/mpi/hosts") yields to the command line's -hosts or -f, as under
// Hydra, instead of making every such command line "both -f and -hosts".
func TestHydraConfigFileHosts(t *testing.T) {
	for _, tc := range []struct {
		conf     string
		args     []string
		hostfile string
		hosts    string
		ppn      int
	}{
		{"-f /site/hosts\n", []string{"-hosts", "a:2", "app"}, "", "a:2", 0},
		{"-hosts a,b\n", []string{"-f", "h", "app"}, "h", "", 0},
		{"-hosts a,b -ppn 2\n", []string{"-ppn", "3", "app"}, "", "a,b", 3},
		{"-hosts a,b\n", []string{"app"}, "", "a,b", 0},
	} {
		t.Setenv("HYDRA_CONFIG_FILE", writeConf(t, tc.conf))
		o, err := parseArgs(tc.args)
		if err != nil {
			t.Errorf("%q then %v: %v", tc.conf, tc.args, err)
			continue
		}
		if o.hostfile != tc.hostfile || o.hosts != tc.hosts || o.ppn != tc.ppn {
			t.Errorf("%q then %v: -f %q -hosts %q -ppn %d, want %q %q %d", tc.conf, tc.args, o.hostfile, o.hosts, o.ppn, tc.hostfile, tc.hosts, tc.ppn)
		}
	}
}

// TestDefaultConfigFiles: as Hydra (checked with mpiexec.hydra 4.0.2 and
// its get_parameters.c), the defaults come from the first file that opens
// of HYDRA_CONFIG_FILE, ~/.mpiexec.hydra.conf and the system file; one
// that does not open is passed over without a word; one file only.
func TestDefaultConfigFiles(t *testing.T) {
	home := t.TempDir()
	sys := writeConf(t, "-genv S sys\n")
	env := writeConf(t, "-genv E env\n")
	t.Cleanup(func(f []string) func() { return func() { systemConfigFiles = f } }(systemConfigFiles))
	systemConfigFiles = []string{"/nonexistent/mpiexec.hydra.conf", sys}
	t.Setenv("HOME", home)
	for _, tc := range []struct {
		name    string
		envFile string
		home    string // text of ~/.mpiexec.hydra.conf; "" for none
		want    []string
	}{
		{"system", "", "", []string{"S=sys"}},
		{"home over system", "", "-genv H home -l\n", []string{"H=home"}},
		{"HYDRA_CONFIG_FILE over home", env, "-genv H home\n", []string{"E=env"}},
		{"HYDRA_CONFIG_FILE missing: home", "/nonexistent/conf", "-genv H home\n", []string{"H=home"}},
		{"HYDRA_CONFIG_FILE missing: system", "/nonexistent/conf", "", []string{"S=sys"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.Remove(filepath.Join(home, ".mpiexec.hydra.conf"))
			if tc.home != "" {
				os.WriteFile(filepath.Join(home, ".mpiexec.hydra.conf"), []byte(tc.home), 0o644)
			}
			t.Setenv("HYDRA_CONFIG_FILE", tc.envFile)
			o, err := parseArgs([]string{"-genv", "C", "cmd", "app"})
			if err != nil {
				t.Fatal(err)
			}
			if want := append(tc.want, "C=cmd"); !reflect.DeepEqual(o.genv, want) {
				t.Errorf("-genv %v, want %v", o.genv, want)
			}
		})
	}
	t.Setenv("HYDRA_CONFIG_FILE", "")
	os.WriteFile(filepath.Join(home, ".mpiexec.hydra.conf"), []byte("-n 2\n"), 0o644)
	if _, err := parseArgs([]string{"app"}); err == nil || !strings.Contains(err.Error(), filepath.Join(home, ".mpiexec.hydra.conf")+":1:") {
		t.Errorf("a bad line in ~/.mpiexec.hydra.conf: %v, want it named", err)
	}
}

func TestHydraEnvironmentEquivalents(t *testing.T) {
	tests := []struct {
		env   map[string]string
		args  []string
		check func(o *options) bool
	}{
		{map[string]string{"HYDRA_LAUNCHER": "fork"}, nil, func(o *options) bool { return o.launcher == "fork" }},
		{map[string]string{"HYDRA_BOOTSTRAP": "ssh"}, nil, func(o *options) bool { return o.launcher == "ssh" }},
		{map[string]string{"HYDRA_LAUNCHER": "fork", "HYDRA_BOOTSTRAP": "ssh"}, nil, func(o *options) bool { return o.launcher == "fork" }},
		{map[string]string{"HYDRA_LAUNCHER": "fork"}, []string{"-launcher", "ssh"}, func(o *options) bool { return o.launcher == "ssh" }},
		{map[string]string{"HYDRA_LAUNCHER_EXEC": "/x/rsh"}, nil, func(o *options) bool { return o.launcherExe == "/x/rsh" }},
		{map[string]string{"HYDRA_BOOTSTRAP_EXEC": "/y"}, []string{"-launcher-exec", "/z"}, func(o *options) bool { return o.launcherExe == "/z" }},
		{map[string]string{"HYDRA_DEBUG": "1"}, nil, func(o *options) bool { return o.verbose }},
		{map[string]string{"HYDRA_DEBUG": "0"}, nil, func(o *options) bool { return !o.verbose }},
		{map[string]string{"HYDRA_ENV": "all"}, nil, func(o *options) bool { return o.envMode == "all" }},
		{map[string]string{"HYDRA_ENV": "none"}, nil, func(o *options) bool { return o.envMode == "none" }},
		{map[string]string{"HYDRA_ENV": "anything"}, nil, func(o *options) bool { return o.envMode == "none" }},
		{map[string]string{"HYDRA_ENV": "all"}, []string{"-genvnone"}, func(o *options) bool { return o.envMode == "none" }},
		{map[string]string{"HYDRA_ENV": "none"}, []string{"-genvlist", "A"}, func(o *options) bool { return o.envMode == "list" }},
	}
	for _, tc := range tests {
		o, err := parseArgs(append(tc.args, "app"))
		if err != nil {
			t.Fatal(err)
		}
		if err := hydraEnv(o, func(k string) string { return tc.env[k] }); err != nil {
			t.Fatalf("%v: %v", tc.env, err)
		}
		if !tc.check(o) {
			t.Errorf("%v %v: parsed %+v", tc.env, tc.args, o)
		}
	}
	o, _ := parseArgs([]string{"app"})
	if err := hydraEnv(o, func(k string) string { return map[string]string{"HYDRA_LAUNCHER": "pigeon"}[k] }); err == nil || !strings.Contains(err.Error(), "HYDRA_LAUNCHER=pigeon") {
		t.Errorf("bad HYDRA_LAUNCHER: %v", err)
	}
}

func TestSegmentEnv(t *testing.T) {
	environ := []string{"A=1", "B=2", "C=3"}
	lookup := func(k string) (string, bool) {
		for _, kv := range environ {
			if kk, v, _ := strings.Cut(kv, "="); kk == k {
				return v, true
			}
		}
		return "", false
	}
	tests := []struct {
		args     []string
		envSet   []bool
		envNone  []bool
		inherit  [][]string
		wantGEnv []string
	}{
		// No segment of its own: nothing changes.
		{[]string{"-genv", "G", "1", "-n", "1", "a"}, []bool{false}, []bool{false}, [][]string{nil}, nil},
		{[]string{"-genvlist", "A", "-genv", "G", "1", "-n", "1", "a", ":", "-n", "1", "-envlist", "B,Z", "b", ":", "-n", "1", "-envnone", "c", ":", "-n", "1", "-envall", "d"},
			[]bool{true, true, true, true}, []bool{true, true, true, false},
			[][]string{{"A=1"}, {"B=2"}, nil, environ}, []string{"G=1"}},
		{[]string{"-genvnone", "-n", "1", "a", ":", "-n", "1", "-envall", "b"},
			[]bool{true, true}, []bool{true, false}, [][]string{nil, environ}, []string{}},
	}
	for _, tc := range tests {
		o, err := parseArgs(tc.args)
		if err != nil {
			t.Fatal(err)
		}
		cfg := &mpiexec.Config{Env: []string{"untouched"}}
		for range o.segments {
			cfg.Segments = append(cfg.Segments, mpiexec.Segment{})
		}
		segmentEnv(o, cfg, environ, lookup)
		for i, s := range cfg.Segments {
			if s.EnvSet != tc.envSet[i] || s.EnvNone != tc.envNone[i] || !reflect.DeepEqual(s.Inherit, tc.inherit[i]) {
				t.Errorf("%v: segment %d: %+v", tc.args, i, s)
			}
		}
		if tc.wantGEnv == nil {
			if !reflect.DeepEqual(cfg.Env, []string{"untouched"}) {
				t.Errorf("%v: Env changed to %q", tc.args, cfg.Env)
			}
		} else if len(cfg.Env) != len(tc.wantGEnv) || (len(cfg.Env) > 0 && !reflect.DeepEqual(cfg.Env, tc.wantGEnv)) || cfg.EnvNone {
			t.Errorf("%v: Env %q EnvNone %v, want only the -genv pairs %q", tc.args, cfg.Env, cfg.EnvNone, tc.wantGEnv)
		}
	}
}

func TestCobraCommandOnlyFirst(t *testing.T) {
	for args, want := range map[string]bool{
		"completion bash":      true,
		"completion":           true,
		"__complete -n":        true,
		"-n 2 completion":      false,
		"-n 1 completion bash": false,
		"./completion":         false,
		"help":                 false,
		"-n 1 help":            false,
		"":                     false,
	} {
		if got := cobraCommand(strings.Fields(args)); got != want {
			t.Errorf("%q: %v, want %v", args, got, want)
		}
	}
}

// FuzzConfigFile: whatever a config file holds, parsing ends in an error
// that names the file or in segments that each have a program and a
// valid count.
func FuzzConfigFile(f *testing.F) {
	f.Add("-n 1 a\n-n 2 b c\n")
	f.Add("# c\n-genv A 1 -n 1 a : -n 1 b # x\n")
	f.Add("-n 1 -envlist A,B a\n\n-n 1\n")
	f.Add("-outfile-pattern o.%r -n 1 a\n")
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, text string) {
		p := filepath.Join(dir, "conf")
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		o, err := parseArgs([]string{"-configfile", p})
		if err != nil {
			if !strings.Contains(err.Error(), p) && !strings.Contains(err.Error(), "duplicate") {
				t.Fatalf("%q: error does not name the file: %v", text, err)
			}
			return
		}
		if o.help || o.version {
			return
		}
		if len(o.segments) == 0 {
			t.Fatalf("%q: no segments and no error", text)
		}
		for _, s := range o.segments {
			if len(s.argv) == 0 || (s.nSet && s.n < 1) || strings.ContainsAny(strings.Join(s.argv, ""), "#\n") {
				t.Fatalf("%q: bad segment %+v", text, s)
			}
		}
	})
}

// Every option and variable of hydraopts.go is in --help (and so in the
// man page, which renders helpText).
func TestHydraOptionsDocumented(t *testing.T) {
	for _, name := range []string{"-envall", "-envnone", "-envlist", "-outfile-pattern", "-outfile ", "-errfile-pattern",
		"-errfile ", "-prepend-pattern", "-output-from", "-configfile", "-usize", "%r", "%g", "%p", "%h", "%t", "%%",
		"HYDRA_LAUNCHER", "HYDRA_BOOTSTRAP", "HYDRA_LAUNCHER_EXEC", "HYDRA_BOOTSTRAP_EXEC", "HYDRA_DEBUG", "HYDRA_ENV",
		"HYDRA_CONFIG_FILE", "gompiexec -n 2 completion", "-disable-auto-cleanup", "-dac", "-enable-auto-cleanup"} {
		if !strings.Contains(helpText, name) {
			t.Errorf("--help does not mention %q", name)
		}
	}
	for _, name := range []string{"envall", "envnone", "envlist", "outfile-pattern", "outfile", "errfile-pattern", "errfile",
		"prepend-pattern", "output-from", "configfile", "usize", "disable-auto-cleanup", "dac", "enable-auto-cleanup"} {
		if _, ok := specs[name]; !ok {
			t.Errorf("-%s is documented but not an option", name)
		}
	}
}
