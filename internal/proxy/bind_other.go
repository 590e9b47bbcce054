//go:build !linux

package proxy

import "errors"

var errNoBinding = errors.New("CPU binding is supported on Linux only")

func allowedCPUs() ([]int, error) { return nil, errNoBinding }

func affinityAround([]int) (func(func() error) error, error) { return nil, errNoBinding }
