package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Per-segment -envall/-envnone/-envlist replace the global -genv* choice
// for their segment only; -genv pairs reach every segment (Hydra's rules,
// compared with mpiexec.hydra through an rsh agent that starts proxies in
// a fresh environment: ranks start from the proxy's).
func TestPerSegmentEnvironment(t *testing.T) {
	t.Setenv("GOMPI_T_FOO", "foo")
	t.Setenv("GOMPI_T_BAR", "bar")
	show := []string{"sh", "-c", `echo "app$GOMPI_APPNUM foo=$GOMPI_T_FOO bar=$GOMPI_T_BAR g=$GOMPI_T_G"`}
	seg := func(opts ...string) []string { return append(append([]string{"-n", "1"}, opts...), show...) }
	login := loginAgent(t)
	args := append(login, "-genvlist", "GOMPI_T_FOO", "-genv", "GOMPI_T_G", "1")
	args = append(append(args, seg()...), ":")
	args = append(append(args, seg("-envlist", "GOMPI_T_BAR")...), ":")
	args = append(append(args, seg("-envnone")...), ":")
	args = append(args, seg("-envall")...)
	r := runJob(t, "", args...)
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	for _, want := range []string{
		"app0 foo=foo bar= g=1\n", // the global -genvlist
		"app1 foo= bar=bar g=1\n", // its own list
		"app2 foo= bar= g=1\n",    // none
		"app3 foo=foo bar=bar g=1\n",
	} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("missing %q in\n%s", want, r.Stdout)
		}
	}
	// HYDRA_ENV and HYDRA_DEBUG stand in for -genvnone and -verbose.
	t.Setenv("HYDRA_ENV", "none")
	t.Setenv("HYDRA_DEBUG", "1")
	r = runJob(t, "", append(login, seg()...)...)
	if r.Code != 0 || !strings.Contains(r.Stdout, "app0 foo= bar= g=\n") || !strings.Contains(r.Stderr, "level=DEBUG") {
		t.Errorf("HYDRA_ENV=none HYDRA_DEBUG=1: exit %d, %q %q", r.Code, r.Stdout, r.Stderr)
	}
	r = runJob(t, "", "-n", "1", "-envall", "-envnone", "true")
	if r.Code != 255 || !strings.Contains(r.Stderr, "duplicate environment setting") {
		t.Errorf("-envall -envnone: exit %d, %q", r.Code, r.Stderr)
	}
}

const outScript = `echo "out $PMI_RANK"; echo "err $PMI_RANK" >&2; printf "tail$PMI_RANK"`

func TestOutputFiles(t *testing.T) {
	dir := t.TempDir()
	// Opened without O_TRUNC, as Hydra's: the old file's tail stays.
	os.WriteFile(filepath.Join(dir, "out.0"), []byte("................................\n"), 0o644)
	r := runJob(t, "", "-outfile-pattern", filepath.Join(dir, "out.%r"), "-errfile", filepath.Join(dir, "err.%r"),
		"-n", "3", "sh", "-c", outScript)
	if r.Code != 0 || r.Stdout != "" || r.Stderr != "" {
		t.Fatalf("exit %d, terminal got %q %q", r.Code, r.Stdout, r.Stderr)
	}
	for name, want := range map[string]string{
		"out.0": "out 0\ntail0" + strings.Repeat(".", 32-11) + "\n", "out.1": "out 1\ntail1", "out.2": "out 2\ntail2",
		"err.0": "err 0\n", "err.1": "err 1\n", "err.2": "err 2\n",
	} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(b) != want {
			t.Errorf("%s: %q %v, want %q", name, b, err, want)
		}
	}
	// One file for all ranks: every line whole, -l prefixes in it too.
	r = runJob(t, "", "-l", "-outfile-pattern", filepath.Join(dir, "all"), "-n", "4", "sh", "-c", outScript)
	b, _ := os.ReadFile(filepath.Join(dir, "all"))
	if r.Code != 0 || strings.Count(string(b), "\n") != 8 || strings.Count(r.Stderr, "\n") != 4 {
		t.Fatalf("exit %d, file %q, stderr %q", r.Code, b, r.Stderr)
	}
	for _, line := range strings.SplitAfter(strings.TrimSuffix(string(b), "\n"), "\n") {
		if !strings.HasPrefix(line, "[") || strings.Count(line, "[") != 1 {
			t.Errorf("line broken or mixed: %q in\n%s", line, b)
		}
	}
	// A relaunch (-max-restarts) writes on after the failed attempt's
	// output, not over it from the file's start.
	once := filepath.Join(dir, "once")
	r = runJob(t, "", "-max-restarts", "1", "-outfile-pattern", filepath.Join(dir, "restart.%r"), "-n", "1", "sh", "-c",
		`if [ -e `+once+` ]; then echo second run; else touch `+once+`; echo first run; exit 3; fi`)
	if b, err := os.ReadFile(filepath.Join(dir, "restart.0")); r.Code != 0 || string(b) != "first run\nsecond run\n" {
		t.Errorf("restarted job: exit %d, file %q %v, stderr %q", r.Code, b, err, r.Stderr)
	}
	// A file that cannot be opened ends the job naming it.
	r = runJob(t, "", "-outfile-pattern", "/nonexistent-gompi/out.%r", "-n", "1", "sh", "-c", "echo x; sleep 30")
	if r.Code != 255 || !strings.Contains(r.Stderr, "/nonexistent-gompi/out.0") {
		t.Errorf("unopenable file: exit %d, %q", r.Code, r.Stderr)
	}
}

func TestPrependPatternAndOutputFrom(t *testing.T) {
	hosts := []string{"-launcher", "fork", "-hosts", "nodeA:1,nodeB:2"}
	r := runJob(t, "", append(hosts, "-prepend-pattern", "%r@%h/%p/%g%%: ", "-n", "3", "sh", "-c", outScript)...)
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	for _, want := range []string{"0@nodeA/0/0%: out 0\n", "1@nodeB/1/0%: out 1\n", "2@nodeB/1/0%: out 2\n", "2@nodeB/1/0%: tail2\n"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("missing %q in\n%s", want, r.Stdout)
		}
	}
	if !strings.Contains(r.Stderr, "1@nodeB/1/0%: err 1\n") {
		t.Errorf("stderr not prefixed: %q", r.Stderr)
	}
	r = runJob(t, "", append(hosts, "-output-from", "1", "-n", "3", "sh", "-c", outScript)...)
	if r.Code != 0 || r.Stdout != "out 1\ntail1" || r.Stderr != "err 1\n" {
		t.Errorf("-output-from 1: exit %d, %q %q", r.Code, r.Stdout, r.Stderr)
	}
	r = runJob(t, "", "-output-from", "3", "-n", "3", "true")
	if r.Code != 255 || !strings.Contains(r.Stderr, "-output-from 3") {
		t.Errorf("-output-from past the last rank: exit %d %q", r.Code, r.Stderr)
	}
	r = runJob(t, "", "-prepend-pattern", "%y", "-n", "1", "true")
	if r.Code != 255 || !strings.Contains(r.Stderr, "unknown specifier %y") {
		t.Errorf("bad pattern: exit %d %q", r.Code, r.Stderr)
	}
}

func TestConfigFileJob(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "job.conf")
	os.WriteFile(conf, []byte("# server and clients\n-n 1 "+bin("rankprog")+" env server   # rank 0\n\n-n 2 -env GOMPI_TEST_VAR c "+bin("rankprog")+" env client\n"), 0o644)
	r := runJob(t, "", "-configfile", conf)
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	for _, want := range []string{"rank=0 size=3 local=0/3 app=0 args=server marker=\n", "rank=2 size=3 local=2/3 app=1 args=client marker=c\n"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("missing %q in\n%s", want, r.Stdout)
		}
	}
	os.WriteFile(conf, []byte("-n 1 true\n-n 1 -bogus true\n"), 0o644)
	r = runJob(t, "", "-configfile", conf)
	if r.Code != 255 || !strings.Contains(r.Stderr, conf+":2: unknown option -bogus") {
		t.Errorf("bad line: exit %d %q", r.Code, r.Stderr)
	}
	// HYDRA_CONFIG_FILE: default global options the command line overrides.
	os.WriteFile(conf, []byte("-l\n-genv GOMPI_TEST_VAR fromconf\n"), 0o644)
	t.Setenv("HYDRA_CONFIG_FILE", conf)
	r = runJob(t, "", "-n", "1", bin("rankprog"), "env")
	if r.Code != 0 || !strings.HasPrefix(r.Stdout, "[0] rank=0") || !strings.Contains(r.Stdout, "marker=fromconf") {
		t.Errorf("HYDRA_CONFIG_FILE: exit %d %q %q", r.Code, r.Stdout, r.Stderr)
	}
}

// A program called completion (or help) runs as any other program, as
// under Hydra; "gompiexec completion bash" still prints the script.
func TestProgramNamedCompletion(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"completion", "help", "__complete"} {
		os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\necho \"$0 ran as rank $PMI_RANK args $*\"\n"), 0o755)
	}
	// Straight from the command line: runJob's leading -genv would hide
	// the defect (cobra took the first argument after "-n 2" for its
	// command).
	for _, args := range [][]string{{"-n", "2", "completion", "bash"}, {"-n", "1", "help"}, {"-n", "1", "__complete"}} {
		cmd := exec.Command(bin("gompiexec"), args...)
		cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), filepath.Join(dir, args[2])+" ran as rank 0") {
			t.Errorf("%v: %v, %q", args, err, out)
		}
	}
}

// -profile prints, after the job's output and on stdout as Hydra does, how
// many PMI requests reached the launcher: none for a program without PMI,
// one per fence and host for Go ranks.
func TestProfile(t *testing.T) {
	re := regexp.MustCompile(`\n={80}\n\[gompiexec@[^\]]+\] Number of PMI calls seen by the server: (\d+)\n={80}\n\n$`)
	for _, tc := range []struct {
		args []string
		zero bool
	}{
		{[]string{"-n", "1", "/bin/echo", "hi"}, true},
		{[]string{"-hosts", "a:1,b:1", "-launcher", "fork", "-n", "2", bin("pi")}, false},
	} {
		r := runJob(t, "", append([]string{"-profile"}, tc.args...)...)
		m := re.FindStringSubmatch(r.Stdout)
		if r.Code != 0 || m == nil {
			t.Fatalf("%q: exit %d, no -profile report at the end of stdout:\n%s", tc.args, r.Code, r.Stdout)
		}
		if (m[1] == "0") != tc.zero {
			t.Errorf("%q: %s PMI calls", tc.args, m[1])
		}
	}
}
