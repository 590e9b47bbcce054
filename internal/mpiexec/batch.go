package mpiexec

import (
	"github.com/gompi/gompi/hostfile"
	"github.com/gompi/gompi/internal/launcher"
)

// announceBatches tells each backend that starts all its proxies in one
// step (slurm) which of the hosts it will be asked to start: the tops of
// the launch plan that use it.
func announceBatches(hosts []hostfile.Host, backend func(hostfile.Host) launcher.Backend, tops []plannedTop) {
	byBackend := map[launcher.Batcher][]string{}
	var order []launcher.Batcher
	for _, t := range tops {
		b, ok := backend(hosts[t.sub.Index]).(launcher.Batcher)
		if !ok {
			continue
		}
		if _, seen := byBackend[b]; !seen {
			order = append(order, b)
		}
		byBackend[b] = append(byBackend[b], hosts[t.sub.Index].Name)
	}
	for _, b := range order {
		b.Expect(byBackend[b])
	}
}
