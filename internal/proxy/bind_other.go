//go:build !linux

package proxy

import "errors"

var errNoBinding = errors.New("CPU and memory binding are supported on Linux only")

func allowedCPUs() ([]int, error) { return nil, errNoBinding }

func placeAround([]int, string, []int) (func(func() error) error, error) { return nil, errNoBinding }
