//go:build !amd64 && !arm64

package shm

// cpuPause is a spin-wait hint where the architecture has none we use.
func cpuPause() {}
