package main

import (
	"os/exec"
	"strings"
	"testing"
)

// gompi-proxy starts on every host of every job: it must not link cobra's
// man page generator, whose markdown and YAML packages cost start-up time
// (package roff).
func TestNoManPageGeneratorLinked(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, bad := range []string{"github.com/spf13/cobra", "github.com/russross/blackfriday", "github.com/cpuguy83/go-md2man", "yaml"} {
			if strings.Contains(pkg, bad) {
				t.Errorf("gompi-proxy links %s", pkg)
			}
		}
	}
}
