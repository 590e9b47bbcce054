package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gompi/gompi/hostfile"
	"github.com/gompi/gompi/internal/launcher"
)

func TestParseArgs(t *testing.T) {
	tests := []struct {
		args  []string
		check func(o *options) bool
	}{
		{[]string{"-n", "4", "./app", "-x", "y"}, func(o *options) bool {
			return len(o.segments) == 1 && o.segments[0].n == 4 && reflect.DeepEqual(o.segments[0].argv, []string{"./app", "-x", "y"})
		}},
		{[]string{"--np", "2", "-ckpoint-prefix", "/s", "--ckpoint-interval", "30", "app"}, func(o *options) bool {
			return o.segments[0].n == 2 && o.ckptPrefix == "/s" && o.ckptInterval == 30*time.Second
		}},
		{[]string{"-ckpoint-prefix", "/s", "-ckpoint-cache", "/c", "-ckpoint-partner", "app"}, func(o *options) bool {
			return o.ckptCache == "/c" && o.ckptPartner
		}},
		{[]string{"-genv", "A", "1", "-genv", "B=2", "-genv=C=3", "app"}, func(o *options) bool {
			return reflect.DeepEqual(o.genv, []string{"A=1", "B=2", "C=3"})
		}},
		{[]string{"-n", "1", "-env", "X", "1", "a", ":", "-n", "3", "-wdir", "/tmp", "b", "arg"}, func(o *options) bool {
			return len(o.segments) == 2 && o.segments[0].env[0] == "X=1" && o.segments[1].n == 3 &&
				o.segments[1].wdir == "/tmp" && reflect.DeepEqual(o.segments[1].argv, []string{"b", "arg"})
		}},
		{[]string{"-f", "hosts", "-ppn", "2", "-rr", "-l", "-timeout", "1.5", "app"}, func(o *options) bool {
			return o.hostfile == "hosts" && o.ppn == 2 && o.roundRobin && o.prepend && o.timeout == 1500*time.Millisecond
		}},
		{[]string{"-genvlist", "A,B", "-PREPEND-RANK", "app"}, func(o *options) bool {
			return o.envMode == "list" && reflect.DeepEqual(o.envList, []string{"A", "B"}) && o.prepend
		}},
		{[]string{"app", "-n", "5"}, func(o *options) bool { // options after the program are its own
			return reflect.DeepEqual(o.segments[0].argv, []string{"app", "-n", "5"}) && !o.segments[0].nSet
		}},
		{[]string{"--help"}, func(o *options) bool { return o.help }},
		{[]string{"-launcher", "ssh", "-ssh-accept-new", "--no-proxy-upload", "-ssh-connect-timeout", "2.5", "-proxy-path", "/opt/p", "app"}, func(o *options) bool {
			return o.launcher == "ssh" && o.sshAcceptNew && o.noProxyUpload && o.sshConnectTimeout == 2500*time.Millisecond && o.proxyPath == "/opt/p"
		}},
		{[]string{"--ssh-connect-timeout=1m", "app"}, func(o *options) bool {
			return o.sshConnectTimeout == time.Minute && !o.sshAcceptNew && !o.noProxyUpload && o.proxyPersist == -1
		}},
		{[]string{"-proxy-persist", "600", "app"}, func(o *options) bool { return o.proxyPersist == 10*time.Minute }},
		{[]string{"--proxy-persist=0", "app"}, func(o *options) bool { return o.proxyPersist == 0 }},
		{[]string{"app"}, func(o *options) bool { return o.place.bindTo == "" }},
		{[]string{"-bind-to", "core", "app"}, func(o *options) bool { return o.place.bindTo == "core" }},
		{[]string{"--bind-to", "hwthread:2", "app"}, func(o *options) bool { return o.place.bindTo == "hwthread:2" }},
		{[]string{"--bind-to=socket:1", "app"}, func(o *options) bool { return o.place.bindTo == "socket" }},
		{[]string{"-bind-to", "core", "-binding", "none", "app"}, func(o *options) bool { return o.place.bindTo == "" }},
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

func TestParseArgsErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"-n", "0", "app"}, "need at least 1"},
		{[]string{"-n", "-3", "app"}, "need at least 1"},
		{[]string{"-n", "abc", "app"}, "not a number"},
		{[]string{"-n", "2", "-n", "3", "app"}, "-n given twice"},
		{[]string{"-frobnicate", "app"}, "unknown option -frobnicate"},
		{[]string{"-n"}, "needs 1 value"},
		{[]string{"-genv", "A"}, "needs 2 value"},
		{[]string{":", "app"}, "':' must follow a program"},
		{[]string{"-n", "2"}, "no program given"},
		{[]string{"-launcher", "pigeon", "app"}, "known launchers"},
		{[]string{"-timeout", "soon", "app"}, "want seconds"},
		{[]string{"-f", "h", "-hosts", "a", "app"}, "duplicate setting: -hosts (-f or -hosts is already set)"},
		{[]string{"-l=yes", "app"}, "takes no value"},
		{[]string{"-ssh-accept-new=1", "app"}, "takes no value"},
		{[]string{"-ssh-connect-timeout", "0", "app"}, "more than 0"},
		{[]string{"-ssh-connect-timeout", "soon", "app"}, "want seconds"},
		{[]string{"-ssh-connect-timeout"}, "needs 1 value"},
		{[]string{"-ckpoint-partner", "app"}, "need -ckpoint-prefix"},
		{[]string{"-bind-to", "cores", "app"}, `unknown type "cores"`},
		{[]string{"--bind-to", "core:0", "app"}, `count "0"`},
		{[]string{"-bind-to"}, "needs 1 value"},
		{[]string{"-ckpoint-prefix", "/p", "-ckpoint-partner", "app"}, "-ckpoint-partner needs -ckpoint-cache"},
	}
	for _, tc := range tests {
		_, err := parseArgs(tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want %q", tc.args, err, tc.want)
		}
	}
	var ue *UsageError
	if _, err := parseArgs([]string{"-bogus"}); !errors.As(err, &ue) {
		t.Errorf("unknown flag is not a UsageError: %v", err)
	}
}

func FuzzParseArgs(f *testing.F) {
	f.Add("-n 4 ./app")
	f.Add("-genv A 1 -n 1 a : -n 2 b")
	f.Add("--ckpoint-prefix=/x -l app")
	f.Fuzz(func(t *testing.T, s string) {
		o, err := parseArgs(strings.Fields(s))
		if err != nil || o.help || o.version {
			return
		}
		for _, seg := range o.segments {
			if len(seg.argv) == 0 || (seg.nSet && seg.n < 1) {
				t.Fatalf("%q: bad segment %+v", s, seg)
			}
		}
	})
}

func TestBackendFor(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	pick := func(args ...string) func(string) launcher.Backend {
		t.Helper()
		o, err := parseArgs(append(args, "app"))
		if err != nil {
			t.Fatal(err)
		}
		f, err := backendFor(o, "/nonexistent/gompi-proxy", nil)
		if err != nil {
			t.Fatal(err)
		}
		return func(h string) launcher.Backend { return f(hostfile.Host{Name: h}) }
	}
	be := pick()
	if _, ok := be("localhost").(launcher.Fork); !ok {
		t.Errorf("localhost: %T, want fork", be("localhost"))
	}
	if _, ok := be("node1").(*launcher.SSH); !ok {
		t.Errorf("node1: %T, want the built-in ssh client", be("node1"))
	}
	if _, ok := pick("-launcher", "ssh")("node1").(*launcher.SSH); !ok {
		t.Error("-launcher ssh is not the built-in client")
	}
	if r, ok := pick("-launcher-exec", "ssh")("node1").(launcher.RSH); !ok || !reflect.DeepEqual(r.Args, launcher.OpenSSH().Args) {
		t.Errorf("-launcher-exec ssh: %#v, want OpenSSH in batch mode", pick("-launcher-exec", "ssh")("node1"))
	}
	if _, ok := pick("-launcher", "fork")("node1").(launcher.Fork); !ok {
		t.Error("-launcher fork")
	}
	// Hydra's launcher variables: extra agent words before the host; no
	// fork for this machine; extra words refused by the built-in client,
	// for remote hosts only, saying where they go instead.
	t.Setenv("HYDRA_LAUNCHER_EXTRA_ARGS", "-p 2222  -o LogLevel=ERROR")
	if r, ok := pick("-launcher-exec", "ssh")("node1").(launcher.RSH); !ok ||
		!reflect.DeepEqual(r.Args, append(launcher.OpenSSH().Args, "-p", "2222", "-o", "LogLevel=ERROR")) {
		t.Errorf("HYDRA_LAUNCHER_EXTRA_ARGS with -launcher-exec ssh: %#v", pick("-launcher-exec", "ssh")("node1"))
	}
	be = pick()
	if _, ok := be("localhost").(launcher.Fork); !ok {
		t.Error("HYDRA_LAUNCHER_EXTRA_ARGS: localhost not forked")
	}
	if _, err := be("node1").Start(context.Background(), launcher.Spec{Host: "node1", Argv: []string{"x"}}); err == nil ||
		!strings.Contains(err.Error(), "~/.ssh/config") || !strings.Contains(err.Error(), "-launcher-exec ssh") {
		t.Errorf("HYDRA_LAUNCHER_EXTRA_ARGS with the built-in client: %v", err)
	}
	t.Setenv("HYDRA_LAUNCHER_EXTRA_ARGS", "")
	t.Setenv("HYDRA_LAUNCHER_AUTOFORK", "0")
	if _, ok := pick()("localhost").(*launcher.SSH); !ok {
		t.Errorf("HYDRA_LAUNCHER_AUTOFORK=0: localhost %T, want the ssh client", pick()("localhost"))
	}
	t.Setenv("HYDRA_LAUNCHER_AUTOFORK", "1")
	if _, ok := pick()("localhost").(launcher.Fork); !ok {
		t.Error("HYDRA_LAUNCHER_AUTOFORK=1: localhost not forked")
	}
	t.Setenv("HYDRA_LAUNCHER_AUTOFORK", "")
	// A broken ~/.ssh/config fails remote starts only, naming the problem.
	os.MkdirAll(filepath.Join(home, ".ssh"), 0o700)
	os.WriteFile(filepath.Join(home, ".ssh", "config"), []byte("Host a\n  Match\n\"unterminated\n"), 0o600)
	be = pick()
	if _, ok := be("localhost").(launcher.Fork); !ok {
		t.Error("local host affected by ssh config")
	}
	if _, err := be("node1").Start(context.Background(), launcher.Spec{Host: "node1", Argv: []string{"x"}}); err == nil {
		t.Log("ssh_config parser accepted the broken file") // parser is lenient; not an error of ours
	} else if !strings.Contains(err.Error(), "config") {
		t.Errorf("error does not name the config: %v", err)
	}
}

// -grace 0 means SIGKILL at once; Config's zero value means the default.
func TestGraceZeroMeansAtOnce(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want time.Duration
	}{
		{[]string{"-proxy-path", "/x/gompi-proxy", "/bin/true"}, 3 * time.Second},
		{[]string{"-proxy-path", "/x/gompi-proxy", "-grace", "0", "/bin/true"}, -1},
		{[]string{"-proxy-path", "/x/gompi-proxy", "-grace", "1.5", "/bin/true"}, 1500 * time.Millisecond},
	} {
		o, err := parseArgs(tc.args)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := buildConfig(o)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Grace != tc.want {
			t.Errorf("%v: grace %v, want %v", tc.args, cfg.Grace, tc.want)
		}
	}
}
