package link

import (
	"math/rand/v2"
	"time"
)

// Cause says why a frame was dropped.
type Cause int

// Drop causes. None means the frame is delivered.
const (
	None Cause = iota
	DropQueue
	DropBER
	DropLoss
	DropGE
	DropOutage
	numCauses
)

// NumCauses is the number of drop causes including None (for counter arrays).
const NumCauses = int(numCauses)

var causeNames = [...]string{"none", "queue", "ber", "loss", "gilbert_elliott", "outage"}

func (c Cause) String() string { return causeNames[c] }

// Params are the static parameters of one direction.
type Params struct {
	RateBps, CeilBps float64 // RateBps 0 = unshaped; CeilBps >= RateBps
	Burst, CBurst    int     // effective bucket sizes in bytes
	Delay            time.Duration
	BER              float64
	Loss             float64 // netem's loss: per frame, independent of size and of other frames
	QueuePackets     int     // 0 = no packet limit
	QueueBytes       int     // 0 = no byte limit
	GE               *GE
	Outage           *Outage
	Profile          *Profile
}

// HighestRate is the fastest the link is configured to send, its
// profile's steps included (ceil over rate); 0 when it is unshaped at any
// time. Live changes through the control socket are not foreseen.
func (p Params) HighestRate() float64 {
	if p.RateBps == 0 {
		return 0
	}
	top := max(p.RateBps, p.CeilBps)
	if r, ok := p.Profile.MaxRate(); ok {
		top = max(top, r)
	}
	return top
}

// Verdict is the fate of one arriving frame.
type Verdict struct {
	Cause  Cause
	Exit   time.Duration // when it left the shaper (onto the channel)
	Depart time.Duration // when it leaves the emulator (Cause == None)
	Seq    uint64        // numbers the delivered frames in order (Cause == None), for Moved
}

// Moved receives a queued, delivered frame's new departure after a live
// change (SetParams) re-timed the queue; seq is its Verdict.Seq.
type Moved func(seq uint64, depart time.Duration)

// Counters are cumulative per-direction figures kept by the pipeline.
type Counters struct {
	FramesIn, BytesIn uint64
	Drops             [NumCauses]uint64
	QueueHWPackets    int
	QueueHWBytes      int
}

// qent is a frame that has not yet started its transmission, with what a
// live change needs to schedule it again: its arrival, its fate, and the
// shaper and departure state it was admitted from.
type qent struct {
	exit       time.Duration
	size       int
	arrival    time.Duration
	delivered  bool
	seq        uint64
	prevExit   time.Duration // lastExit before this frame
	prevDepart time.Duration // lastDepart before this frame
	sh         Shaper        // the shaper before this frame started
	rate       float64       // rateNow before this frame started
}

// Pipeline is one direction: drop-tail queue -> shaper -> channel errors ->
// delay. It is not safe for concurrent use.
//
// The queue and shaper are computed in virtual time: since the queue is FIFO
// and the shaper deterministic, a frame's shaper exit time is known when it
// arrives, and the frames "in the queue" at time t are exactly those that
// arrived but have exit time > t. A frame is serialised at the rate in force
// when it starts (its exit): a profile's rate is known ahead, so the exit
// accounts for it; a live change (SetParams) schedules the queued frames
// again. Channel errors and delay are evaluated at the exit time.
type Pipeline struct {
	p          Params
	sh         *Shaper
	rateNow    float64
	q          []qent // ring of frames not yet through the shaper
	qHead, qN  int
	qBytes     int
	lastExit   time.Duration
	lastDepart time.Duration
	seq        uint64 // Verdict.Seq of the next delivered frame
	stale      bool   // p changed: the shaper takes it at the next start
	rng        *rand.Rand
	ge         GEState
	c          Counters
	// The outage and profile schedules run on their own clock: from origin
	// on, and not at all while held (the link keeps its base parameters).
	origin time.Duration
	held   bool
}

// NewPipeline builds a pipeline; seed and stream select the PRNG sequence.
func NewPipeline(p Params, seed, stream uint64) *Pipeline {
	pl := &Pipeline{
		p:   p,
		sh:  NewShaper(p.RateBps, p.CeilBps, p.Burst, p.CBurst),
		rng: rand.New(rand.NewPCG(seed, stream)),
		q:   make([]qent, 64),
	}
	pl.rateNow = p.RateBps
	return pl
}

// Params returns the parameters in force.
func (pl *Pipeline) Params() Params { return pl.p }

// SetParams replaces the parameters at now (not before the last arrival).
// The shaper takes them when the next frame starts its transmission: the
// frame on the wire finishes at the old rate, and the frames still queued
// are scheduled again behind it, in order, keeping the channel fate drawn on
// arrival; moved (may be nil) gets each delivered one's new departure.
// Token levels and the Gilbert-Elliott state carry over.
func (pl *Pipeline) SetParams(now time.Duration, p Params, moved Moved) {
	pl.purge(now)
	if pl.qN > 0 {
		// Back to the state the first queued frame was admitted from.
		h := &pl.q[pl.qHead]
		*pl.sh, pl.rateNow, pl.lastExit, pl.lastDepart = h.sh, h.rate, h.prevExit, h.prevDepart
	}
	pl.p = p
	pl.stale = true
	for i := 0; i < pl.qN; i++ {
		e := &pl.q[(pl.qHead+i)%len(pl.q)]
		e.sh, e.rate, e.prevExit, e.prevDepart = *pl.sh, pl.rateNow, pl.lastExit, pl.lastDepart
		e.exit = pl.admit(max(e.arrival, pl.lastExit), e.size)
		pl.lastExit = e.exit
		if e.delivered {
			pl.lastDepart = max(e.exit+pl.Effective(e.exit).Delay, pl.lastDepart)
			if moved != nil {
				moved(e.seq, pl.lastDepart)
			}
		}
	}
}

// setRate puts the shaper at rate r (bit/s); a profile rate raises the
// ceiling with it.
func (pl *Pipeline) setRate(r float64) {
	pl.rateNow = r
	pl.sh.Set(r, max(r, pl.p.CeilBps), pl.p.Burst, pl.p.CBurst)
}

// admit returns when a frame of size bytes ready at ready starts its
// transmission, and charges it at the rate in force at that moment: a rate
// step while it waits applies to it, not to the frame before.
func (pl *Pipeline) admit(ready time.Duration, size int) time.Duration {
	start := pl.sh.Start(ready)
	if r := pl.rateAt(start); r != pl.rateNow || pl.stale {
		pl.setRate(r)
		pl.stale = false
	}
	pl.sh.Charge(size)
	return start
}

// PeakRate is the fastest the shaper sends at the moment (its ceiling at the
// rate in force, bit/s); 0 when the link is unshaped.
func (pl *Pipeline) PeakRate() float64 {
	if pl.rateNow == 0 {
		return 0
	}
	return max(pl.rateNow, pl.p.CeilBps)
}

// Counters returns a copy of the counters.
func (pl *Pipeline) Counters() Counters { return pl.c }

// QueueLen purges frames that left the shaper by now and returns the queue
// occupancy.
func (pl *Pipeline) QueueLen(now time.Duration) (packets, bytes int) {
	pl.purge(now)
	return pl.qN, pl.qBytes
}

// Conditions are the link values in force at one moment.
type Conditions struct {
	Rate  float64 // bit/s, 0 = unshaped
	Delay time.Duration
	BER   float64
	Loss  float64
	Up    bool
}

// Effective returns the conditions in force at t, with the profile applied.
func (pl *Pipeline) Effective(t time.Duration) Conditions {
	c := Conditions{Rate: pl.p.RateBps, Delay: pl.p.Delay, BER: pl.p.BER, Loss: pl.p.Loss, Up: true}
	if pl.held {
		return c
	}
	c.Rate = pl.rateAt(t)
	t -= pl.origin
	if d, ok := pl.p.Profile.Delay(t); ok {
		c.Delay = d
	}
	if b, ok := pl.p.Profile.BER(t); ok {
		c.BER = b
	}
	if l, ok := pl.p.Profile.Loss(t); ok {
		c.Loss = l
	}
	c.Up = pl.p.Profile.Up(t) && !pl.p.Outage.IsDown(t)
	return c
}

// rateAt is the shaping rate in force at t: the profile's, on the same
// schedule clock as its other columns (from origin, not while held), else
// the configured one.
func (pl *Pipeline) rateAt(t time.Duration) float64 {
	if !pl.held {
		if r, ok := pl.p.Profile.Rate(t - pl.origin); ok {
			return r
		}
	}
	return pl.p.RateBps
}

// HoldSchedules stops the outage and profile schedules until
// StartSchedules: a testbed being built must not meet an outage.
func (pl *Pipeline) HoldSchedules() { pl.held = true }

// StartSchedules runs the outage and profile schedules from t on, so their
// offsets count from that moment (the transfer's start).
func (pl *Pipeline) StartSchedules(t time.Duration) { pl.origin, pl.held = t, false }

func (pl *Pipeline) purge(now time.Duration) {
	for pl.qN > 0 && pl.q[pl.qHead].exit <= now {
		pl.qBytes -= pl.q[pl.qHead].size
		pl.qHead = (pl.qHead + 1) % len(pl.q)
		pl.qN--
	}
}

// push appends e and returns its slot, valid until the next push.
func (pl *Pipeline) push(e qent) *qent {
	if pl.qN == len(pl.q) {
		nq := make([]qent, 2*len(pl.q))
		for i := 0; i < pl.qN; i++ {
			nq[i] = pl.q[(pl.qHead+i)%len(pl.q)]
		}
		pl.q, pl.qHead = nq, 0
	}
	slot := &pl.q[(pl.qHead+pl.qN)%len(pl.q)]
	*slot = e
	pl.qN++
	pl.qBytes += e.size
	return slot
}

// Arrive processes a frame of size bytes arriving at now (non-decreasing
// across calls) and returns its fate.
func (pl *Pipeline) Arrive(now time.Duration, size int) Verdict {
	pl.c.FramesIn++
	pl.c.BytesIn += uint64(size)
	pl.purge(now)
	if (pl.p.QueuePackets > 0 && pl.qN >= pl.p.QueuePackets) ||
		(pl.p.QueueBytes > 0 && pl.qBytes+size > pl.p.QueueBytes) {
		pl.c.Drops[DropQueue]++
		return Verdict{Cause: DropQueue, Exit: now}
	}
	e := qent{size: size, arrival: now, prevExit: pl.lastExit, prevDepart: pl.lastDepart, sh: *pl.sh, rate: pl.rateNow}
	exit := pl.admit(max(now, pl.lastExit), size)
	pl.lastExit = exit
	var queued *qent
	if exit > now {
		e.exit = exit
		queued = pl.push(e)
		pl.c.QueueHWPackets = max(pl.c.QueueHWPackets, pl.qN)
		pl.c.QueueHWBytes = max(pl.c.QueueHWBytes, pl.qBytes)
	}
	c := pl.Effective(exit)
	v := Verdict{Exit: exit}
	// A model draws only when enabled, so a configuration without loss
	// repeats, draw for draw, the drops it had before loss existed. Loss
	// comes before BER as netem drops before it corrupts; the draws are
	// independent, so a frame is lost with 1-(1-loss)(1-PER) in either order.
	switch {
	case !c.Up:
		v.Cause = DropOutage
	case pl.p.GE != nil && pl.ge.Step(pl.p.GE, pl.rng, size):
		v.Cause = DropGE
	case c.Loss > 0 && pl.rng.Float64() < c.Loss:
		v.Cause = DropLoss
	case c.BER > 0 && pl.rng.Float64() < PER(c.BER, size):
		v.Cause = DropBER
	}
	if v.Cause != None {
		pl.c.Drops[v.Cause]++
		return v
	}
	// Never reorder: a delay decrease makes later frames wait for earlier ones.
	v.Depart = max(exit+c.Delay, pl.lastDepart)
	pl.lastDepart = v.Depart
	v.Seq = pl.seq
	pl.seq++
	if queued != nil {
		queued.delivered, queued.seq = true, v.Seq
	}
	return v
}
