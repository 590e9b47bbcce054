package e2e

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// rankHostEnv prints what each rank is told about its host: the GPUs it
// may use and the name MPICH's ch3 is to advertise.
const rankHostEnv = `echo "$PMI_RANK/$MPI_LOCALRANKID cuda=${CUDA_VISIBLE_DEVICES-unset} host=${MPIR_CVAR_CH3_INTERFACE_HOSTNAME-unset}"`

// Hostname propagation and -gpus-per-proc set the ranks' environment as
// mpiexec.hydra sets it, options and variables alike, and refuse what
// Hydra refuses. Both launchers run the same command line here.
func TestHostEnvironmentMatchesHydra(t *testing.T) {
	needHydra(t)
	self, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	// Hydra names its default host by gethostname, gompiexec "localhost":
	// each case names its hosts.
	two := "localhost:2," + self + ":2"
	for _, tc := range []struct {
		opts, env string
		fails     bool
	}{
		{opts: "-hosts " + two},
		{opts: "-disable-hostname-propagation -hosts " + two},
		{opts: "-enable-hostname-propagation -hosts " + two},
		{opts: "-iface lo -hosts " + two},
		{opts: "-hosts " + two, env: "HYDRA_IFACE=lo"},
		{opts: "-hosts " + two, env: "HYDRA_HOSTNAME_PROPAGATION=no"},
		{opts: "-hosts " + two, env: "HYDRA_HOSTNAME_PROPAGATION=1"},
		{opts: "-enable-hostname-propagation -hosts " + two, env: "HYDRA_HOSTNAME_PROPAGATION=0"},
		{opts: "-disable-hostname-propagation -hosts " + two, env: "HYDRA_HOSTNAME_PROPAGATION=yes"},
		{opts: "-gpus-per-proc 2 -hosts " + two},
		{opts: "-g 1 -hosts localhost:4"},
		{opts: "-gpus-per-proc 0 -hosts localhost:4"},
		{opts: "-gpus-per-proc AUTO -hosts localhost:4"},
		{opts: "-gpus-per-proc 3 -hosts localhost:4", env: "CUDA_VISIBLE_DEVICES=9"},
		{opts: "-enable-hostname-propagation -iface lo -hosts localhost:4", fails: true},
		{opts: "-hosts localhost:4", env: "HYDRA_HOSTNAME_PROPAGATION=1 HYDRA_IFACE=lo", fails: true},
		{opts: "-hosts localhost:4", env: "HYDRA_HOSTNAME_PROPAGATION=maybe", fails: true},
		{opts: "-disable-hostname-propagation -enable-hostname-propagation -hosts localhost:4", fails: true},
		{opts: "-gpus-per-proc -1 -hosts localhost:4", fails: true},
		{opts: "-g 1 -gpus-per-proc 2 -hosts localhost:4", fails: true},
	} {
		t.Run(strings.TrimSpace(tc.env+" "+tc.opts), func(t *testing.T) {
			args := append(strings.Fields(tc.opts), "-n", "4", "/bin/sh", "-c", rankHostEnv)
			env := append(os.Environ(), strings.Fields(tc.env)...)
			j := newJob(t, "", args...)
			j.Cmd.Env = append(j.Cmd.Env, strings.Fields(tc.env)...)
			j.startJob()
			r := j.wait(60 * time.Second)
			hydra := exec.Command("mpiexec.hydra", args...)
			hydra.Env = env
			out, herr := hydra.Output()
			if tc.fails {
				if herr == nil {
					t.Fatalf("mpiexec.hydra accepted it:\n%s", out)
				}
				if r.Code == 0 || r.Stdout != "" {
					t.Fatalf("gompiexec accepted it: exit %d\n%s", r.Code, r.Stdout)
				}
				t.Logf("gompiexec: %s", strings.TrimSpace(r.Stderr))
				return
			}
			if herr != nil {
				t.Fatalf("mpiexec.hydra: %v\n%s", herr, out)
			}
			if r.Code != 0 {
				t.Fatalf("gompiexec exit %d: %s", r.Code, r.Stderr)
			}
			if got, want := sortedLines(r.Stdout), sortedLines(string(out)); got != want {
				t.Errorf("gompiexec:\n%s\nmpiexec.hydra:\n%s", got, want)
			}
		})
	}
}

// Where gompiexec is stricter than Hydra, whose atoi reads any word as 0
// and so hides every GPU: the error names the option and the value.
func TestGPUsPerProcRefusesWords(t *testing.T) {
	r := runJob(t, "", "-gpus-per-proc", "two", "-n", "1", "/bin/true")
	if want := `-gpus-per-proc "two": want AUTO or a number of GPUs`; r.Code == 0 || !strings.Contains(r.Stderr, want) {
		t.Fatalf("exit %d, want an error with %q:\n%s", r.Code, want, r.Stderr)
	}
}
