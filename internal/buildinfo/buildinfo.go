// Package buildinfo names the version and commit a gompi command was built
// from. `make build`/`make install` set both with -ldflags -X; a plain
// `go build` or `go install ...@version` falls back to what the Go
// toolchain records in the executable (module version, VCS revision).
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Set with -ldflags "-X github.com/gompi/gompi/internal/buildinfo.version=v1.2.3
// -X github.com/gompi/gompi/internal/buildinfo.commit=<sha>".
var (
	version string
	commit  string
)

// Version is the release or module version, "devel" when unknown.
func Version() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

// Commit is the source revision, "unknown" when the build did not record
// one. A tree with uncommitted changes gets a "-dirty" suffix.
func Commit() string {
	if commit != "" {
		return commit
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		// go install module@version records no VCS settings, but a
		// pseudo-version ends in the commit's 12-hex-digit prefix.
		rev = pseudoCommit(bi.Main.Version)
	}
	if rev == "" {
		return "unknown"
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}

// pseudoCommit returns the commit prefix of a Go pseudo-version
// (v0.0.0-20260101120000-abcdef012345), or "".
func pseudoCommit(v string) string {
	v, _, _ = strings.Cut(v, "+")
	i := strings.LastIndexByte(v, '-')
	if i < 0 || len(v)-i-1 != 12 {
		return ""
	}
	h := v[i+1:]
	if strings.Trim(h, "0123456789abcdef") != "" {
		return ""
	}
	return h
}

// String is the one-line identity -version prints: "NAME version V (commit C, goX)".
func String(name string) string {
	return fmt.Sprintf("%s version %s (commit %s, %s)", name, Version(), Commit(), runtime.Version())
}
