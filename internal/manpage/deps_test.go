package manpage

import (
	"os/exec"
	"strings"
	"testing"
)

// gompiexec starts with every job and gompi-proxy on every host of every
// job: neither may link cobra's man page generator, whose markdown and YAML
// packages cost start-up time (package roff writes their pages). gompiexec
// keeps cobra itself, for shell completions; the proxy links no cobra.
func TestNoManPageGeneratorLinked(t *testing.T) {
	generator := []string{"github.com/spf13/cobra/doc", "github.com/russross/blackfriday", "github.com/cpuguy83/go-md2man", "yaml"}
	for _, tc := range []struct {
		cmd    string
		banned []string
	}{
		{"gompiexec", generator},
		{"gompi-proxy", append([]string{"github.com/spf13/cobra"}, generator...)},
	} {
		out, err := exec.Command("go", "list", "-deps", "github.com/gompi/gompi/cmd/"+tc.cmd).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", tc.cmd, err)
		}
		for _, pkg := range strings.Fields(string(out)) {
			for _, bad := range tc.banned {
				if strings.Contains(pkg, bad) {
					t.Errorf("%s links %s", tc.cmd, pkg)
				}
			}
		}
	}
}
