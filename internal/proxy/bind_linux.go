package proxy

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// allowedCPUs is this process's CPU affinity. Read on an ordinary
// goroutine's thread: fork threads are locked to their loop, so none of
// them is in the middle of a bound fork here.
func allowedCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("reading the CPU affinity: %w", err)
	}
	var cpus []int
	for c := 0; c < len(set)*64 && len(cpus) < set.Count(); c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// Linux memory policy modes (linux/mempolicy.h).
const (
	mpolDefault    = 0
	mpolBind       = 2
	mpolInterleave = 3
	mpolLocal      = 4
)

// nodeMask holds up to 1024 NUMA nodes, the kernel's largest MAX_NUMNODES
// on common configurations; get_mempolicy refuses a smaller mask than the
// kernel's node count.
type nodeMask [16]uint64

// memPolicy is a thread's policy as get_mempolicy reports it.
type memPolicy struct {
	mode int
	mask nodeMask
}

func getMempolicy() (memPolicy, error) {
	var p memPolicy
	var mode int32
	_, _, e := unix.Syscall6(unix.SYS_GET_MEMPOLICY, uintptr(unsafe.Pointer(&mode)),
		uintptr(unsafe.Pointer(&p.mask[0])), uintptr(len(p.mask)*64+1), 0, 0, 0)
	if e != 0 {
		return p, fmt.Errorf("get_mempolicy: %w", e)
	}
	p.mode = int(mode)
	return p, nil
}

func setMempolicy(p memPolicy) error {
	// The kernel reads maxnode-1 bits (a historic off-by-one numactl
	// compensates for too); MPOL_DEFAULT and MPOL_LOCAL take no mask.
	mask, maxnode := uintptr(unsafe.Pointer(&p.mask[0])), uintptr(len(p.mask)*64+1)
	if p.mode&0xffff == mpolDefault || p.mode&0xffff == mpolLocal {
		mask, maxnode = 0, 0
	}
	if _, _, e := unix.Syscall(unix.SYS_SET_MEMPOLICY, uintptr(p.mode), mask, maxnode); e != 0 {
		return fmt.Errorf("set_mempolicy: %w", e)
	}
	return nil
}

// placeAround is a launcher.StartLockedWith wrapper: a child inherits the
// CPU affinity and the memory policy of the thread that forks it (and
// keeps the policy across exec), so the locked fork thread takes the
// rank's CPUs (cpus; nil leaves them) and policy ("" leaves it) for the
// fork and gets its own back right after.
func placeAround(cpus []int, policy string, nodes []int) (func(func() error) error, error) {
	var set unix.CPUSet
	for _, c := range cpus {
		if c >= len(set)*64 {
			return nil, fmt.Errorf("CPU %d beyond the %d a mask holds", c, len(set)*64)
		}
		set.Set(c)
	}
	var pol memPolicy
	switch policy {
	case "firsttouch":
		pol.mode = mpolLocal
	case "bind", "interleave":
		pol.mode = mpolBind
		if policy == "interleave" {
			pol.mode = mpolInterleave
		}
		for _, n := range nodes {
			if n >= len(pol.mask)*64 {
				return nil, fmt.Errorf("NUMA node %d beyond the %d a mask holds", n, len(pol.mask)*64)
			}
			pol.mask[n/64] |= 1 << (n % 64)
		}
	}
	return func(start func() error) error {
		if cpus != nil {
			var old unix.CPUSet
			if err := unix.SchedGetaffinity(0, &old); err != nil {
				return fmt.Errorf("reading the fork thread's CPU affinity: %w", err)
			}
			if err := unix.SchedSetaffinity(0, &set); err != nil {
				return fmt.Errorf("binding to CPUs %v: %w", cpus, err)
			}
			// The old mask was just valid; a restore failure would need the
			// cpuset to shrink between the two calls. The rank then started,
			// so its error must not hide that it runs: it is not returned.
			defer unix.SchedSetaffinity(0, &old)
		}
		if policy != "" {
			old, err := getMempolicy()
			if err != nil {
				return fmt.Errorf("reading the fork thread's memory policy: %w", err)
			}
			if err := setMempolicy(pol); err != nil {
				return fmt.Errorf("-membind %s on nodes %v: %w", policy, nodes, err)
			}
			defer setMempolicy(old)
		}
		return start()
	}, nil
}
