//go:build linux

package shm

import (
	"testing"
	"time"
)

// The adaptive spin keeps the configured spin while waits end early,
// shrinks it when spins run out or end late, never below minAdaptiveSpin,
// and grows back when waits end early again; a spin at or below the
// minimum, or no adapter, is used as configured.
func TestSpinAdapt(t *testing.T) {
	const max = time.Millisecond
	type wait struct {
		elapsed time.Duration // -1: early, before the clock was read
		ranOut  bool
	}
	early, late, out := wait{-1, false}, wait{800 * time.Microsecond, false}, wait{0, true}
	cases := []struct {
		name  string
		max   time.Duration
		waits []wait
		want  time.Duration // spin of the next wait
	}{
		{"fresh", max, nil, max},
		{"early waits keep it", max, []wait{early, early, early}, max},
		{"ran out", max, []wait{out}, max / 4},
		{"ran out often", max, []wait{out, out, out, out, out, out}, minAdaptiveSpin},
		{"late", max, []wait{late}, max / 2},
		{"recovers", max, []wait{out, out, out, out, out, early, early, early, early, early, early, early}, max},
		{"short spin untouched", minAdaptiveSpin, []wait{out, out}, minAdaptiveSpin},
		{"no spin", 0, []wait{out}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var a spinAdapt
			for _, w := range c.waits {
				a.spin(c.max)
				a.ended(c.max, w.elapsed, w.ranOut)
			}
			if got := a.spin(c.max); got != c.want {
				t.Errorf("spin %v, want %v", got, c.want)
			}
		})
	}
	// A sleep as short as a wake-up brings the spin back (two waiters that
	// both slept would otherwise never spin again); a long one does not.
	var a spinAdapt
	for i := 0; i < 6; i++ {
		a.spin(max)
		a.ended(max, 0, true)
	}
	a.woke(max, 2*wakeUpBound)
	if got := a.spin(max); got != minAdaptiveSpin {
		t.Errorf("after a long sleep: spin %v", got)
	}
	a.woke(max, wakeUpBound/2)
	if got := a.spin(max); got != 4*minAdaptiveSpin {
		t.Errorf("after a short sleep: spin %v, want %v", got, 4*minAdaptiveSpin)
	}
	for i := 0; i < 10; i++ {
		a.woke(max, 0)
	}
	if got := a.spin(max); got != max {
		t.Errorf("after short sleeps: spin %v, want %v", got, max)
	}
	var none *spinAdapt
	none.woke(max, 0)
	if got := none.spin(max); got != max {
		t.Errorf("nil adapter: spin %v", got)
	}
	none.ended(max, 0, true) // no panic
}
