// Package access makes pepd behave as the satellite access node of the
// ACK-reservation study (seed 003, MISSION.md 2c) for the data flowing from
// the LAN into the satellite link: a bounded per-connection buffer of B
// packets, ACK reservation above K·B, and outage detection on the WAN leg.
//
// What counts as the buffer: every byte the source has been told is
// received (the kernel ACKed it) but the far end has not yet acknowledged:
// the LAN socket's receive queue, the relay's splice pipe and the WAN
// socket's send queue (unsent plus unacknowledged). pepd cannot stop the
// kernel from acknowledging what it accepts, so it bounds what the kernel
// may accept: the LAN socket's advertised window is clamped
// (TCP_WINDOW_CLAMP, shrinkable mid-stream since Linux 6.7) to the free
// space B − occupancy, and the relay stops reading the LAN socket while the
// buffer is full, so no window update is sent either. The kernel never
// retracts a window it has advertised, so the source never sees a window
// violation and nothing is dropped; the bound can be exceeded by at most
// the clamp's floor (the kernel's smallest window, about one segment).
//
// ACK reservation (K > 0): once the occupancy reaches K·B no new window
// credit is given — the acknowledgements that would open the source's
// window are held back — until the occupancy falls below K·B again, i.e.
// until the satellite side drains (after an outage: as soon as the link is
// back). Then all the credit held back, B − occupancy, is released in one
// window update, so the source's window reopens at once by (1−K)·B.
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

// Decision is what the policy wants done with the LAN leg right now.
type Decision struct {
	LanAllow  int64 // bytes the LAN side may hold: its receive queue plus the window still open to the source
	Credit    int64 // LanAllow minus the receive queue: the window the source may have beyond what pepd holds
	Read      bool  // whether the relay may read the LAN socket now
	Reserving bool  // ACK reservation in force (credit held back)
}

// Decide applies the policy. inq is what waits in the LAN socket's receive
// queue, wanSide what the relay's pipe and the WAN socket's send queue
// hold; the occupancy is their sum. prev is the previous decision, with
// its LanAllow reduced by what the relay has read since.
//
// Without reservation the LAN side may hold B minus the WAN side, so
// occupancy plus open window never exceed B. With it, once the occupancy
// reaches K·B the LAN side's allowance stops growing (what the WAN side
// drains is not handed back to the source: those are the ACKs held back)
// and shrinks with every read, until the occupancy falls below K·B; then
// the allowance returns to B minus the WAN side in one step, which the
// kernel advertises as one window update (the burst of held ACKs).
//
// Reading the LAN socket frees receive memory the kernel would offer as
// window; the relay's gate (Conn.Allow) shrinks the buffer by as much
// before each read, so reads move bytes without creating credit. Reads
// are allowed while the WAN side needs feeding: below B, and while
// reserving below K·B (during an outage the WAN side stays full, so
// nothing is read).
func (c Config) Decide(inq, wanSide int64, prev Decision) Decision {
	limit := c.Limit()
	occupancy := inq + wanSide
	d := Decision{LanAllow: max(limit-wanSide, 0), Read: wanSide < limit}
	if c.Reserve > 0 {
		threshold := int64(math.Ceil(c.Reserve * float64(limit)))
		if occupancy >= threshold {
			d.Reserving = true
			d.LanAllow = min(d.LanAllow, max(prev.LanAllow, inq))
			d.Read = wanSide < threshold
		}
	}
	d.Credit = max(d.LanAllow-inq, 0)
	return d
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
