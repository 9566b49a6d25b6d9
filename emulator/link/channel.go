package link

import (
	"math"
	"math/rand/v2"
	"time"
)

// PER is the probability that a frame of the given size carries at least one
// bit error at the given bit-error rate: 1-(1-ber)^(8*bytes). A corrupt frame
// fails the receiver's FCS check, so it is dropped whole.
func PER(ber float64, bytes int) float64 {
	if ber <= 0 {
		return 0
	}
	if ber >= 1 {
		return 1
	}
	// expm1/log1p keep precision for tiny BERs (1e-9 * 12000 bits).
	return -math.Expm1(float64(8*bytes) * math.Log1p(-ber))
}

// GE holds Gilbert-Elliott parameters: P is the per-frame probability of
// moving good->bad, R of moving bad->good. In each state a frame is lost with
// probability 1-(1-Loss)*(1-PER(BER, size)).
type GE struct {
	P, R              float64
	BERGood, BERBad   float64
	LossGood, LossBad float64
}

// GEState is the two-state Markov chain, stepped once per frame that reaches
// the channel.
type GEState struct {
	Bad bool
}

// Step advances the chain by one frame and reports whether that frame is lost.
func (s *GEState) Step(g *GE, rng *rand.Rand, bytes int) bool {
	if s.Bad {
		if rng.Float64() < g.R {
			s.Bad = false
		}
	} else if rng.Float64() < g.P {
		s.Bad = true
	}
	ber, loss := g.BERGood, g.LossGood
	if s.Bad {
		ber, loss = g.BERBad, g.LossBad
	}
	pl := 1 - (1-loss)*(1-PER(ber, bytes))
	return pl > 0 && rng.Float64() < pl
}

// Outage is a periodic schedule: the link is down when
// (t - Offset) mod Period lies in [0, Down). t is time since emulator start.
type Outage struct {
	Period, Down, Offset time.Duration
}

// IsDown reports whether the link is down at time t.
func (o *Outage) IsDown(t time.Duration) bool {
	if o == nil || o.Period <= 0 || o.Down <= 0 {
		return false
	}
	ph := (t - o.Offset) % o.Period
	if ph < 0 {
		ph += o.Period
	}
	return ph < o.Down
}
