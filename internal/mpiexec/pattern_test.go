package mpiexec

import (
	"strings"
	"testing"
)

func TestPatternExpand(t *testing.T) {
	v := PatternVars{Rank: 12, PGID: 0, Proxy: 3, Host: "node7", Secs: 42}
	tests := []struct{ pat, want string }{
		{"[%r] ", "[12] "},
		{"out.%r", "out.12"},
		{"%g/%p/%h/%t", "0/3/node7/42"},
		{"100%% %r%%", "100% 12%"},
		{"plain", "plain"},
		{"", ""},
		{"%h-%h", "node7-node7"},
	}
	for _, tc := range tests {
		p, err := ParsePattern(tc.pat)
		if err != nil {
			t.Fatalf("%q: %v", tc.pat, err)
		}
		if got := string(p.Expand(nil, v)); got != tc.want {
			t.Errorf("%q: got %q, want %q", tc.pat, got, tc.want)
		}
		if p.String() != tc.pat {
			t.Errorf("String() = %q, want %q", p.String(), tc.pat)
		}
	}
}

func TestPatternErrors(t *testing.T) {
	tests := []struct{ pat, want string }{
		{"out.%", "dangling %"},
		{"%x", "unknown specifier %x"},
		{"a%R", "unknown specifier %R"},
	}
	for _, tc := range tests {
		if _, err := ParsePattern(tc.pat); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.pat, err, tc.want)
		}
	}
}

// FuzzPattern: a pattern either is refused or expands to its literal text
// with every specifier replaced, whatever the bytes.
func FuzzPattern(f *testing.F) {
	for _, s := range []string{"[%r] ", "%%", "%", "out.%r.%t", "%h%p%g", "\xff%r"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePattern(s)
		if err != nil {
			if !strings.Contains(s, "%") {
				t.Fatalf("%q refused without a %%: %v", s, err)
			}
			return
		}
		got := string(p.Expand(nil, PatternVars{Rank: 1, Proxy: 2, Host: "h", Secs: 3}))
		want := strings.NewReplacer("%%", "%", "%r", "1", "%g", "0", "%p", "2", "%h", "h", "%t", "3").Replace(s)
		if got != want {
			t.Fatalf("%q: expanded %q, want %q", s, got, want)
		}
	})
}
