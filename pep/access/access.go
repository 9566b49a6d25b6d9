// Package access makes pepd behave as the satellite access node of the
// ACK-reservation study (docs/studies/ack-reservation.md) for the data flowing from
// the LAN into the satellite link: a bounded per-connection buffer of B
// packets, ACK reservation above K·B, and outage detection on the WAN leg.
//
// What counts as the buffer: every byte the source has been told is
// received (the kernel ACKed it) but the far end has not yet acknowledged:
// the LAN socket's receive queue, the relay's splice pipe and the WAN
// socket's send queue (unsent plus unacknowledged). pepd cannot stop the
// kernel from acknowledging what it accepts, so it bounds what the kernel
// may accept and what pepd moves on: the LAN socket gets a fixed receive
// buffer holding a share of B (LanShare, a quarter of B), which is what
// the kernel offers the source as window, and the relay reads it only
// while the WAN side (pipe + send queue) holds less than B minus that
// share. When the WAN side is full the receive buffer fills, the window
// closes, and it reopens as soon as pepd reads again. The kernel never
// drops a segment within a window it offered (the buffer is never shrunk)
// nor retracts a window, so the source sees no loss and no window
// violation.
//
// ACK reservation (K > 0): once the occupancy reaches K·B the relay stops
// reading until the occupancy falls below K·B again, so an outage finds
// only about K·B (plus the LAN share) in the buffer. When the WAN leg comes
// back (its first progress, or the leg's own link-back signal) the
// reservation is lifted for one round trip of the leg: the first read
// reopens the source's window by the reserved (1-K)·B and what the LAN
// share holds, in one update, half a satellite round trip before the
// buffer starts to drain, and the source keeps the buffer full while the
// resent data crosses. Then the bound returns from B to K·B over Settle,
// so that the source keeps sending near the link rate while the buffer
// works its way back down to K·B for the next outage.
package access

import (
	"fmt"
	"math"
	"time"
)

// DefaultSegment is the payload bytes per packet when B is converted to
// bytes and the WAN socket's MSS is not known (1500-byte IPv4 frames with
// TCP timestamps).
const DefaultSegment = 1448

// Config is the per-connection buffer policy; Packets 0 disables it.
type Config struct {
	Packets  int           // B: buffer capacity in packets
	Segment  int           // bytes per packet (0: DefaultSegment)
	Reserve  float64       // K: ACK-reservation threshold as a fraction of B (0: off)
	Tick     time.Duration // how often occupancy is measured and the window clamp updated
	Stall    time.Duration // WAN leg without ACK progress this long (data outstanding) = outage; 0: auto from the RTT
	TraceInt time.Duration // occupancy trace period (0: no trace)
}

// Enabled reports whether pepd bounds the buffer at all.
func (c Config) Enabled() bool { return c.Packets > 0 }

// Limit is B in bytes.
func (c Config) Limit() int64 {
	seg := c.Segment
	if seg <= 0 {
		seg = DefaultSegment
	}
	return int64(c.Packets) * int64(seg)
}

// Validate checks the combination of options.
func (c Config) Validate() error {
	if c.Packets < 0 || c.Packets > 1_000_000 {
		return fmt.Errorf("buffer_packets %d: want 0..1000000", c.Packets)
	}
	if math.IsNaN(c.Reserve) || c.Reserve < 0 || c.Reserve >= 1 {
		return fmt.Errorf("ack_reserve %v: want 0 (off) or a fraction in (0, 1)", c.Reserve)
	}
	if c.Reserve > 0 && c.Packets == 0 {
		return fmt.Errorf("ack_reserve needs buffer_packets (K is a fraction of the buffer B)")
	}
	return nil
}

// LanShare is the part of B the LAN socket's receive buffer holds: a
// quarter of B, at least 16 packets, at most B. It must exceed the
// terrestrial leg's bandwidth-delay product at the satellite rate (12.5
// packets in the study) or the source could not keep the buffer fed.
func (c Config) LanShare() int64 {
	seg := int64(c.Segment)
	if seg <= 0 {
		seg = DefaultSegment
	}
	return min(max(c.Limit()/4, 16*seg), c.Limit())
}

// Decision is what the policy wants done with the LAN leg right now.
type Decision struct {
	WanCap    int64 // the relay reads the LAN socket while the WAN side holds less than this
	Read      bool
	Reserving bool // ACK reservation in force
}

// Decide applies the policy. inq is what waits in the LAN socket's receive
// queue, wanSide what the relay's pipe and the WAN socket's send queue
// hold; the occupancy is their sum.
//
// Without reservation the WAN side may hold B minus the LAN share, so the
// occupancy stays within B. With it, from the moment the occupancy
// reaches K·B nothing is read until it falls below K·B (the reservation
// ends by itself when the satellite side drains: the occupancy is
// recomputed every tick). The WAN side never gets less than 4 packets
// of room, so a small K·B cannot stop the relay altogether.
//
// reserveAt is the occupancy at which the reservation holds the ACKs
// (K·B, more while it returns to K·B after an outage; 0: none).
func (c Config) Decide(inq, wanSide, reserveAt int64) Decision {
	limit := c.Limit()
	seg := int64(c.Segment)
	if seg <= 0 {
		seg = DefaultSegment
	}
	d := Decision{WanCap: max(limit-c.LanShare(), 4*seg)}
	if c.Reserve > 0 && reserveAt > 0 {
		if inq+wanSide >= reserveAt {
			d.Reserving = true
			d.WanCap = 0
		}
	}
	d.Read = wanSide < d.WanCap
	return d
}

// Threshold is K·B in bytes.
func (c Config) Threshold() int64 { return int64(math.Ceil(c.Reserve * float64(c.Limit()))) }

// Settle is how long the reservation's bound takes to return from B to
// K·B after an outage: at most (1-K)·B over 10 s, a few percent of the
// link rate for the study's B, so the restarted source is not held back.
const Settle = 10 * time.Second

// ReserveAt is the reservation's bound at time since the leg came back
// from an outage (back: the leg's round trip after it, B; then down to
// K·B over Settle); never back, K·B.
func (c Config) ReserveAt(since, rtt time.Duration, back bool) int64 {
	k := c.Threshold()
	switch {
	case c.Reserve <= 0:
		return 0
	case !back || since >= rtt+Settle:
		return k
	case since < rtt:
		return 0
	}
	f := float64(since-rtt) / float64(Settle)
	return c.Limit() - int64(f*float64(c.Limit()-k))
}

// StallAfter is the zero-progress time after which the WAN leg counts as
// down: the configured value, or else twice the smoothed RTT with a floor
// of 200 ms. An ACK-clocked sender at link rate receives ACKs every few
// milliseconds; a gap of two RTTs with data outstanding means nothing is
// getting through (a single lost segment is repaired within about one RTT
// by fast retransmit and SACK and does not stop cumulative progress for
// longer).
func (c Config) StallAfter(srtt time.Duration) time.Duration {
	if c.Stall > 0 {
		return c.Stall
	}
	return max(2*srtt, 200*time.Millisecond)
}

// Outage is one stall of the WAN leg as pepd saw it.
type Outage struct {
	LastProgress time.Time // the last ACK progress before the stall
	Detected     time.Time // when the zero-progress timer fired
	Recovered    time.Time // the first ACK progress after it (zero while still down)
}

// DetectorState follows the WAN leg's cumulative ACK progress.
type DetectorState struct {
	lastAcked    uint64
	lastProgress time.Time
	down         bool
	cur          Outage
}

// Observe feeds one sample: bytes acknowledged so far by the far end,
// bytes outstanding (unacknowledged or unsent) and the time. It returns
// a finished or newly detected outage, with started/ended saying which.
func (d *DetectorState) Observe(acked uint64, outstanding int64, now time.Time, stall time.Duration) (o Outage, started, ended bool) {
	if d.lastProgress.IsZero() {
		d.lastAcked, d.lastProgress = acked, now
		return Outage{}, false, false
	}
	if acked != d.lastAcked {
		d.lastAcked, d.lastProgress = acked, now
		if d.down {
			d.down = false
			d.cur.Recovered = now
			return d.cur, false, true
		}
		return Outage{}, false, false
	}
	if outstanding <= 0 {
		// Nothing to acknowledge: an idle leg is not a stalled one.
		d.lastProgress = now
		return Outage{}, false, false
	}
	if !d.down && now.Sub(d.lastProgress) >= stall {
		d.down = true
		d.cur = Outage{LastProgress: d.lastProgress, Detected: now}
		return d.cur, true, false
	}
	return Outage{}, false, false
}

// Down reports whether the leg is in a detected outage.
func (d *DetectorState) Down() bool { return d.down }
