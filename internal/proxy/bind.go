package proxy

import (
	"fmt"

	"github.com/gompi/gompi/internal/bind"
)

// sysfsRoot is where the topology is read, devRoot where I/O devices are
// found (variables for tests).
var (
	sysfsRoot = "/sys/devices/system"
	devRoot   = "/sys"
)

// placement is the job's -bind-to (this host's binding= when its host
// file line has one), -map-by and -membind.
func (p *proxy) placement() (b, m bind.Spec, mem bind.MemSpec, err error) {
	bindTo := p.job.BindTo
	if p.job.HostBindTo != "" {
		bindTo = p.job.HostBindTo
	}
	if b, err = bind.Parse(bindTo); err != nil {
		return
	}
	if m, err = bind.ParseMap(p.job.MapBy); err != nil {
		return
	}
	mem, err = bind.ParseMem(p.job.Membind)
	return
}

// planBinding works out each local rank's CPUs and memory policy, among
// the CPUs this proxy may use (its affinity mask: inside a Slurm step or a
// cgroup, a subset of the machine), and the fork wrapper that applies
// them. Without -bind-to and -membind p.bind stays nil and the fork path
// is unchanged.
func (p *proxy) planBinding() error {
	b, m, mem, err := p.placement()
	if err != nil {
		return fmt.Errorf("proxy: host %s: %w", p.job.Host, err)
	}
	// Linux has no next-touch policy: hwloc, so Hydra, leaves it at the
	// default too.
	if mem.Policy == "nexttouch" {
		mem = bind.MemSpec{}
	}
	if b.None() && mem.None() {
		return nil
	}
	what := "-bind-to " + b.String()
	if !mem.None() {
		what += " -membind " + mem.String()
	}
	allowed, err := allowedCPUs()
	if err != nil {
		return fmt.Errorf("proxy: host %s: %s: %w", p.job.Host, what, err)
	}
	topo, err := bind.Read(sysfsRoot, allowed, bind.CacheLevels(b, m)...)
	if err != nil {
		return fmt.Errorf("proxy: host %s: %s: reading the topology: %w", p.job.Host, what, err)
	}
	for _, s := range []*bind.Spec{&b, &m} {
		if s.Device() {
			if err := bind.ReadDevices(devRoot, s); err != nil {
				return fmt.Errorf("proxy: host %s: %w", p.job.Host, err)
			}
		}
	}
	sets, err := topo.Plan(b, m)
	if err != nil {
		return fmt.Errorf("proxy: host %s: %s: %w", p.job.Host, what, err)
	}
	var hostNodes []int
	if !mem.None() {
		if hostNodes, err = bind.ReadNodes(sysfsRoot); err != nil {
			return fmt.Errorf("proxy: host %s: %s: reading the NUMA nodes: %w", p.job.Host, what, err)
		}
	}
	p.bind = make(map[int]func(func() error) error, len(p.job.Ranks))
	for _, rs := range p.job.Ranks {
		cpus := bind.Pick(sets, b, rs.LocalRank)
		for _, c := range cpus {
			if !contains(allowed, c) {
				return fmt.Errorf("proxy: host %s: rank %d: %s: CPU %d is not among the CPUs this host allows (%s)",
					p.job.Host, rs.Rank, what, c, bind.Format(allowed))
			}
		}
		var nodes []int
		if !mem.None() {
			if nodes, err = topo.MemNodes(mem, cpus, hostNodes); err != nil {
				return fmt.Errorf("proxy: host %s: rank %d: %w", p.job.Host, rs.Rank, err)
			}
		}
		if cpus == nil && mem.None() {
			continue // a user: list that does not name this rank
		}
		around, err := placeAround(cpus, mem.Policy, nodes)
		if err != nil {
			return fmt.Errorf("proxy: host %s: rank %d: %s: %w", p.job.Host, rs.Rank, what, err)
		}
		p.bind[rs.Rank] = around
		p.log.Debug("binding", "rank", rs.Rank, "local_rank", rs.LocalRank, "cpus", bind.Format(cpus),
			"membind", mem.Policy, "nodes", bind.Format(nodes))
	}
	return nil
}

func contains(l []int, v int) bool {
	for _, x := range l {
		if x == v {
			return true
		}
	}
	return false
}
