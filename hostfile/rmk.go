package hostfile

import (
	"fmt"
	"os"
	"strings"
)

// RMKs are the resource managers whose allocations FromRMK reads, in the
// order Hydra detects them (its -rmk names).
var RMKs = []string{"slurm", "ll", "lsf", "sge", "pbs", "cobalt"}

// FromEnvironment looks for a batch allocation of any known resource
// manager (FromRMK with rmk ""). It returns (nil, "", nil) when none is
// present.
func FromEnvironment(getenv func(string) string) ([]Host, string, error) {
	return FromRMK("", getenv)
}

// FromRMK reads the allocation of resource manager rmk (Hydra's -rmk):
//
//	slurm   SLURM_JOB_NODELIST or SLURM_NODELIST, with SLURM_TASKS_PER_NODE
//	ll      LOADL_HOSTFILE (LoadLeveler: a host per line and slot)
//	lsf     LSB_MCPU_HOSTS ("host slots host slots ...")
//	sge     PE_HOSTFILE (Grid Engine: "host slots queue processors" lines)
//	pbs     PBS_NODEFILE (a host per line and slot)
//	cobalt  COBALT_NODEFILE (a host per line)
//
// rmk "" takes the first of them whose variables are set, and returns
// (nil, "", nil) when none is; "user" reads none (the user names the
// hosts); a named one whose variables are missing is an error.
func FromRMK(rmk string, getenv func(string) string) ([]Host, string, error) {
	switch rmk {
	case "user":
		return nil, "", nil
	case "":
		for _, r := range RMKs {
			if present(r, getenv) {
				return read(r, getenv)
			}
		}
		return nil, "", nil
	}
	if !knownRMK(rmk) {
		return nil, "", fmt.Errorf("unknown resource manager %q (known: user, %s)", rmk, strings.Join(RMKs, ", "))
	}
	if !present(rmk, getenv) {
		return nil, rmk, fmt.Errorf("%s: no allocation here (%s not set)", rmk, strings.Join(rmkVars(rmk), " or "))
	}
	return read(rmk, getenv)
}

func knownRMK(r string) bool {
	for _, k := range RMKs {
		if k == r {
			return true
		}
	}
	return false
}

// rmkVars are the variables whose presence means rmk's allocation.
func rmkVars(rmk string) []string {
	switch rmk {
	case "slurm":
		return []string{"SLURM_JOB_NODELIST", "SLURM_NODELIST"}
	case "ll":
		return []string{"LOADL_HOSTFILE"}
	case "lsf":
		return []string{"LSB_MCPU_HOSTS"}
	case "sge":
		return []string{"PE_HOSTFILE"}
	case "pbs":
		return []string{"PBS_NODEFILE"}
	case "cobalt":
		return []string{"COBALT_NODEFILE"}
	}
	return nil
}

func present(rmk string, getenv func(string) string) bool {
	for _, v := range rmkVars(rmk) {
		if getenv(v) != "" {
			return true
		}
	}
	return false
}

func read(rmk string, getenv func(string) string) ([]Host, string, error) {
	fromFile := func(v string, parse func(*os.File, string) ([]Host, error)) ([]Host, string, error) {
		path := getenv(v)
		f, err := os.Open(path)
		if err != nil {
			return nil, rmk, fmt.Errorf("%s: %w", v, err)
		}
		defer f.Close()
		h, err := parse(f, path)
		if err != nil {
			return nil, rmk, fmt.Errorf("%s: %w", v, err)
		}
		return h, rmk, nil
	}
	plain := func(f *os.File, path string) ([]Host, error) { return Parse(f, path) }
	switch rmk {
	case "slurm":
		nodes := getenv("SLURM_JOB_NODELIST")
		if nodes == "" {
			nodes = getenv("SLURM_NODELIST")
		}
		h, err := ParseSlurm(nodes, getenv("SLURM_TASKS_PER_NODE"))
		if err != nil {
			if step := getenv("SLURM_STEP_ID"); step != "" {
				// srun overwrote the job's tasks per node with the step's.
				return nil, rmk, fmt.Errorf("slurm allocation: %w (inside job step %s, on %s, SLURM_TASKS_PER_NODE is the step's: "+
					"start gompiexec from the batch script or salloc's shell, or name the hosts with -hosts or -f)", err, step, getenv("SLURM_STEP_NODELIST"))
			}
			return nil, rmk, fmt.Errorf("slurm allocation: %w", err)
		}
		return h, rmk, nil
	case "lsf":
		h, err := ParseLSF(getenv("LSB_MCPU_HOSTS"))
		if err != nil {
			return nil, rmk, err
		}
		return h, rmk, nil
	case "sge":
		return fromFile("PE_HOSTFILE", func(f *os.File, path string) ([]Host, error) { return ParseSGE(f, path) })
	case "ll":
		return fromFile("LOADL_HOSTFILE", plain)
	case "pbs":
		return fromFile("PBS_NODEFILE", plain)
	case "cobalt":
		return fromFile("COBALT_NODEFILE", plain)
	}
	return nil, "", nil
}
