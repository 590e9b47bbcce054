package mpi

import "testing"

// transports runs f on n in-process ranks over every transport a promise
// must hold on: shared memory with and without CMA, and TCP. (With
// GOMPI_SHM=0 in the environment all three are TCP.)
func transports(t *testing.T, n int, mod func(*Config), f func(t *testing.T, comms []*Comm)) {
	t.Helper()
	for _, tr := range transportMods {
		t.Run(tr.name, func(t *testing.T) {
			comms, _ := world(t, n, func(c *Config) {
				if tr.mod != nil {
					tr.mod(c)
				}
				if mod != nil {
					mod(c)
				}
			})
			f(t, comms)
		})
	}
}
