package buildinfo

import (
	"strings"
	"testing"
)

func TestPseudoCommit(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"v0.0.0-20260101120000-abcdef012345", "abcdef012345"},
		{"v1.2.4-0.20260101120000-0123456789ab+incompatible", "0123456789ab"},
		{"v1.2.3", ""},
		{"v1.2.3-rc1", ""},
		{"v0.0.0-20260101120000-ABCDEF012345", ""},
		{"", ""},
	} {
		if got := pseudoCommit(tc.in); got != tc.want {
			t.Errorf("pseudoCommit(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestLinkerValuesWin(t *testing.T) {
	defer func(v, c string) { version, commit = v, c }(version, commit)
	version, commit = "v9.9.9", "0123abcd"
	s := String("gompiexec")
	if !strings.HasPrefix(s, "gompiexec version v9.9.9 (commit 0123abcd, go") {
		t.Fatalf("String = %q", s)
	}
}
