//go:build gompi_mpiio

package mpiio

import "github.com/gompi/gompi/internal/testkit"

// goviewio is compared with ROMIO once runtime/mpiio is in the tree.
func init() {
	progs = append(progs, "goviewio")
	goProgs = append(goProgs, testkit.Pkg("test/mpiio/progs/goviewio"))
}
