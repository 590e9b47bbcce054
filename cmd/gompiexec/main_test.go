package main

import (
	"os"
	"testing"
)

// TestMain keeps the tests from reading this machine's default config
// files (~/.mpiexec.hydra.conf, /etc/mpiexec.hydra.conf).
func TestMain(m *testing.M) {
	home, err := os.MkdirTemp("", "gompiexec-test-home-")
	if err != nil {
		panic(err)
	}
	os.Setenv("HOME", home)
	systemConfigFiles = nil
	code := m.Run()
	os.RemoveAll(home)
	os.Exit(code)
}
