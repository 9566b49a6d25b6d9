//go:build linux

package main

import (
	"math"
	"testing"
	"time"
)

func TestParseProcStat(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want cpuTimes
		bad  bool
	}{
		{"with guest fields (guest is inside user)",
			"cpu  16688 0 10229 127028 754 0 946 16678 5 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n",
			cpuTimes{busy: 278.63, softirq: 9.46, steal: 166.78, total: 1723.23}, false},
		{"eight fields, no guest", "cpu 100 0 50 800 0 10 40 0", cpuTimes{busy: 2, softirq: 0.4, total: 10}, false},
		{"per-CPU line first", "cpu0 1 2 3 4 5 6 7 8", cpuTimes{}, true},
		{"too few fields", "cpu 1 2 3 4 5 6 7", cpuTimes{}, true},
		{"not a number", "cpu 1 2 3 x 5 6 7 8", cpuTimes{}, true},
		{"empty", "", cpuTimes{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseProcStat([]byte(tc.in))
			if (err != nil) != tc.bad {
				t.Fatalf("error %v, want error %v", err, tc.bad)
			}
			near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
			if !near(got.busy, tc.want.busy) || !near(got.softirq, tc.want.softirq) ||
				!near(got.steal, tc.want.steal) || !near(got.total, tc.want.total) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// A slice is clean only if no steal was booked from the previous slice's
// start to one sampling period after its own end; slices outside the
// window or without frames are left out.
func TestSummarise(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 3, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	// Steal booked at 410 ms, seen first by the sample at 420 ms.
	var cpu []cpuSample
	for i := 0; i <= 1000; i += 20 {
		c := cpuTimes{total: float64(i)}
		if i >= 420 {
			c.steal = 0.01
		}
		cpu = append(cpu, cpuSample{ms(i), c})
	}
	sl := []slice{
		{ms(0), ms(100), 100, 9000},   // before the window
		{ms(100), ms(200), 100, 40},   // clean
		{ms(200), ms(300), 100, 60},   // clean
		{ms(300), ms(400), 100, 3000}, // steal booked 10 ms after its end: stolen
		{ms(400), ms(500), 100, 8000}, // stolen
		{ms(500), ms(600), 100, 700},  // previous slice stole: stolen
		{ms(600), ms(700), 0, 0},      // no frames
		{ms(700), ms(800), 100, 20},   // clean
		{ms(800), ms(900), 100, 9000}, // after the window
	}
	s := summarise(sl, cpu, ms(100), ms(800), 20*time.Millisecond)
	if want := []float64{20, 40, 60}; !equal(s.clean, want) {
		t.Errorf("clean %v, want %v", s.clean, want)
	}
	if want := []float64{700, 3000, 8000}; !equal(s.stolen, want) {
		t.Errorf("stolen %v, want %v", s.stolen, want)
	}
	if !s.cleanHolds() {
		t.Error("clean slices at 20-60 us do not hold")
	}
	if got, want := s.String(), "3 clean slices: p99 median 40 us, worst 60 us, 3 of 3 <= 500 us; 3 with steal: p99 median 3000 us, worst 8000 us, 0 of 3 <= 500 us"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func equal(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
