package launcher

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/gompi/gompi/internal/persist"

	"golang.org/x/crypto/ssh"
)

// ErrProxyMissing: the proxy command is not on the host and could not be
// uploaded (upload disabled, no local copy, or another OS/architecture).
var ErrProxyMissing = errors.New("gompi-proxy not available")

// ProxyCacheDir is where uploaded proxies live, relative to the remote
// $HOME; each is named proxy-<sha256 of its content>.
const ProxyCacheDir = ".cache/gompi"

type fileHash struct {
	size, mtime int64
	sum         string
}

// localHash is the sha256 of a local file, remembered per size and mtime.
func (b *SSH) localHash(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	b.mu.Lock()
	h, ok := b.hashes[path]
	b.mu.Unlock()
	if ok && h.size == st.Size() && h.mtime == st.ModTime().UnixNano() {
		return h.sum, nil
	}
	sum, err := persist.FileSum(path)
	if err != nil {
		return "", err
	}
	b.mu.Lock()
	b.hashes[path] = fileHash{st.Size(), st.ModTime().UnixNano(), sum}
	b.mu.Unlock()
	return sum, nil
}

// probeResult is what the probe script reports about a host.
type probeResult struct {
	uname   string // `uname -sm`
	home    string
	present bool   // the proxy path is an executable file
	sum     string // its sha256, "" if it could not be computed
	cached  bool   // $HOME/.cache/gompi/proxy-<local sum> exists
}

// probeScript reports, one item per line: `uname -sm`, then home=,
// proxy=present SUM | proxy=missing, and cached=yes|no.
func probeScript(proxy, sum string) string {
	s := `uname -sm; echo "home=$HOME"; ` + proxyLookup(proxy) + `; ` +
		`if [ -n "$p" ] && [ -f "$p" ] && [ -x "$p" ]; then h=$( (sha256sum "$p" || shasum -a 256 "$p") 2>/dev/null | cut -c1-64); ` +
		`echo "proxy=present $h"; else echo "proxy=missing"; fi`
	if sum != "" {
		s += `; if [ -x "$HOME/` + ProxyCacheDir + `/proxy-` + sum + `" ]; then echo cached=yes; else echo cached=no; fi`
	}
	return s
}

// Markers of runScript's answer on stdout.
const (
	probeRun = "gompi-probe: run "
	probeEnd = "gompi-probe: end"
)

// runSpec is what runScript runs.
type runSpec struct {
	proxy    string   // the proxy command (Spec.Argv[0]), or the path to run (fixed)
	fixed    bool     // run proxy as it is: the full probe chose it
	sum      string   // sha256 of our build, "" if it cannot be compared
	noUpload bool     // a host's own proxy is used without comparing builds
	env      []string // added to the proxy's environment
	args     []string // after the proxy's path
	// persist, if positive, first finds or starts the host's persistent
	// proxy with this idle time (gompi-proxy -persist-start), whose
	// answer line precedes the run marker. build is its sha256, if known.
	persist time.Duration
	build   string
}

// runScript runs the proxy in the same session when the host already has
// the right one: the cached upload of our build (sum), or proxy itself if
// it is our build (or its build cannot be compared: upload disabled, no
// local copy). It announces the path it runs; otherwise it says end and
// exits, and the launcher probes in full.
func runScript(rs runSpec) string {
	var run []string
	if len(rs.env) > 0 {
		run = append(run, "env")
		for _, kv := range rs.env {
			run = append(run, shellQuote(kv))
		}
	}
	run = append(run, `"$r"`)
	for _, a := range rs.args {
		run = append(run, shellQuote(a))
	}
	s := "r=" + shellQuote(rs.proxy)
	if !rs.fixed {
		s = proxyLookup(rs.proxy) + `; r=`
		sum := rs.sum
		if sum != "" {
			s += `; c="$HOME/` + ProxyCacheDir + `/proxy-` + sum + `"; if [ -x "$c" ]; then r="$c"; fi`
		}
		s += `; if [ -z "$r" ] && [ -n "$p" ] && [ -f "$p" ] && [ -x "$p" ]; then `
		if sum == "" || rs.noUpload {
			s += `r="$p"`
		} else {
			// A match is also copied into the cache, so later jobs find it
			// there without hashing the file again (written under a temporary
			// name and renamed: hosts may share one home directory).
			s += `h=$( (sha256sum "$p" || shasum -a 256 "$p") 2>/dev/null | cut -c1-64); if [ "$h" = ` + sum + ` ]; then r="$p"; ` +
				`(mkdir -p "$HOME/` + ProxyCacheDir + `" && cp "$p" "$c.$$.tmp" && chmod 755 "$c.$$.tmp" && mv -f "$c.$$.tmp" "$c") 2>/dev/null || rm -f "$c.$$.tmp"; fi`
		}
		s += `; fi`
	}
	s += `; if [ -n "$r" ]; then `
	if rs.persist > 0 {
		// stdin from /dev/null: an older proxy that does not know the
		// flag takes EOF as a lost launcher and exits at once.
		s += `"$r" ` + persist.StartFlag + " " + rs.persist.String()
		if isHexSum(rs.build) {
			s += " " + rs.build
		}
		s += ` </dev/null 2>&1; `
	}
	s += `echo "` + probeRun + `$r"; exec ` + strings.Join(run, " ") + `; fi; echo "` + probeEnd + `"`
	return s
}

// proxyLookup sets $p to the proxy's path; a bare name is looked up in
// the remote PATH, as running it would.
func proxyLookup(proxy string) string {
	if strings.Contains(proxy, "/") {
		return "p=" + shellQuote(proxy)
	}
	return "p=$(command -v " + shellQuote(proxy) + " 2>/dev/null || true)"
}

// parseProbe reads the probe's output.
func parseProbe(out string) (probeResult, error) {
	var r probeResult
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) < 3 || strings.TrimSpace(lines[0]) == "" {
		return r, fmt.Errorf("unexpected probe output %q", out)
	}
	r.uname = strings.TrimSpace(lines[0])
	seenProxy := false
	for _, l := range lines[1:] {
		k, v, _ := strings.Cut(l, "=")
		switch k {
		case "home":
			r.home = v
		case "proxy":
			// Printed once: a second line (a profile echoing text) must
			// not leave one line's checksum beside another's state.
			if seenProxy {
				return r, fmt.Errorf("unexpected probe output %q: two proxy lines", out)
			}
			seenProxy = true
			f := strings.Fields(v)
			r.present = len(f) > 0 && f[0] == "present"
			if r.present && len(f) > 1 && isHexSum(f[1]) {
				r.sum = f[1]
			}
		case "cached":
			r.cached = v == "yes"
		}
	}
	if !seenProxy || !strings.HasPrefix(r.home, "/") {
		return r, fmt.Errorf("unexpected probe output %q", out)
	}
	return r, nil
}

func isHexSum(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// unameMatches says whether `uname -sm` output describes the platform this
// binary was built for, so our own proxy can run there.
func unameMatches(uname, goos, goarch string) bool {
	f := strings.Fields(uname)
	if len(f) != 2 || !strings.EqualFold(f[0], goos) {
		return false
	}
	arch := map[string][]string{
		"amd64":   {"x86_64", "amd64"},
		"arm64":   {"aarch64", "arm64"},
		"386":     {"i386", "i486", "i586", "i686"},
		"arm":     {"armv6l", "armv7l", "armv7", "arm"},
		"ppc64le": {"ppc64le"},
		"s390x":   {"s390x"},
		"riscv64": {"riscv64"},
		"loong64": {"loongarch64"},
	}[goarch]
	for _, a := range arch {
		if f[1] == a {
			return true
		}
	}
	return false
}

// run runs a command in a new session on client, feeding stdin, and
// returns its stdout; the error carries its stderr.
func runRemote(client *ssh.Client, cmd string, stdin io.Reader) (string, error) {
	sess, err := client.NewSession()
	if err != nil {
		return "", err
	}
	defer sess.Close()
	var out, errb bytes.Buffer
	sess.Stdout, sess.Stderr, sess.Stdin = &out, &errb, stdin
	// Through /bin/sh, whatever the login shell is (csh, fish).
	if err := sess.Run("/bin/sh -c " + shellQuote(cmd)); err != nil {
		if msg := strings.TrimSpace(errb.String()); msg != "" {
			return out.String(), fmt.Errorf("%w: %s", err, msg)
		}
		return out.String(), err
	}
	return out.String(), nil
}

// ensureProxy returns the remote path to run as the proxy: proxy itself
// when the host has it (and, if we can tell, the same build as ours),
// else our own binary, uploaded once into $HOME/.cache/gompi/proxy-<sha256>
// and reused from there by later jobs. build is the sha256 of what it
// returns, "" when unknown.
func (b *SSH) ensureProxy(ctx context.Context, client *ssh.Client, t *sshTarget, proxy string) (path, build string, err error) {
	if b.cfg.NoProxyUpload {
		out, err := runRemote(client, proxyLookup(proxy)+`; if [ -n "$p" ] && [ -f "$p" ] && [ -x "$p" ]; then echo ok; else echo missing; fi`, nil)
		if err != nil {
			return "", "", fmt.Errorf("ssh %s: check %s: %w", t.alias, proxy, err)
		}
		if strings.TrimSpace(out) != "ok" {
			return "", "", fmt.Errorf("ssh %s: %w: no executable %s there (proxy upload is disabled by -no-proxy-upload; install it or set -proxy-path)",
				t.alias, ErrProxyMissing, proxy)
		}
		return proxy, "", nil
	}
	local := b.cfg.LocalProxy
	if local == "" {
		local = proxy
	}
	sum, err := b.localHash(local)
	if err != nil {
		sum, local = "", "" // no local copy: use the remote one if present
	}
	out, err := runRemote(client, probeScript(proxy, sum), nil)
	if err != nil {
		return "", "", fmt.Errorf("ssh %s: probe: %w", t.alias, err)
	}
	pr, err := parseProbe(out)
	if err != nil {
		return "", "", fmt.Errorf("ssh %s: probe: %w", t.alias, err)
	}
	b.cfg.Log.Debug("ssh probe", "host", t.alias, "uname", pr.uname, "proxy", proxy, "present", pr.present,
		"same_build", sum != "" && pr.sum == sum, "cached", pr.cached)
	switch {
	case pr.present && (sum == "" || pr.sum == sum):
		return proxy, pr.sum, nil
	case !unameMatches(pr.uname, runtime.GOOS, runtime.GOARCH):
		if pr.present {
			return proxy, pr.sum, nil // a build for that platform, presumably
		}
		return "", "", fmt.Errorf("ssh %s: %w: no executable %s there, and the host is %q while this gompi-proxy is built for %s/%s, so it cannot be uploaded; install a gompi-proxy built for that host and set -proxy-path",
			t.alias, ErrProxyMissing, proxy, pr.uname, runtime.GOOS, runtime.GOARCH)
	case local == "":
		if pr.present {
			return proxy, pr.sum, nil
		}
		return "", "", fmt.Errorf("ssh %s: %w: no executable %s there, and no local gompi-proxy to upload", t.alias, ErrProxyMissing, proxy)
	}
	cached := pr.home + "/" + ProxyCacheDir + "/proxy-" + sum
	if pr.cached {
		return cached, sum, nil
	}
	start := time.Now()
	if err := b.upload(ctx, client, local, sum); err != nil {
		return "", "", fmt.Errorf("ssh %s: upload gompi-proxy to %s: %w", t.alias, cached, err)
	}
	b.cfg.Log.Debug("uploaded gompi-proxy", "host", t.alias, "path", cached, "elapsed", time.Since(start).Round(time.Millisecond))
	return cached, sum, nil
}

// upload copies local (whose sha256 is sum) to the remote cache: written
// to a temporary name, checked, made executable and renamed into place, so
// a concurrent or interrupted upload never leaves a partial proxy-<sum>.
func (b *SSH) upload(ctx context.Context, client *ssh.Client, local, sum string) error {
	f, err := os.Open(local)
	if err != nil {
		return err
	}
	defer f.Close()
	script := `set -e; d="$HOME/` + ProxyCacheDir + `"; mkdir -p "$d"; t="$d/.proxy-` + sum + `.$(uname -n).$$"; ` +
		`trap 'rm -f "$t"' EXIT; cat > "$t"; ` +
		`h=$( (sha256sum "$t" || shasum -a 256 "$t") 2>/dev/null | cut -c1-64); ` +
		`if [ "$h" != ` + sum + ` ]; then echo "uploaded copy has sha256 '$h', want ` + sum + `" >&2; exit 1; fi; ` +
		`chmod 755 "$t"; mv -f "$t" "$d/proxy-` + sum + `"; trap - EXIT`
	_, err = runRemote(client, script, f)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}
