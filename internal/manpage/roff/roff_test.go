package roff

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestRender(t *testing.T) {
	p := Page{Name: "gompi-demo", Short: "demo -x", Source: "gompi 1.0", Synopsis: "[-x]",
		Text:    "Usage:\n  gompi-demo -x    does x\n.starts with a dot\n",
		Options: []Item{{"-x", "does x"}},
		Env:     []Item{{"GOMPI_X", `back\slash kept`}},
		Exit:    []Item{{"0", "success"}, {"1", "failure"}},
		SeeAlso: []string{"gompiexec(1)", "gompi-proxy(1)"}}
	s := string(Render(p))
	for _, want := range []string{
		`.TH "GOMPI-DEMO" "1" "" "gompi 1.0" "gompi manual"`,
		".SH NAME\ngompi\\-demo \\- demo \\-x\n",
		".SH SYNOPSIS\n\\fBgompi\\-demo\\fP [\\-x]\n",
		".SH DESCRIPTION\n.EX\nUsage:\n  gompi\\-demo \\-x    does x\n\\&.starts with a dot\n.EE\n",
		".SH OPTIONS\n.TP\n.B \\-x\ndoes x\n",
		".SH ENVIRONMENT\n.TP\n.B GOMPI_X\nback\\eslash kept\n",
		".SH EXIT STATUS\n.TP\n.B 0\nsuccess\n.TP\n.B 1\nfailure\n",
		".SH SEE ALSO\n.BR gompiexec (1),\n.BR gompi\\-proxy (1)\n",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("page lacks %q:\n%s", want, s)
		}
	}
	// Sections not given are left out.
	if s := string(Render(Page{Name: "x", Short: "y"})); strings.Contains(s, "DESCRIPTION") || strings.Contains(s, "OPTIONS") || strings.Contains(s, "SEE ALSO") {
		t.Errorf("empty sections written:\n%s", s)
	}
	// The real formatter renders it without warnings.
	if _, err := exec.LookPath("groff"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("groff not installed (test/setup.sh installs it)")
		}
		t.Skip("groff not installed")
	}
	dir := t.TempDir()
	if err := Write(filepath.Join(dir, "man1"), p.Name, Render(p)); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("groff", "-man", "-Tutf8", "-ww", "-P-bou", filepath.Join(dir, "man1", "gompi-demo.1")).CombinedOutput()
	if err != nil || strings.Contains(string(out), "warning") || !strings.Contains(string(out), "gompi-demo -x    does x") {
		t.Fatalf("groff: %v\n%s", err, out)
	}
}
