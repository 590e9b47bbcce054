// Package manpage writes section-1 man pages for gompi's commands from
// their cobra commands (github.com/spf13/cobra/doc), adding the sections
// cobra has no field for: ENVIRONMENT and EXIT STATUS.
package manpage

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/gompi/gompi/internal/buildinfo"
	"github.com/gompi/gompi/internal/manpage/roff"
	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
	"github.com/spf13/pflag"
)

// Item is one entry of a tagged list: an environment variable or an exit
// status ([0]), and what it means ([1]).
type Item = roff.Item

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
	// go-md2man takes "<rank>" in a flag's help for an HTML tag and drops
	// it: escape it for the markdown, and put the help back afterwards.
	var flags []*pflag.Flag
	for _, fs := range []*pflag.FlagSet{p.Cmd.NonInheritedFlags(), p.Cmd.InheritedFlags()} {
		fs.VisitAll(func(f *pflag.Flag) { flags = append(flags, f) })
	}
	for _, f := range flags {
		defer func(usage string) { f.Usage = usage }(f.Usage)
		f.Usage = strings.ReplaceAll(f.Usage, "<", `\<`)
	}
	var b bytes.Buffer
	if err := doc.GenMan(p.Cmd, hdr, &b); err != nil {
		return nil, fmt.Errorf("manpage %s: %w", p.Cmd.Name(), err)
	}
	roff.Tail(&b, p.Env, p.Exit, p.SeeAlso)
	return b.Bytes(), nil
}

// Write renders p into dir/NAME.1.
func Write(dir string, p Page) error {
	out, err := Render(p)
	if err != nil {
		return err
	}
	return roff.Write(dir, p.Cmd.Name(), out)
}

// Preformatted wraps help text laid out for a terminal so the man page
// keeps its columns (markdown would reflow it).
func Preformatted(s string) string {
	return "```\n" + strings.TrimRight(s, "\n") + "\n```\n"
}

// GenFlag is the hidden argument with which every gompi command writes its
// man page: `CMD --gen-man DIR` (used by make install).
const GenFlag = roff.GenFlag

// RankEnv is the ENVIRONMENT section of a command that runs as an MPI rank
// under gompiexec (or Hydra, or srun --mpi=pmi2).
var RankEnv = []Item{
	{"PMI_FD, PMI_RANK, PMI_SIZE, PMI_PORT, PMI_ID", "how the rank reaches its process manager's PMI server (set by gompiexec, Hydra or srun --mpi=pmi2)"},
	{"GOMPI_SINGLETON", "1 lets each task of a multi-task srun step without PMI (no --mpi=pmi2) run alone as rank 0 of 1, which is otherwise an error"},
	{"GOMPI_JOB_SECRET", "per-job secret that authenticates connections between ranks"},
	{"GOMPI_SHM, GOMPI_CMA", "0 turns off the shared-memory transport, or cross-memory attach, between ranks on one host"},
}
