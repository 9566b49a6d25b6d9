package access

import (
	"testing"
	"time"
)

func TestDecide(t *testing.T) {
	const seg = 1000
	plain := Config{Packets: 100, Segment: seg} // LAN share 25 packets: the WAN side may hold 75
	res := Config{Packets: 100, Segment: seg, Reserve: 0.8}
	for _, tc := range []struct {
		name      string
		cfg       Config
		inq, wan  int64
		reserveAt int64
		want      Decision
	}{
		{"empty buffer: read", plain, 0, 0, 0, Decision{WanCap: 75 * seg, Read: true}},
		{"WAN side below B minus the LAN share: read", plain, 25 * seg, 74 * seg, 0, Decision{WanCap: 75 * seg, Read: true}},
		{"WAN side full: stop, the LAN window closes", plain, 10 * seg, 75 * seg, 0, Decision{WanCap: 75 * seg}},
		{"below K·B: as without reservation", res, 5 * seg, 70 * seg, 80 * seg, Decision{WanCap: 75 * seg, Read: true}},
		{"reaches K·B: nothing is read, ACKs held", res, 10 * seg, 70 * seg, 80 * seg, Decision{Reserving: true}},
		{"drained below K·B: reading resumes at once", res, 10 * seg, 69 * seg, 80 * seg, Decision{WanCap: 75 * seg, Read: true}},
		{"the leg is back: the reservation is released, B applies", res, 25 * seg, 70 * seg, 0, Decision{WanCap: 75 * seg, Read: true}},
		{"the leg is back but the WAN side holds B minus the LAN share", res, 25 * seg, 75 * seg, 0, Decision{WanCap: 75 * seg}},
		{"returning to K·B: the bound in between applies", res, 25 * seg, 64 * seg, 90 * seg, Decision{WanCap: 75 * seg, Read: true}},
		{"a tiny B keeps 4 packets of WAN room", Config{Packets: 16, Segment: seg}, 0, 0, 0, Decision{WanCap: 4 * seg, Read: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.cfg.Decide(tc.inq, tc.wan, tc.reserveAt); got != tc.want {
				t.Fatalf("Decide(%d, %d, %d) = %+v, want %+v", tc.inq, tc.wan, tc.reserveAt, got, tc.want)
			}
		})
	}
}

func TestReserveAt(t *testing.T) {
	const seg = 1000
	res := Config{Packets: 100, Segment: seg, Reserve: 0.8}
	rtt := 500 * time.Millisecond
	for _, tc := range []struct {
		since time.Duration
		back  bool
		want  int64
	}{
		{0, false, 80 * seg},              // no outage yet: K·B
		{100 * time.Millisecond, true, 0}, // within the leg's round trip after it came back: lifted
		{rtt + Settle/2, true, 90 * seg},  // half way back from B to K·B
		{rtt + Settle, true, 80 * seg},
	} {
		if got := res.ReserveAt(tc.since, rtt, tc.back); got != tc.want {
			t.Errorf("ReserveAt(%v, %v) = %d, want %d", tc.since, tc.back, got, tc.want)
		}
	}
	if got := (Config{Packets: 100}).ReserveAt(0, rtt, true); got != 0 {
		t.Errorf("without K: %d, want 0", got)
	}
}

func TestLanShare(t *testing.T) {
	for _, tc := range []struct {
		packets int
		want    int64
	}{{185, 185 * DefaultSegment / 4}, {40, 16 * DefaultSegment}, {10, 10 * DefaultSegment}} {
		if got := (Config{Packets: tc.packets}).LanShare(); got != tc.want {
			t.Errorf("B=%d: LanShare %d, want %d", tc.packets, got, tc.want)
		}
	}
}

func TestValidateAndLimit(t *testing.T) {
	for _, tc := range []struct {
		cfg   Config
		ok    bool
		limit int64
	}{
		{Config{}, true, 0},
		{Config{Packets: 185}, true, 185 * DefaultSegment},
		{Config{Packets: 185, Segment: 1000, Reserve: 0.88}, true, 185000},
		{Config{Packets: 10, Reserve: 1}, false, 10 * DefaultSegment},
		{Config{Packets: 0, Reserve: 0.5}, false, 0},
		{Config{Packets: -1}, false, -DefaultSegment},
	} {
		if err := tc.cfg.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: Validate = %v, want ok=%v", tc.cfg, err, tc.ok)
		}
		if got := tc.cfg.Limit(); got != tc.limit {
			t.Errorf("%+v: Limit = %d, want %d", tc.cfg, got, tc.limit)
		}
	}
}

func TestStallAfter(t *testing.T) {
	for _, tc := range []struct {
		stall, srtt, want time.Duration
	}{
		{0, 500 * time.Millisecond, time.Second},
		{0, 20 * time.Millisecond, 200 * time.Millisecond},
		{0, 0, 200 * time.Millisecond},
		{3 * time.Second, 500 * time.Millisecond, 3 * time.Second},
	} {
		if got := (Config{Stall: tc.stall}).StallAfter(tc.srtt); got != tc.want {
			t.Errorf("StallAfter(stall %v, srtt %v) = %v, want %v", tc.stall, tc.srtt, got, tc.want)
		}
	}
}

// TestDetector follows a leg through progress, an idle spell, an outage and
// the recovery.
func TestDetector(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	const stall = time.Second
	type step struct {
		ms          int
		acked       uint64
		outstanding int64
		started     bool
		ended       bool
	}
	steps := []step{
		{0, 0, 100, false, false},
		{100, 1000, 100, false, false},   // progress
		{900, 1000, 0, false, false},     // idle: nothing outstanding
		{2500, 1000, 0, false, false},    // still idle, long: not an outage
		{2600, 1000, 500, false, false},  // data again, no ACK yet
		{3400, 1000, 500, false, false},  // 0.9 s since the leg was last seen owing nothing
		{3600, 1000, 500, true, false},   // 1.1 s: outage detected
		{5000, 1000, 500, false, false},  // still down: reported once
		{10000, 2000, 500, false, true},  // first ACK progress: recovered
		{10100, 3000, 500, false, false}, // normal again
		{12000, 3000, 500, true, false},  // a second outage
		{13000, 4000, 0, false, true},    // and its end
	}
	var d DetectorState
	for _, s := range steps {
		o, started, ended := d.Observe(s.acked, s.outstanding, at(s.ms), stall)
		if started != s.started || ended != s.ended {
			t.Fatalf("at %d ms: started=%v ended=%v, want %v %v", s.ms, started, ended, s.started, s.ended)
		}
		if s.ms == 3600 && (!o.LastProgress.Equal(at(2500)) || !o.Detected.Equal(at(3600))) {
			t.Fatalf("outage %+v: want last progress at 2500 ms (the last sample owing nothing), detected at 3600 ms", o)
		}
		if s.ms == 10000 && !o.Recovered.Equal(at(10000)) {
			t.Fatalf("recovery %+v", o)
		}
		if want := (s.ms >= 3600 && s.ms < 10000) || (s.ms >= 12000 && s.ms < 13000); d.Down() != want {
			t.Fatalf("at %d ms: Down = %v, want %v", s.ms, d.Down(), want)
		}
	}
}
