package main

import (
	"fmt"
	"os"

	"github.com/gompi/gompi/internal/buildinfo"
	"github.com/gompi/gompi/internal/manpage/roff"
)

// writeMan writes gompiexec.1 into dir (gompiexec --gen-man DIR). With
// package roff, not cobra's generator: gompiexec starts with every job,
// and the generator's packages cost start-up time (see package roff).
func writeMan(dir string) int {
	page := roff.Render(roff.Page{Name: "gompiexec", Short: "Run an MPI job",
		Source: "gompi " + buildinfo.Version(), Synopsis: "[options] program [args] [: ...]", Text: helpText,
		Options: []roff.Item{
			{"-h, -help", "print the help above"},
			{"-version", "print the version and commit"},
		},
		Env: []roff.Item{
			{"HYDRA_HOST_FILE", "host file used when neither -f nor -hosts is given"},
			{"HYDRA_LAUNCHER, HYDRA_BOOTSTRAP", "launcher when -launcher is not given"},
			{"HYDRA_LAUNCHER_EXEC, HYDRA_BOOTSTRAP_EXEC", "rsh-style agent when -launcher-exec is not given"},
			{"HYDRA_DEBUG", "1 (or yes, true, on): log launch steps as -verbose"},
			{"HYDRA_ENV", "all: ranks inherit gompiexec's environment (-genvall); any other value: none of it (-genvnone); the command line's -genv* win"},
			{"HYDRA_CONFIG_FILE", "file of default global options, one or more per line (# comments); options on the command line override them. When it is unset or does not open, ~/.mpiexec.hydra.conf, then /etc/mpiexec.hydra.conf, then /usr/etc/mpiexec.hydra.conf (the first that opens; as Hydra)"},
			{"MPIEXEC_TIMEOUT", "seconds after which the job is killed (as -timeout)"},
			{"GOMPI_PROXY", "gompi-proxy command on every host (as -proxy-path); default: gompi-proxy beside gompiexec, else on PATH"},
			{"GOMPI_PROXY_PERSIST", "seconds a persistent proxy stays on each SSH host (as -proxy-persist)"},
			{"GOMPI_PMI_TRACE", "when set, print every PMI exchange (as -pmi-trace)"},
			{"HYDRA_BINDING, HYDRA_MAPPING, HYDRA_MEMBIND", "as -bind-to, -map-by and -membind when those are not given"},
			{"HYDRA_IFACE", "as -iface when it is not given"},
			{"HYDRA_HOSTNAME_PROPAGATION", "yes or no (1, 0, true, false, on, off): whether MPICH ranks get MPIR_CVAR_CH3_INTERFACE_HOSTNAME, when neither -enable- nor -disable-hostname-propagation is given"},
			{"SLURM_JOB_ID, SLURM_JOB_NODELIST, SLURM_TASKS_PER_NODE", "inside a Slurm allocation the hosts and slots come from these, and proxies are started with srun (-launcher slurm) unless -launcher says otherwise"},
			{"MPIEXEC_PORT_RANGE, MPIR_CVAR_CH3_PORT_RANGE", "MIN:MAX: the ports the slurm launcher listens on for its proxies to connect back, and Go ranks listen on for each other (a free one of the range), for firewalls that open only those; Hydra's other names (MPICH_PORT_RANGE, MPIEXEC_PORTRANGE, ...) work too"},
			{"PBS_NODEFILE", "inside a PBS job the hosts come from this file"},
			{"HOME", "the built-in SSH client reads ~/.ssh/config, known_hosts and keys from here"},
		},
		Exit: []roff.Item{
			{"0", "every rank exited 0"},
			{"1-123", "the exit code of the first rank that failed (or called MPI_Abort)"},
			{"124", "-timeout or MPIEXEC_TIMEOUT expired"},
			{"127", "a rank broke the PMI protocol (its error is printed)"},
			{"128+N", "the first failing rank was killed by signal N (130 after a second Ctrl-C; 143 or 129 when ranks outlived a forwarded SIGTERM or SIGHUP by -grace)"},
			{"255", "gompiexec could not run the job: bad arguments, a host or proxy could not be started or was lost"},
		},
		SeeAlso: []string{"gompi-proxy(1)", "gompi-bench(1)", "mpiexec(1)", "srun(1)"},
	})
	if err := roff.Write(dir, "gompiexec", page); err != nil {
		fmt.Fprintln(os.Stderr, "gompiexec:", err)
		return 1
	}
	return 0
}
