package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRshAgent launches through an rsh-style agent standing in for
// `kubectl exec`: it is called as `agent HOST command...`, logs the host and
// runs the command through a shell, as a remote login would.
func TestRshAgent(t *testing.T) {
	dir := t.TempDir()
	logf := filepath.Join(dir, "agent.log")
	agent := filepath.Join(dir, "kubexec.sh")
	script := "#!/bin/sh\nhost=$1; shift\necho \"$host\" >> " + logf + "\nexec /bin/sh -c \"$*\"\n"
	if err := os.WriteFile(agent, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	r := runJob(t, "", "-launcher", "rsh", "-launcher-exec", agent, "-hosts", "pod-a:2,pod-b:2",
		"-proxy-path", bin("gompi-proxy"), "-l", "-n", "4", bin("rankprog"), "env")
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	for i, local := range []string{"0/2", "1/2", "0/2", "1/2"} {
		want := "rank=" + string(rune('0'+i)) + " size=4 local=" + local
		if !strings.Contains(r.Stdout, want) {
			t.Fatalf("missing %q in\n%s", want, r.Stdout)
		}
	}
	b, _ := os.ReadFile(logf)
	if hosts := strings.Fields(string(b)); len(hosts) != 2 || !strings.Contains(string(b), "pod-a") || !strings.Contains(string(b), "pod-b") {
		t.Fatalf("agent called for %q, want pod-a and pod-b once each", b)
	}
}

func TestRshAgentFailureNamesHost(t *testing.T) {
	agent := filepath.Join(t.TempDir(), "broken.sh")
	os.WriteFile(agent, []byte("#!/bin/sh\necho \"cannot reach $1\" >&2\nexit 255\n"), 0o755)
	r := runJob(t, "", "-launcher-exec", agent, "-hosts", "node9", "-n", "2", "/bin/true")
	// The agent's exit status is in the error whichever gompiexec sees
	// first, a failed write or the end of the stream (then it was "(EOF)").
	if r.Code == 0 || !strings.Contains(r.Stderr, "node9") || !strings.Contains(r.Stderr, "cannot reach node9") ||
		!strings.Contains(r.Stderr, "gompi-proxy or its launcher: exit status 255") {
		t.Fatalf("exit %d, stderr %q", r.Code, r.Stderr)
	}
}
