// Package roff writes section-1 man pages in roff without cobra: the
// sections every gompi page shares (ENVIRONMENT, EXIT STATUS, SEE ALSO),
// and whole pages for commands that must start fast. gompi-proxy starts on
// every host of every job, and cobra's man page generator (markdown and
// YAML packages, with costly package initialisation) would be linked into
// it and initialised at each start for a page written once, at install
// (docs/control.md, "Start-up costs").
package roff

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// GenFlag is the hidden argument with which every gompi command writes its
// man page: `CMD --gen-man DIR` (used by make install).
const GenFlag = "--gen-man"

// Item is one entry of a tagged list: an environment variable, an exit
// status or an option ([0]), and what it means ([1]).
type Item = [2]string

// Page is a command's man page.
type Page struct {
	// Name is the command; Short its one-line summary (NAME).
	Name, Short string
	// Source names the package and version in the page's footer.
	Source string
	// Synopsis follows the command's name in SYNOPSIS (may be empty).
	Synopsis string
	// Text is the DESCRIPTION, laid out for a terminal: kept verbatim.
	Text string
	// Options, Env and Exit become OPTIONS, ENVIRONMENT and EXIT STATUS.
	Options, Env, Exit []Item
	// SeeAlso names related pages, as "gompiexec(1)".
	SeeAlso []string
}

// Render returns p as roff.
func Render(p Page) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, ".nh\n.TH \"%s\" \"1\" \"\" \"%s\" \"gompi manual\"\n", strings.ToUpper(p.Name), p.Source)
	fmt.Fprintf(&b, ".SH NAME\n%s \\- %s\n", Escape(p.Name), Escape(p.Short))
	fmt.Fprintf(&b, ".SH SYNOPSIS\n\\fB%s\\fP", Escape(p.Name))
	if p.Synopsis != "" {
		fmt.Fprintf(&b, " %s", Escape(p.Synopsis))
	}
	b.WriteString("\n")
	if p.Text != "" {
		b.WriteString(".SH DESCRIPTION\n.EX\n")
		for _, l := range strings.Split(strings.TrimRight(p.Text, "\n"), "\n") {
			b.WriteString(Escape(l) + "\n")
		}
		b.WriteString(".EE\n")
	}
	List(&b, "OPTIONS", p.Options)
	Tail(&b, p.Env, p.Exit, p.SeeAlso)
	return b.Bytes()
}

// List writes a section of tagged paragraphs; nothing when items is empty.
func List(b *bytes.Buffer, title string, items []Item) {
	if len(items) == 0 {
		return
	}
	fmt.Fprintf(b, ".SH %s\n", title)
	for _, it := range items {
		fmt.Fprintf(b, ".TP\n.B %s\n%s\n", Escape(it[0]), Escape(it[1]))
	}
}

// Tail writes ENVIRONMENT, EXIT STATUS and SEE ALSO, each only when given.
func Tail(b *bytes.Buffer, env, exit []Item, seeAlso []string) {
	List(b, "ENVIRONMENT", env)
	List(b, "EXIT STATUS", exit)
	if len(seeAlso) > 0 {
		b.WriteString(".SH SEE ALSO\n")
		for i, s := range seeAlso {
			name, sec, _ := strings.Cut(strings.TrimSuffix(s, ")"), "(")
			sep := ","
			if i == len(seeAlso)-1 {
				sep = ""
			}
			fmt.Fprintf(b, ".BR %s (%s)%s\n", Escape(name), sec, sep)
		}
	}
}

// Escape makes text safe in a roff line: no leading control character,
// backslashes and hyphens as roff wants them.
func Escape(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	s = strings.ReplaceAll(s, "-", `\-`)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}

// Write writes page into dir/NAME.1, creating dir.
func Write(dir, name string, page []byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name+".1"), page, 0o644)
}
