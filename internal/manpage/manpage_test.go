package manpage

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

func TestRenderSections(t *testing.T) {
	cmd := &cobra.Command{Use: "gompi-demo [options]", Short: "Demo command", Long: Preformatted("Usage:\n  gompi-demo -x   does x\n")}
	cmd.Flags().Bool("table", false, "print a table")
	cmd.Flags().String("trace", "", "write <rank>.trace files into <dir>")
	out, err := Render(Page{Cmd: cmd,
		Env:     []Item{{"GOMPI_X", "sets -x; .dots and back\\slash kept"}},
		Exit:    []Item{{"0", "success"}, {"255", "launcher error"}},
		SeeAlso: []string{"gompiexec(1)", "gompi-proxy(1)"}})
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	for _, want := range []string{".TH \"GOMPI-DEMO\" \"1\"", ".SH NAME", ".SH OPTIONS", "table", ".SH ENVIRONMENT", ".B GOMPI_X", ".SH EXIT STATUS", ".B 255", ".BR gompiexec (1),", `back\eslash`, "write <rank>.trace files into <dir>"} {
		if !strings.Contains(s, want) {
			t.Errorf("page lacks %q:\n%s", want, s)
		}
	}
	if _, err := Render(Page{}); err == nil {
		t.Error("Render without a command: no error")
	}
	// Rendered by the real formatter when it is installed: no warnings.
	if _, err := exec.LookPath("groff"); err != nil {
		t.Skip("groff not installed")
	}
	dir := t.TempDir()
	if err := Write(dir, Page{Cmd: cmd, Env: []Item{{"GOMPI_X", "x"}}}); err != nil {
		t.Fatal(err)
	}
	g := exec.Command("groff", "-man", "-Tutf8", "-ww", "-P-bou", filepath.Join(dir, "gompi-demo.1"))
	txt, err := g.CombinedOutput()
	if err != nil {
		t.Fatalf("groff: %v\n%s", err, txt)
	}
	if strings.Contains(string(txt), "warning") || !strings.Contains(string(txt), "GOMPI_X") {
		t.Fatalf("groff output:\n%s", txt)
	}
	os.Remove(filepath.Join(dir, "gompi-demo.1"))
}
