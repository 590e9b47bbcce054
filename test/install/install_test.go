// Package install checks `make install` and `go install` as an admin or a
// user would meet them: commands, man pages and completions in a
// temporary prefix, run from there.
package install

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	return strings.TrimSpace(string(out))
}

func need(t *testing.T, cmds ...string) {
	t.Helper()
	for _, c := range cmds {
		if _, err := exec.LookPath(c); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s not installed (test/setup.sh installs it)", c)
			}
			t.Skipf("%s not installed (run test/setup.sh)", c)
		}
	}
}

func run(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestMakeInstall(t *testing.T) {
	need(t, "make", "man", "groff", "bash")
	root := repoRoot(t)
	dest := t.TempDir()
	const prefix = "/opt/gompi-test"
	run(t, nil, "make", "-C", root, "install", "DESTDIR="+dest, "PREFIX="+prefix, "BIN="+filepath.Join(dest, "build"))
	p := filepath.Join(dest, prefix)
	for _, f := range []string{"bin/gompiexec", "bin/gompi-proxy", "bin/gompi-bench",
		"share/man/man1/gompiexec.1", "share/man/man1/gompi-proxy.1", "share/man/man1/gompi-bench.1",
		"share/bash-completion/completions/gompiexec", "share/zsh/site-functions/_gompiexec",
		"share/fish/vendor_completions.d/gompiexec.fish"} {
		if _, err := os.Stat(filepath.Join(p, f)); err != nil {
			t.Errorf("not installed: %v", err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	// gompi-proxy and gompiexec are linked statically: a proxy starts on
	// every host of every job, and gompiexec's start is on the way to the
	// proxies' (docs/control.md, "Start-up costs").
	for _, cmd := range []string{"gompi-proxy", "gompiexec"} {
		f, err := elf.Open(filepath.Join(p, "bin", cmd))
		if err != nil {
			t.Error(err)
			continue
		}
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP {
				t.Errorf("bin/%s is dynamically linked (make install must build it with CGO_ENABLED=0)", cmd)
			}
		}
		f.Close()
	}
	// Their package init stays cheap: every job starts one gompiexec and a
	// proxy per host. Allocations, not times, so the check is exact: a
	// table built at init (the CRC-32C tables cost 0.2-0.6 ms) shows here.
	for _, cmd := range []string{"gompi-proxy", "gompiexec"} {
		c := exec.Command(filepath.Join(p, "bin", cmd), "-version")
		c.Env = append(os.Environ(), "GODEBUG=inittrace=1")
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("%s -version: %v\n%s", cmd, err, out)
		}
		if err := checkInitAllocs(string(out), "github.com/gompi/gompi/", 4096); err != nil {
			t.Errorf("%s: %v", cmd, err)
		}
	}
	// -version names version and the commit make saw.
	// (Outside a git checkout make records "unknown".)
	commit := "unknown"
	if out, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output(); err == nil {
		commit = strings.TrimSpace(string(out))
	}
	v := run(t, nil, filepath.Join(p, "bin/gompiexec"), "-version")
	if !strings.HasPrefix(v, "gompiexec version ") || !strings.Contains(v, "commit "+commit) {
		t.Errorf("gompiexec -version = %q, want version and commit %s", v, commit)
	}
	if v := run(t, nil, filepath.Join(p, "bin/gompi-proxy"), "-version"); !strings.Contains(v, "commit "+commit) {
		t.Errorf("gompi-proxy -version = %q", v)
	}
	// Run from the prefix, with a PATH that has no gompi-proxy: found beside gompiexec.
	env := []string{"PATH=/usr/bin:/bin", "GOMPI_PROXY="}
	if out := run(t, env, filepath.Join(p, "bin/gompiexec"), "-n", "2", "/bin/echo", "installed"); strings.Count(out, "installed") != 2 {
		t.Errorf("job from the prefix printed %q", out)
	}
	// man finds and renders the pages through MANPATH, with the sections an admin looks for.
	for _, page := range []string{"gompiexec", "gompi-proxy", "gompi-bench"} {
		out := run(t, []string{"MANPATH=" + filepath.Join(p, "share/man"), "MANWIDTH=100", "MAN_KEEP_FORMATTING="}, "man", "-P", "cat", page)
		for _, want := range []string{"NAME", "SYNOPSIS", "DESCRIPTION", "ENVIRONMENT", "EXIT STATUS", page} {
			if !strings.Contains(out, want) {
				t.Errorf("man %s lacks %q:\n%s", page, want, out)
			}
		}
	}
	g := exec.Command("groff", "-man", "-Tutf8", "-ww", "-z", filepath.Join(p, "share/man/man1/gompiexec.1"))
	if out, err := g.CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("groff warnings on gompiexec.1: %v\n%s", err, out)
	}
	// The bash completion loads and registers gompiexec.
	out := run(t, nil, "bash", "-c", "source "+filepath.Join(p, "share/bash-completion/completions/gompiexec")+" && complete -p gompiexec")
	if !strings.Contains(out, "gompiexec") {
		t.Errorf("bash completion: %q", out)
	}
	// DESTDIR only stages: nothing was written under the real prefix.
	if _, err := os.Stat(prefix); err == nil {
		t.Errorf("%s exists: DESTDIR not honoured", prefix)
	}
}

// go install puts the commands in GOBIN; gompiexec finds gompi-proxy beside
// itself, or on PATH when it is moved elsewhere alone.
func TestGoInstall(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every command")
	}
	root := repoRoot(t)
	gobin := t.TempDir()
	cmd := exec.Command("go", "install", "github.com/gompi/gompi/cmd/...")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOBIN="+gobin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go install: %v\n%s", err, out)
	}
	if v := run(t, nil, filepath.Join(gobin, "gompiexec"), "-version"); !strings.HasPrefix(v, "gompiexec version ") || !strings.Contains(v, "commit ") {
		t.Errorf("-version = %q", v)
	}
	env := []string{"PATH=/usr/bin:/bin", "GOMPI_PROXY="}
	if out := run(t, env, filepath.Join(gobin, "gompiexec"), "-n", "1", "/bin/echo", "beside"); !strings.Contains(out, "beside") {
		t.Errorf("beside: %q", out)
	}
	alone := t.TempDir()
	data, err := os.ReadFile(filepath.Join(gobin, "gompiexec"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(alone, "gompiexec"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	env = []string{"PATH=" + gobin + ":/usr/bin:/bin", "GOMPI_PROXY="}
	if out := run(t, env, filepath.Join(alone, "gompiexec"), "-n", "1", "/bin/echo", "onpath"); !strings.Contains(out, "onpath") {
		t.Errorf("on PATH: %q", out)
	}
	c := exec.Command(filepath.Join(alone, "gompiexec"), "-n", "1", "/bin/true")
	c.Env = append(os.Environ(), "PATH=/usr/bin:/bin", "GOMPI_PROXY=")
	if out, err := c.CombinedOutput(); err == nil || !strings.Contains(string(out), "gompi-proxy not found") {
		t.Errorf("no proxy anywhere: %v %q", err, out)
	}
}

// checkInitAllocs reads GODEBUG=inittrace=1 output ("init PKG @T ms, C ms
// clock, B bytes, A allocs") and names the packages under prefix whose init
// allocated more than max bytes.
func checkInitAllocs(trace, prefix string, max int) error {
	var heavy []string
	seen := 0
	for _, line := range strings.Split(trace, "\n") {
		f := strings.Fields(line)
		if len(f) < 10 || f[0] != "init" || f[8] != "bytes," {
			continue
		}
		seen++
		b, err := strconv.Atoi(f[7])
		if err != nil {
			return fmt.Errorf("inittrace line %q: %v", line, err)
		}
		if strings.HasPrefix(f[1], prefix) && b > max {
			heavy = append(heavy, fmt.Sprintf("%s (%d bytes)", f[1], b))
		}
	}
	if seen == 0 {
		return fmt.Errorf("no inittrace lines in %q", trace)
	}
	if len(heavy) > 0 {
		return fmt.Errorf("package init allocates more than %d bytes (build it on first use): %s", max, strings.Join(heavy, ", "))
	}
	return nil
}
