// Package config reads and validates satemu's JSON configuration and turns
// it into link.Params.
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"time"

	"satbed/emulator/link"
)

// DefaultQueuePackets matches the pfifo limit HTB leaves get from
// txqueuelen 1000.
const DefaultQueuePackets = 1000

// DefaultSampleMs is the time-series sampling period when sample_ms is unset.
const DefaultSampleMs = 100

const maxBucketBytes = 1 << 30

// Config is the whole file. Pointer fields distinguish "absent" from zero.
type Config struct {
	Seed     *uint64 `json:"seed,omitempty"`
	SampleMs *int    `json:"sample_ms,omitempty"`
	// Clock says when outage and profile schedules start: "start" (or
	// empty) when satemu starts, "control" when the control socket's
	// {"op":"clock"} says so (a testbed starts it as the transfer begins).
	Clock string    `json:"clock,omitempty"`
	AToB  Direction `json:"a_to_b"`
	BToA  Direction `json:"b_to_a"`
}

// Direction is one direction as written by the user.
type Direction struct {
	RateBps        *float64 `json:"rate_bps,omitempty"`
	CeilBps        *float64 `json:"ceil_bps,omitempty"`
	BurstBytes     int      `json:"burst_bytes,omitempty"`
	CBurstBytes    int      `json:"cburst_bytes,omitempty"`
	DelayMs        float64  `json:"delay_ms"`
	BER            float64  `json:"ber"`
	Loss           float64  `json:"loss"` // per packet, whatever its size (netem's loss as a fraction)
	QueuePackets   *int     `json:"queue_packets,omitempty"`
	QueueBytes     int      `json:"queue_bytes,omitempty"`
	GilbertElliott *GE      `json:"gilbert_elliott"`
	Outage         *Outage  `json:"outage"`
	Profile        string   `json:"profile,omitempty"`
}

// GE is the Gilbert-Elliott block.
type GE struct {
	P        float64 `json:"p"`
	R        float64 `json:"r"`
	BERGood  float64 `json:"ber_good"`
	BERBad   float64 `json:"ber_bad"`
	LossGood float64 `json:"loss_good"`
	LossBad  float64 `json:"loss_bad"`
}

// Outage is the periodic outage block.
type Outage struct {
	PeriodS float64 `json:"period_s"`
	DownS   float64 `json:"down_s"`
	OffsetS float64 `json:"offset_s"`
}

// Effective is a direction with every default resolved, as it is applied.
type Effective struct {
	RateBps        float64 `json:"rate_bps"` // 0 = unshaped
	CeilBps        float64 `json:"ceil_bps"`
	BurstBytes     int     `json:"burst_bytes"`
	CBurstBytes    int     `json:"cburst_bytes"`
	SustainedBytes float64 `json:"sustained_bucket_bytes"`
	DelayMs        float64 `json:"delay_ms"`
	BER            float64 `json:"ber"`
	Loss           float64 `json:"loss"`
	QueuePackets   int     `json:"queue_packets"`
	QueueBytes     int     `json:"queue_bytes"`
	GilbertElliott *GE     `json:"gilbert_elliott"`
	Outage         *Outage `json:"outage"`
	Profile        string  `json:"profile"`
}

// Decode parses a configuration strictly (unknown keys rejected) without
// validating it.
func Decode(data []byte) (*Config, error) {
	var c Config
	if err := strictUnmarshal(data, &c); err != nil {
		return nil, err
	}
	return &c, nil
}

// strictUnmarshal decodes one JSON value into v (merging into what v holds),
// refusing unknown keys and trailing data.
func strictUnmarshal(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("json: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("json: trailing data after object")
	}
	return nil
}

// Load reads, decodes and validates a configuration file. Relative profile
// paths are resolved against the file's directory.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c, err := Decode(data)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	dir := filepath.Dir(path)
	for _, d := range []*Direction{&c.AToB, &c.BToA} {
		if d.Profile != "" && !filepath.IsAbs(d.Profile) {
			d.Profile = filepath.Join(dir, d.Profile)
		}
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// Validate checks the global fields and both directions (loading profiles).
func (c *Config) Validate() error {
	if c.Clock != "" && c.Clock != "start" && c.Clock != "control" {
		return fmt.Errorf("clock %q: want start or control", c.Clock)
	}
	if c.SampleMs != nil && (*c.SampleMs < 1 || *c.SampleMs > 3_600_000) {
		return fmt.Errorf("sample_ms %d outside [1,3600000]", *c.SampleMs)
	}
	if _, err := c.AToB.Params(); err != nil {
		return fmt.Errorf("a_to_b: %w", err)
	}
	if _, err := c.BToA.Params(); err != nil {
		return fmt.Errorf("b_to_a: %w", err)
	}
	return nil
}

// Sample returns the sampling period.
func (c *Config) Sample() time.Duration {
	if c.SampleMs == nil {
		return DefaultSampleMs * time.Millisecond
	}
	return time.Duration(*c.SampleMs) * time.Millisecond
}

// Merge applies a partial direction (JSON object) on top of d and returns
// the result; d is not modified. Present keys replace values, null clears
// optional blocks, unknown keys are refused.
func Merge(d Direction, partial []byte) (Direction, error) {
	// Unmarshal writes through existing pointers, so give out its own copies.
	out := d
	out.RateBps = clonePtr(d.RateBps)
	out.CeilBps = clonePtr(d.CeilBps)
	out.QueuePackets = clonePtr(d.QueuePackets)
	out.GilbertElliott = clonePtr(d.GilbertElliott)
	out.Outage = clonePtr(d.Outage)
	if err := strictUnmarshal(partial, &out); err != nil {
		return d, err
	}
	return out, nil
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

func unit(name string, v float64, closed bool) error {
	if math.IsNaN(v) || v < 0 || v > 1 || (!closed && v == 1) {
		if closed {
			return fmt.Errorf("%s %v outside [0,1]", name, v)
		}
		return fmt.Errorf("%s %v outside [0,1)", name, v)
	}
	return nil
}

// Effective resolves defaults and validates the direction.
func (d Direction) Effective() (Effective, error) {
	var e Effective
	if d.RateBps != nil {
		if !(*d.RateBps > 0 && *d.RateBps <= link.MaxRateBps) {
			return e, fmt.Errorf("rate_bps %v must be > 0 and <= %g (omit it for an unshaped link)", *d.RateBps, link.MaxRateBps)
		}
		e.RateBps = *d.RateBps
		e.CeilBps = e.RateBps
	}
	if d.CeilBps != nil {
		if d.RateBps == nil {
			return e, errors.New("ceil_bps given without rate_bps")
		}
		if !(*d.CeilBps <= link.MaxRateBps) || *d.CeilBps < e.RateBps {
			return e, fmt.Errorf("ceil_bps %v must be >= rate_bps %v and <= %g", *d.CeilBps, e.RateBps, link.MaxRateBps)
		}
		e.CeilBps = *d.CeilBps
	}
	if d.BurstBytes < 0 || d.BurstBytes > maxBucketBytes || d.CBurstBytes < 0 || d.CBurstBytes > maxBucketBytes {
		return e, fmt.Errorf("burst_bytes/cburst_bytes must be in [0,%d]", maxBucketBytes)
	}
	e.BurstBytes, e.CBurstBytes = d.BurstBytes, d.CBurstBytes
	if e.BurstBytes == 0 {
		e.BurstBytes = link.DefaultBurst(e.RateBps)
	}
	if e.CBurstBytes == 0 {
		e.CBurstBytes = link.DefaultBurst(e.CeilBps)
	}
	if e.RateBps > 0 {
		e.SustainedBytes = link.SustainedDepth(e.RateBps, e.CeilBps, e.BurstBytes, e.CBurstBytes)
	}
	if math.IsNaN(d.DelayMs) || d.DelayMs < 0 || d.DelayMs > link.MaxDelayMs {
		return e, fmt.Errorf("delay_ms %v outside [0,%d]", d.DelayMs, link.MaxDelayMs)
	}
	e.DelayMs = d.DelayMs
	if err := unit("ber", d.BER, false); err != nil {
		return e, err
	}
	e.BER = d.BER
	if err := unit("loss", d.Loss, false); err != nil {
		return e, err
	}
	e.Loss = d.Loss
	e.QueuePackets = DefaultQueuePackets
	if d.QueuePackets != nil {
		e.QueuePackets = *d.QueuePackets
	}
	e.QueueBytes = d.QueueBytes
	if e.QueuePackets < 0 || e.QueueBytes < 0 || e.QueuePackets > 1<<24 || e.QueueBytes > maxBucketBytes {
		return e, errors.New("queue_packets/queue_bytes out of range")
	}
	if e.QueuePackets == 0 && e.QueueBytes == 0 {
		return e, errors.New("queue_packets and queue_bytes are both 0: the queue would be unbounded")
	}
	if g := d.GilbertElliott; g != nil {
		for _, c := range []struct {
			n      string
			v      float64
			closed bool
		}{{"gilbert_elliott.p", g.P, true}, {"gilbert_elliott.r", g.R, true},
			{"gilbert_elliott.ber_good", g.BERGood, false}, {"gilbert_elliott.ber_bad", g.BERBad, false},
			{"gilbert_elliott.loss_good", g.LossGood, true}, {"gilbert_elliott.loss_bad", g.LossBad, true}} {
			if err := unit(c.n, c.v, c.closed); err != nil {
				return e, err
			}
		}
		g2 := *g
		e.GilbertElliott = &g2
	}
	if o := d.Outage; o != nil {
		if !(o.PeriodS > 0 && o.PeriodS <= link.MaxTimeSecs) {
			return e, fmt.Errorf("outage.period_s %v must be in (0,%g]", o.PeriodS, link.MaxTimeSecs)
		}
		if !(o.DownS >= 0 && o.DownS <= o.PeriodS) {
			return e, fmt.Errorf("outage.down_s %v must be in [0,period_s]", o.DownS)
		}
		if !(o.OffsetS >= 0 && o.OffsetS <= link.MaxTimeSecs) {
			return e, fmt.Errorf("outage.offset_s %v must be in [0,%g]", o.OffsetS, link.MaxTimeSecs)
		}
		o2 := *o
		e.Outage = &o2
	}
	e.Profile = d.Profile
	return e, nil
}

func secs(s float64) time.Duration { return time.Duration(math.Round(s * 1e9)) }

// Params validates the direction, loads its profile and returns the
// pipeline parameters plus the effective view.
func (d Direction) Params() (link.Params, error) {
	e, err := d.Effective()
	if err != nil {
		return link.Params{}, err
	}
	p := link.Params{
		RateBps: e.RateBps, CeilBps: e.CeilBps,
		Burst: e.BurstBytes, CBurst: e.CBurstBytes,
		Delay:        time.Duration(math.Round(e.DelayMs * 1e6)),
		BER:          e.BER,
		Loss:         e.Loss,
		QueuePackets: e.QueuePackets, QueueBytes: e.QueueBytes,
	}
	if g := e.GilbertElliott; g != nil {
		p.GE = &link.GE{P: g.P, R: g.R, BERGood: g.BERGood, BERBad: g.BERBad, LossGood: g.LossGood, LossBad: g.LossBad}
	}
	if o := e.Outage; o != nil && o.DownS > 0 {
		p.Outage = &link.Outage{Period: secs(o.PeriodS), Down: secs(o.DownS), Offset: secs(o.OffsetS)}
	}
	if e.Profile != "" {
		prof, err := link.LoadProfile(e.Profile)
		if err != nil {
			return link.Params{}, err
		}
		p.Profile = prof
	}
	return p, nil
}
