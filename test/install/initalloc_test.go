package install

import "testing"

func TestCheckInitAllocs(t *testing.T) {
	for _, tc := range []struct {
		name, trace string
		ok          bool
	}{
		{"cheap", "init github.com/gompi/gompi/internal/launcher @2.3 ms, 0.009 ms clock, 728 bytes, 14 allocs\n", true},
		{"heavy ours", "init github.com/gompi/gompi/ckpt/layout @3.7 ms, 0.23 ms clock, 9216 bytes, 3 allocs\n", false},
		{"heavy stdlib", "init unicode @1.3 ms, 0.039 ms clock, 11400 bytes, 16 allocs\n", true},
		{"no trace", "gompiexec version x\n", false},
	} {
		err := checkInitAllocs(tc.trace, "github.com/gompi/gompi/", 4096)
		if (err == nil) != tc.ok {
			t.Errorf("%s: err = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}
