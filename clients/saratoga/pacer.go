package saratoga

import "time"

// WireOverhead is the per-frame IPv4 + UDP header size counted against the
// configured rate (link-layer framing is not counted).
const WireOverhead = 20 + 8

// DefaultBurst is the default token-bucket depth, in time at the
// configured rate: how much sending time lost to scheduling delays the
// sender may make up with a burst.
const DefaultBurst = 100 * time.Millisecond

// pacer is a token bucket in bits. The sender has no congestion control:
// it transmits at exactly this rate, and the bucket depth only absorbs
// timer oversleep so the long-run rate holds.
type pacer struct {
	rate   float64 // bits per second
	burst  float64 // bucket depth in bits
	tokens float64
	last   time.Time
	// stalled accumulates credit lost to the bucket cap while a frame
	// was waiting: time the host did not run the sender when it should
	// have (CPU contention), which lowers the achieved rate.
	stalled time.Duration
}

// refill adds credit for the time since the last call. busy says a frame
// was waiting all along, so credit beyond the cap counts as a stall.
func (p *pacer) refill(now time.Time, busy bool) {
	t := p.tokens + now.Sub(p.last).Seconds()*p.rate
	if t > p.burst {
		if busy {
			p.stalled += time.Duration((t - p.burst) / p.rate * float64(time.Second))
		}
		t = p.burst
	}
	p.tokens, p.last = t, now
}

func newPacer(rateBPS int64, frameBytes int, depth time.Duration, now time.Time) *pacer {
	r := float64(rateBPS)
	// Credit for depth (at least 4 frames) lets the sender catch up after
	// the scheduler delays it, so the long-run rate holds on a loaded host.
	// On an idle host credit never builds up and frames leave evenly
	// spaced; the worst burst at the default (100 KB at 8 Mbit/s) is inside
	// the 128 KB cburst of the test bed's HTB link.
	burst := max(4*float64(frameBytes+WireOverhead)*8, r*depth.Seconds())
	return &pacer{rate: r, burst: burst, tokens: float64(frameBytes+WireOverhead) * 8, last: now}
}

// delay refills the bucket and returns how long to wait before a frame of
// n UDP payload bytes may be sent.
func (p *pacer) delay(n int, now time.Time) time.Duration {
	p.refill(now, true)
	need := float64(n+WireOverhead) * 8
	if p.tokens >= need {
		return 0
	}
	return time.Duration((need - p.tokens) / p.rate * float64(time.Second))
}

// consume charges a sent frame of n UDP payload bytes.
func (p *pacer) consume(n int) {
	p.tokens -= float64(n+WireOverhead) * 8
}
