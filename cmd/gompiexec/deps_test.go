package main

import (
	"os/exec"
	"strings"
	"testing"
)

// gompiexec starts with every job: it must not link cobra's man page
// generator, whose markdown and YAML packages cost start-up time (package
// roff writes its page). cobra itself stays, for shell completions.
func TestNoManPageGeneratorLinked(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, bad := range []string{"github.com/spf13/cobra/doc", "github.com/russross/blackfriday", "github.com/cpuguy83/go-md2man", "yaml"} {
			if strings.Contains(pkg, bad) {
				t.Errorf("gompiexec links %s", pkg)
			}
		}
	}
}
