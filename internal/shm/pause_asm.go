//go:build amd64 || arm64

package shm

// cpuPause tells the core it is in a spin-wait loop (PAUSE, YIELD): a
// spinning load then does not race ahead of the line it polls, so the
// peer's stores that end the wait do not flush the spinner's pipeline
// (docs/shm.md, "Wait and wake").
func cpuPause()
