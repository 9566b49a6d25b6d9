//go:build linux

package netns

import (
	"math"
	"testing"
	"time"
)

func TestWireRate(t *testing.T) {
	const payload = 1458
	const rate = 8e6
	gap := time.Duration(float64(payload+WireOverhead) * 8 / rate * float64(time.Second))
	start := time.Unix(1000, 0)
	steady := func(n int) []time.Time {
		a := make([]time.Time, n)
		for i := range a {
			a[i] = start.Add(time.Duration(i) * gap)
		}
		return a
	}
	cases := []struct {
		name   string
		bend   func([]time.Time)
		within float64
	}{
		{"steady", func([]time.Time) {}, 1e-9},
		// The first arrival read 60 ms late, as a descheduled reader saw it.
		{"first late", func(a []time.Time) { a[0] = a[0].Add(60 * time.Millisecond) }, 0.002},
		{"last early", func(a []time.Time) { a[len(a)-1] = a[len(a)-1].Add(-60 * time.Millisecond) }, 0.002},
		// The sender stalled 50 ms mid-window, then caught up in a burst.
		{"stall and catch up", func(a []time.Time) {
			for i := 1000; i < 1034; i++ {
				a[i] = a[1033]
			}
		}, 0.005},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := steady(2000)
			c.bend(a)
			size := make([]int, len(a))
			for i := range size {
				size[i] = payload
			}
			got := wireRate(a, size, start, start.Add(10*time.Second))
			if math.Abs(got-rate)/rate > c.within {
				t.Errorf("wire rate %.0f, want %.0f within %g", got, rate, c.within)
			}
		})
	}
	if got := wireRate(nil, nil, start, start.Add(time.Second)); got != 0 {
		t.Errorf("no arrivals: %v, want 0", got)
	}
}
