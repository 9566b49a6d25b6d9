// Package link holds the per-direction stages of the satellite link model:
// drop-tail queue, HTB-like shaper, channel errors (BER, Gilbert-Elliott,
// outages, profile) and propagation delay. Every stage is driven by an
// explicit time argument (time since emulator start), so tests run on a fake
// clock and the runtime only supplies "now".
package link

import (
	"math"
	"time"
)

// DefaultMTU is the "mtu" term tc adds to a default HTB burst (tc uses 1600).
const DefaultMTU = 1600

// PschedHz is the value tc's get_hz() returns on kernels with high-resolution
// timers (/proc/net/psched reports 1000000 / 1000000000), so the tc default
// burst rate/hz + mtu is effectively mtu for any realistic rate.
const PschedHz = 1_000_000_000

// DefaultBurst returns the bucket depth tc computes for HTB when burst (for
// rate) or cburst (for ceil) is not given: bytes-per-second / hz + mtu.
func DefaultBurst(bps float64) int {
	return int(bps/8/PschedHz) + DefaultMTU
}

// Shaper is a two-bucket shaper with HTB charging rules: a frame may start
// when both buckets hold a non-negative number of tokens; its whole length is
// then charged to both, possibly driving them negative.
//
//   - peak bucket: fills at ceil, depth = burst. Caps the peak rate at ceil
//     (burst bytes may still leave back-to-back).
//   - sustained bucket: fills at rate, depth E chosen so that, starting from
//     idle, cburst bytes in total leave at ceil before the output settles at
//     rate: E = cburst*(1-rate/ceil) + burst*rate/ceil (E = burst when
//     ceil == rate, i.e. a plain token bucket).
//
// A zero rate means unshaped.
type Shaper struct {
	rate, ceil     float64 // bytes per nanosecond
	sDepth, pDepth float64 // bytes
	s, p           float64 // tokens (bytes)
	last           time.Duration
}

// NewShaper builds a shaper that starts idle (both buckets full).
func NewShaper(rateBps, ceilBps float64, burst, cburst int) *Shaper {
	sh := &Shaper{}
	sh.Set(rateBps, ceilBps, burst, cburst)
	sh.s, sh.p = sh.sDepth, sh.pDepth
	return sh
}

// SustainedDepth returns the sustained bucket depth in bytes for the mapping
// documented on Shaper.
func SustainedDepth(rateBps, ceilBps float64, burst, cburst int) float64 {
	if ceilBps <= rateBps || ceilBps == 0 {
		return float64(burst)
	}
	f := rateBps / ceilBps
	return float64(cburst)*(1-f) + float64(burst)*f
}

// Set changes the parameters, keeping the current token levels (clamped to
// the new depths) so a change does not grant a fresh burst.
func (sh *Shaper) Set(rateBps, ceilBps float64, burst, cburst int) {
	if ceilBps < rateBps {
		ceilBps = rateBps
	}
	sh.rate = rateBps / 8 / 1e9
	sh.ceil = ceilBps / 8 / 1e9
	sh.pDepth = float64(burst)
	sh.sDepth = SustainedDepth(rateBps, ceilBps, burst, cburst)
	sh.s = math.Min(sh.s, sh.sDepth)
	sh.p = math.Min(sh.p, sh.pDepth)
}

// Unshaped reports whether the shaper lets everything through immediately.
func (sh *Shaper) Unshaped() bool { return sh.rate == 0 }

func (sh *Shaper) advance(t time.Duration) {
	if t <= sh.last {
		return
	}
	dt := float64(t - sh.last)
	sh.s = math.Min(sh.sDepth, sh.s+sh.rate*dt)
	sh.p = math.Min(sh.pDepth, sh.p+sh.ceil*dt)
	sh.last = t
}

// Admit returns the earliest time >= ready at which a frame of length bytes
// may leave, and charges it. Calls must use non-decreasing ready times.
func (sh *Shaper) Admit(ready time.Duration, length int) time.Duration {
	start := sh.Start(ready)
	sh.Charge(length)
	return start
}

// Start returns the earliest time >= ready at which the next frame may
// leave, with the buckets filled up to that moment at the rates in force.
// It charges nothing, so the caller may change the rate between Start and
// Charge: a frame is then serialised at the rate in force when it starts.
func (sh *Shaper) Start(ready time.Duration) time.Duration {
	if sh.rate == 0 {
		return ready
	}
	sh.advance(ready)
	// The buckets may already stand later than ready (after a live change
	// brought them to that moment); waiting counts from there.
	start := max(ready, sh.last)
	if sh.s < 0 || sh.p < 0 {
		var wait float64
		if sh.s < 0 {
			wait = -sh.s / sh.rate
		}
		if sh.p < 0 {
			wait = math.Max(wait, -sh.p/sh.ceil)
		}
		start += time.Duration(math.Ceil(wait))
		sh.advance(start)
		// Rounding to whole nanoseconds may leave a tiny negative residue.
		sh.s = math.Max(sh.s, 0)
		sh.p = math.Max(sh.p, 0)
	}
	return start
}

// Charge debits a frame of length bytes that starts now (at the last Start).
func (sh *Shaper) Charge(length int) {
	if sh.rate == 0 {
		return
	}
	sh.s -= float64(length)
	sh.p -= float64(length)
}
