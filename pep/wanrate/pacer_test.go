package wanrate

import (
	"testing"
	"time"
)

// TestPacerCredit: a backlogged sender the host kept waiting may catch up
// with up to burstTime of credit at once, but credit earned while it had
// nothing to send is cut to idleBurst frames (an application's pause must
// not leave as a burst that stands in the link's queue). Driven by
// explicit times: no clock, no scheduler.
func TestPacerCredit(t *testing.T) {
	const rate, frameBytes = 8_000_000, 1500
	frame := float64(frameBytes * 8)
	for _, tc := range []struct {
		name   string
		gap    time.Duration
		idle   bool // the gap was an idle time (resume), not a host stall
		frames int  // frames that may leave at once after the gap
	}{
		{"stall of 10 ms: what it earned", 10 * time.Millisecond, false, 6},
		{"stall of 1 s: at most burstTime", time.Second, false, int(rate * burstTime.Seconds() / frame)},
		{"idle 10 ms", 10 * time.Millisecond, true, idleBurst},
		{"idle 1 s", time.Second, true, idleBurst},
		{"idle 1 ms: less than a frame earned", time.Millisecond, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t0 := time.Unix(1000, 0)
			p := newPacer(rate, frameBytes, t0)
			p.consume(frame) // the first frame spends the initial credit
			now := t0.Add(tc.gap)
			if tc.idle {
				p.resume(now)
			}
			n := 0
			for p.wait(frame, now) == 0 {
				p.consume(frame)
				if n++; n > 1000 {
					t.Fatal("the pacer never runs out of credit")
				}
			}
			if n != tc.frames {
				t.Errorf("%d frames at once after %v, want %d", n, tc.gap, tc.frames)
			}
			// Then frames leave at the rate: the next one waits at most
			// one frame's time.
			if w, per := p.wait(frame, now), time.Duration(frame/rate*float64(time.Second)); w <= 0 || w > per {
				t.Errorf("next frame waits %v, want (0, %v]", w, per)
			}
		})
	}
}
