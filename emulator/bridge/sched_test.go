package bridge

import (
	"testing"
	"time"
)

func TestRTBudget(t *testing.T) {
	cases := []struct {
		b       RTBudget
		limited bool
		share   float64
	}{
		{RTBudget{950000, 1000000}, true, 0.95},
		{RTBudget{-1, 1000000}, false, 1},
		{RTBudget{0, 1000000}, true, 0},
		{RTBudget{500000, 0}, false, 1},
	}
	for _, c := range cases {
		if got := c.b.Limited(); got != c.limited {
			t.Errorf("%+v: Limited %v, want %v", c.b, got, c.limited)
		}
		if got := c.b.Share(); got != c.share {
			t.Errorf("%+v: Share %v, want %v", c.b, got, c.share)
		}
	}
}

// TestTxSchedTick walks a transmit thread through windows of given CPU
// share: it leaves real time above the limit, returns below a quarter of it, and
// stays put in between.
func TestTxSchedTick(t *testing.T) {
	cases := []struct {
		name   string
		prio   int
		limit  float64
		shares []float64 // CPU share in consecutive windows
		rt     []bool    // class after each window
	}{
		{"stays real-time when idle", 10, 0.475, []float64{0.1, 0.3}, []bool{true, true}},
		{"busy leaves, idle returns", 10, 0.475, []float64{0.9, 0.4, 0.2, 0.1, 0.5}, []bool{false, false, false, true, false}},
		{"no limit", 10, 0, []float64{1, 1}, []bool{true, true}},
		{"never real-time", 0, 0.475, []float64{0.9, 0.1}, []bool{false, false}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var d Dir
			var cpu time.Duration
			s := newTxSched("test", c.prio, c.limit, nil, &d)
			s.cpu = func() time.Duration { return cpu }
			s.set = func(bool) bool { return true }
			now := time.Duration(0)
			s.start(now)
			switches := 0
			for i, sh := range c.shares {
				// Half a window does not count yet.
				now += rtWindow / 2
				s.tick(now)
				now += rtWindow / 2
				cpu += time.Duration(sh * float64(rtWindow))
				was := s.rt
				s.tick(now)
				if s.rt != c.rt[i] || d.txRealtime.Load() != c.rt[i] {
					t.Fatalf("window %d (share %.2f): real-time %v (reported %v), want %v", i, sh, s.rt, d.txRealtime.Load(), c.rt[i])
				}
				if was != s.rt {
					switches++
				}
			}
			if got := d.txSwitches.Load(); got != uint64(switches) {
				t.Errorf("switches %d, want %d", got, switches)
			}
		})
	}
}

// TestTxSchedStart: a transmit thread starts real-time at a priority,
// else in the ordinary class a busy one is demoted to (nice -20, short slice).
func TestTxSchedStart(t *testing.T) {
	for _, prio := range []int{0, 10} {
		var d Dir
		var asked []bool
		s := newTxSched("test", prio, 0.475, nil, &d)
		s.cpu = func() time.Duration { return 0 }
		s.set = func(rt bool) bool { asked = append(asked, rt); return true }
		s.start(0)
		if len(asked) != 1 || asked[0] != (prio > 0) || s.rt != (prio > 0) || d.txRealtime.Load() != (prio > 0) {
			t.Errorf("priority %d: asked %v, real-time %v (reported %v)", prio, asked, s.rt, d.txRealtime.Load())
		}
	}
}
