package proxy

import (
	"slices"
	"testing"

	"github.com/gompi/gompi/internal/control"
)

// Hydra's numbering of GPUs per local rank, and its hostname variable.
func TestHostEnv(t *testing.T) {
	for _, tc := range []struct {
		per, local int
		want       string
	}{{0, 3, "-1"}, {1, 0, "0"}, {1, 5, "5"}, {2, 1, "2,3"}, {3, 2, "6,7,8"}} {
		if got := cudaDevices(tc.per, tc.local); got != tc.want {
			t.Errorf("cudaDevices(%d, %d) = %q, want %q", tc.per, tc.local, got, tc.want)
		}
	}
	if got := hostnameEnv(&control.Job{Host: "n1", Hostname: "n1.ib"}); !slices.Equal(got, []string{"MPIR_CVAR_CH3_INTERFACE_HOSTNAME=n1.ib"}) {
		t.Errorf("hostnameEnv = %q", got)
	}
	if got := hostnameEnv(&control.Job{Host: "n1"}); got != nil {
		t.Errorf("hostnameEnv without propagation = %q", got)
	}
}
