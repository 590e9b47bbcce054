// Package manpage writes section-1 man pages for gompi's commands from
// their cobra commands (github.com/spf13/cobra/doc), adding the sections
// cobra has no field for: ENVIRONMENT and EXIT STATUS.
package manpage

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/gompi/gompi/internal/buildinfo"
	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// Item is one entry of a tagged list: an environment variable or an exit
// status ([0]), and what it means ([1]).
type Item = [2]string

// Page describes one command's man page.
type Page struct {
	// Cmd supplies NAME (Use, Short), SYNOPSIS, DESCRIPTION (Long, as
	// markdown) and OPTIONS (its flags).
	Cmd *cobra.Command
	// Env and Exit become ENVIRONMENT and EXIT STATUS.
	Env, Exit []Item
	// SeeAlso names related pages, as "gompi-proxy(1)".
	SeeAlso []string
}

// Render returns the page as roff.
func Render(p Page) ([]byte, error) {
	if p.Cmd == nil {
		return nil, errors.New("manpage: no command")
	}
	p.Cmd.DisableAutoGenTag = true // reproducible output: no generation date
	hdr := &doc.GenManHeader{Title: strings.ToUpper(p.Cmd.Name()), Section: "1",
		Source: "gompi " + buildinfo.Version(), Manual: "gompi manual"}
	var b bytes.Buffer
	if err := doc.GenMan(p.Cmd, hdr, &b); err != nil {
		return nil, fmt.Errorf("manpage %s: %w", p.Cmd.Name(), err)
	}
	section := func(title string, items []Item) {
		if len(items) == 0 {
			return
		}
		fmt.Fprintf(&b, ".SH %s\n", title)
		for _, it := range items {
			fmt.Fprintf(&b, ".TP\n.B %s\n%s\n", escape(it[0]), escape(it[1]))
		}
	}
	section("ENVIRONMENT", p.Env)
	section("EXIT STATUS", p.Exit)
	if len(p.SeeAlso) > 0 {
		b.WriteString(".SH SEE ALSO\n")
		for i, s := range p.SeeAlso {
			name, sec, _ := strings.Cut(strings.TrimSuffix(s, ")"), "(")
			sep := ","
			if i == len(p.SeeAlso)-1 {
				sep = ""
			}
			fmt.Fprintf(&b, ".BR %s (%s)%s\n", escape(name), sec, sep)
		}
	}
	return b.Bytes(), nil
}

// escape makes text safe in a roff line: no leading control character,
// backslashes doubled.
func escape(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	s = strings.ReplaceAll(s, "-", `\-`)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}

// Write renders p into dir/NAME.1.
func Write(dir string, p Page) error {
	out, err := Render(p)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, p.Cmd.Name()+".1"), out, 0o644)
}

// Preformatted wraps help text laid out for a terminal so the man page
// keeps its columns (markdown would reflow it).
func Preformatted(s string) string {
	return "```\n" + strings.TrimRight(s, "\n") + "\n```\n"
}

// GenFlag is the hidden argument with which every gompi command writes its
// man page: `CMD --gen-man DIR` (used by make install).
const GenFlag = "--gen-man"

// RankEnv is the ENVIRONMENT section of a command that runs as an MPI rank
// under gompiexec (or Hydra, or srun --mpi=pmi2).
var RankEnv = []Item{
	{"PMI_FD, PMI_RANK, PMI_SIZE, PMI_PORT, PMI_ID", "how the rank reaches its process manager's PMI server (set by gompiexec, Hydra or srun --mpi=pmi2)"},
	{"GOMPI_JOB_SECRET", "per-job secret that authenticates connections between ranks"},
	{"GOMPI_SHM, GOMPI_CMA", "0 turns off the shared-memory transport, or cross-memory attach, between ranks on one host"},
}
