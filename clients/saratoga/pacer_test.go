package saratoga

import (
	"testing"
	"time"
)

// TestPacer drives the token bucket with a fake clock: a sender that is
// always ready achieves the configured rate, and credit after a stall is
// capped at the bucket depth.
func TestPacer(t *testing.T) {
	const frame = 1472 // UDP payload; 1500 bytes on the wire
	tests := []struct {
		name    string
		rate    int64
		depth   time.Duration
		stall   time.Duration // one scheduler stall in the middle
		wantMin float64       // achieved rate as a fraction of configured
		wantMax float64
		stalled time.Duration
	}{
		{"steady 8M", 8e6, DefaultBurst, 0, 0.999, 1.001, 0},
		{"stall within credit", 8e6, 100 * time.Millisecond, 80 * time.Millisecond, 0.999, 1.001, 0},
		{"stall beyond credit", 8e6, 30 * time.Millisecond, 200 * time.Millisecond, 0.9, 0.96, 170 * time.Millisecond},
		{"fast 1G", 1e9, DefaultBurst, 0, 0.999, 1.001, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Unix(0, 0)
			p := newPacer(tc.rate, frame, tc.depth, now)
			start := now
			bits := 0.0
			for i := 0; i < 2000; i++ {
				if i == 1000 {
					now = now.Add(tc.stall)
				}
				if d := p.delay(frame, now); d > 0 {
					now = now.Add(d)
					p.delay(frame, now)
				}
				p.consume(frame)
				bits += (frame + WireOverhead) * 8
			}
			got := bits / now.Sub(start).Seconds() / float64(tc.rate)
			if got < tc.wantMin || got > tc.wantMax {
				t.Fatalf("achieved %.4f of rate, want [%.3f, %.3f]", got, tc.wantMin, tc.wantMax)
			}
			if d := p.stalled - tc.stalled; d < -time.Millisecond || d > time.Millisecond {
				t.Fatalf("stalled %v, want %v", p.stalled, tc.stalled)
			}
		})
	}
}
