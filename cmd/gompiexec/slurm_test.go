package main

import (
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
)

func TestUseSlurm(t *testing.T) {
	alloc := map[string]string{"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "n[1-3]"}
	for _, tc := range []struct {
		name     string
		launcher string
		exe      string
		env      map[string]string
		want     bool
	}{
		{"allocation, no launcher", "", "", alloc, true},
		{"old SLURM_NODELIST", "", "", map[string]string{"SLURM_JOB_ID": "1", "SLURM_NODELIST": "a"}, true},
		{"allocation, -launcher ssh", "ssh", "", alloc, false},
		{"allocation, -launcher-exec", "", "ssh", alloc, false},
		{"no allocation", "", "", nil, false},
		{"job id without nodes", "", "", map[string]string{"SLURM_JOB_ID": "1"}, false},
		{"-launcher slurm anywhere", "slurm", "", nil, true},
	} {
		for k, v := range tc.env {
			t.Setenv(k, v)
		}
		for _, k := range []string{"SLURM_JOB_ID", "SLURM_JOB_NODELIST", "SLURM_NODELIST"} {
			if _, ok := tc.env[k]; !ok {
				t.Setenv(k, "")
			}
		}
		if got := useSlurm(&options{launcher: tc.launcher, launcherExe: tc.exe}); got != tc.want {
			t.Errorf("%s: useSlurm = %v, want %v", tc.name, got, tc.want)
		}
	}
	o, err := parseArgs([]string{"-bootstrap", "slurm", "-n", "1", "/bin/true"})
	if err != nil || o.launcher != "slurm" {
		t.Errorf("-bootstrap slurm: %v %q", err, o.launcher)
	}
	if _, err := parseArgs([]string{"-launcher", "pbs", "/bin/true"}); err == nil {
		t.Error("-launcher pbs accepted")
	}
}

// With -iface the proxies of a Slurm step connect back to that interface's
// address alone (by default: every address of the launch host).
func TestSlurmBackendIface(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if _, err := slurmBackend(log, "lo", ""); err != nil {
		t.Fatal(err)
	}
	defer closeSlurm()
	adv := slurmBE.Advertised()
	if len(adv) != 1 || !strings.HasPrefix(adv[0], "127.0.0.1:") {
		t.Errorf("advertised %q, want 127.0.0.1:PORT alone", adv)
	}
	if c, err := net.Dial("tcp", adv[0]); err != nil {
		t.Errorf("dial %s: %v", adv[0], err)
	} else {
		c.Close()
	}
	if _, err := slurmBackend(log, "gompi-none0", ""); err == nil || !strings.Contains(err.Error(), `-iface gompi-none0 on this host (gompiexec's): no network interface "gompi-none0"`) {
		t.Errorf("unknown interface: %v", err)
	}
}

// With -localhost the proxies of a Slurm step are told that one name, with
// the listener's port, as Hydra's control-port string names its host.
func TestSlurmBackendLocalhost(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	o, err := parseArgs([]string{"-localhost", "localhost", "-n", "1", "/bin/true"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := slurmBackend(log, "", o.localhost); err != nil {
		t.Fatal(err)
	}
	defer closeSlurm()
	adv := slurmBE.Advertised()
	if len(adv) != 1 || !strings.HasPrefix(adv[0], "localhost:") {
		t.Fatalf("advertised %q, want localhost:PORT alone", adv)
	}
	if c, err := net.Dial("tcp", adv[0]); err != nil {
		t.Errorf("dial %s: %v", adv[0], err)
	} else {
		c.Close()
	}
	for _, bad := range [][]string{{"-localhost", ""}, {"-localhost", "a b"}, {"-localhost", "a", "-localhost", "b"}} {
		if _, err := parseArgs(append(bad, "-n", "1", "/bin/true")); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// The nodes hosts are checked against: the job's, expanded; none outside
// an allocation or in a heterogeneous job.
func TestSlurmJobNodes(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
		err  bool
	}{
		{"range", map[string]string{"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[1-3],gpu07"}, "n1,n2,n3,gpu07", false},
		{"old SLURM_NODELIST", map[string]string{"SLURM_JOB_ID": "7", "SLURM_NODELIST": "a[08-10]"}, "a08,a09,a10", false},
		{"no allocation", map[string]string{"SLURM_JOB_NODELIST": "n1"}, "", false},
		{"het job", map[string]string{"SLURM_JOB_ID": "7", "SLURM_HET_SIZE": "2", "SLURM_JOB_NODELIST": "n1"}, "", false},
		{"malformed", map[string]string{"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[1-"}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := slurmJobNodes(func(k string) string { return tc.env[k] })
			if (err != nil) != tc.err || strings.Join(got, ",") != tc.want {
				t.Errorf("slurmJobNodes = %v, %v; want %q (error %v)", got, err, tc.want, tc.err)
			}
		})
	}
}
