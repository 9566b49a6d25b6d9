package wanrate

import "time"

// burstTime is the token bucket's depth in time at the pacing rate: credit
// the sender may spend at once after the scheduler kept it waiting, so
// the long-run rate holds on a busy host (Saratoga's sender uses the same
// depth). 100 ms at 8 Mbit/s is 100 kB, inside the test bed's 128 kB HTB
// cburst; on an idle host credit never builds up and frames leave evenly.
const burstTime = 100 * time.Millisecond

// pacer is a token bucket in bits. There is no congestion window: the
// sender transmits whenever the bucket holds a full frame's credit.
type pacer struct {
	rate   float64 // bits per second
	burst  float64 // bits
	tokens float64
	last   time.Time
	frame  float64 // bits of the largest frame
}

func newPacer(rateBPS int64, frameBytes int, now time.Time) pacer {
	p := pacer{frame: float64(frameBytes) * 8, last: now}
	p.setRate(float64(rateBPS))
	p.tokens = p.frame
	return p
}

func (p *pacer) setRate(r float64) {
	p.rate = r
	p.burst = max(4*p.frame, r*burstTime.Seconds())
}

// wait refills the bucket and returns how long until bits may be sent.
func (p *pacer) wait(bits float64, now time.Time) time.Duration {
	p.tokens = min(p.burst, p.tokens+now.Sub(p.last).Seconds()*p.rate)
	p.last = now
	if p.tokens >= bits {
		return 0
	}
	return time.Duration((bits - p.tokens) / p.rate * float64(time.Second))
}

// resume ends a time in which the sender had nothing to send: idle time
// earns no credit beyond idleBurst frames. Credit is for a host that kept
// a backlogged sender waiting; after an application's pause (SSH waiting
// on its channel window) a full bucket would leave as a 100 ms burst
// that stands in the link's queue, and self-tuning reads that queue as
// a slower link.
func (p *pacer) resume(now time.Time) {
	p.wait(0, now)
	p.tokens = min(p.tokens, idleBurst*p.frame)
}

// idleBurst is the credit, in full frames, kept over an idle time.
const idleBurst = 4

// consume charges a sent frame.
func (p *pacer) consume(bits float64) { p.tokens -= bits }
