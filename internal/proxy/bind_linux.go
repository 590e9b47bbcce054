package proxy

import (
	"fmt"

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

// affinityAround is a launcher.StartLockedWith wrapper: a child inherits
// the affinity of the thread that forks it, so the locked fork thread takes
// the rank's CPUs for the fork and gets its own mask back right after.
func affinityAround(cpus []int) (func(func() error) error, error) {
	var set unix.CPUSet
	for _, c := range cpus {
		if c >= len(set)*64 {
			return nil, fmt.Errorf("CPU %d beyond the %d a mask holds", c, len(set)*64)
		}
		set.Set(c)
	}
	return func(start func() error) error {
		var old unix.CPUSet
		if err := unix.SchedGetaffinity(0, &old); err != nil {
			return fmt.Errorf("reading the fork thread's CPU affinity: %w", err)
		}
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			return fmt.Errorf("binding to CPUs %v: %w", cpus, err)
		}
		err := start()
		// The old mask was just valid; a restore failure would need the
		// cpuset to shrink between the two calls. The rank then started,
		// so its error must not hide that it runs: it is not returned.
		unix.SchedSetaffinity(0, &old)
		return err
	}, nil
}
