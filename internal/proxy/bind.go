package proxy

import (
	"fmt"

	"github.com/gompi/gompi/internal/bind"
)

// sysfsRoot is where the topology is read (a variable for tests).
var sysfsRoot = "/sys/devices/system"

// planBinding works out each local rank's CPUs for the job's -bind-to,
// among the CPUs this proxy may use (its affinity mask: inside a Slurm step
// or a cgroup, a subset of the machine), and the fork wrapper that applies
// them. Without -bind-to p.bind stays nil and the fork path is unchanged.
func (p *proxy) planBinding() error {
	spec, err := bind.Parse(p.job.BindTo)
	if err != nil {
		return fmt.Errorf("proxy: host %s: %w", p.job.Host, err)
	}
	if spec.None() {
		return nil
	}
	allowed, err := allowedCPUs()
	if err != nil {
		return fmt.Errorf("proxy: host %s: -bind-to %s: %w", p.job.Host, spec, err)
	}
	topo, err := bind.Read(sysfsRoot, allowed)
	if err != nil {
		return fmt.Errorf("proxy: host %s: -bind-to %s: reading the topology: %w", p.job.Host, spec, err)
	}
	objs := topo.Objects(spec.Type)
	if len(objs) == 0 {
		return fmt.Errorf("proxy: host %s: -bind-to %s: no %s among the CPUs this host allows (%s)",
			p.job.Host, spec, spec.Type, bind.Format(allowed))
	}
	p.bind = make(map[int]func(func() error) error, len(p.job.Ranks))
	for _, rs := range p.job.Ranks {
		cpus := bind.Assign(objs, rs.LocalRank, spec.N)
		around, err := affinityAround(cpus)
		if err != nil {
			return fmt.Errorf("proxy: host %s: rank %d: -bind-to %s: %w", p.job.Host, rs.Rank, spec, err)
		}
		p.bind[rs.Rank] = around
		p.log.Debug("binding", "rank", rs.Rank, "local_rank", rs.LocalRank, "cpus", bind.Format(cpus))
	}
	return nil
}
