package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestManPageKeepsOptionText checks that every option's help text reaches
// gompi-bench.1 whole: the man page generator (go-md2man) drops anything
// that looks like an HTML tag, such as "<rank>", without a word.
func TestManPageKeepsOptionText(t *testing.T) {
	fs := flag.NewFlagSet("gompi-bench", flag.ContinueOnError)
	defineFlags(fs)
	dir := t.TempDir()
	if code := writeMan(dir, fs); code != 0 {
		t.Fatalf("writeMan: exit %d", code)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "gompi-bench.1"))
	if err != nil {
		t.Fatal(err)
	}
	// The roff source with its font and spacing escapes removed.
	page := strings.NewReplacer(`\fB`, "", `\fR`, "", `\fP`, "", `\fI`, "", `\&`, "", `\-`, "-").Replace(string(raw))
	page = strings.Join(strings.Fields(page), " ")
	fs.VisitAll(func(f *flag.Flag) {
		_, usage := flag.UnquoteUsage(f)
		if want := strings.Join(strings.Fields(usage), " "); !strings.Contains(page, want) {
			t.Errorf("-%s: the man page lacks its help text %q", f.Name, want)
		}
	})
}
