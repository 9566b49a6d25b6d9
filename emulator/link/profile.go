package link

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// ProfilePoint sets some link parameters from time T (since emulator start)
// on. Nil fields leave the parameter as it was.
type ProfilePoint struct {
	T       time.Duration
	BER     *float64
	Loss    *float64
	DelayMs *float64
	RateBps *float64
	Up      *bool
}

// Profile is a step function of time: each parameter takes the value of the
// latest point at or before t that sets it; before that, the static
// configuration applies.
type Profile struct {
	ber, loss, delay, rate series
	up                     []stepBool
}

type stepF struct {
	t time.Duration
	v float64
}

type stepBool struct {
	t time.Duration
	v bool
}

type series []stepF

func (s series) at(t time.Duration) (float64, bool) {
	i := sort.Search(len(s), func(i int) bool { return s[i].t > t })
	if i == 0 {
		return 0, false
	}
	return s[i-1].v, true
}

// BER returns the profile's BER at t, if one is in force.
func (p *Profile) BER(t time.Duration) (float64, bool) {
	if p == nil {
		return 0, false
	}
	return p.ber.at(t)
}

// Loss returns the profile's per-packet loss probability at t, if one is in
// force.
func (p *Profile) Loss(t time.Duration) (float64, bool) {
	if p == nil {
		return 0, false
	}
	return p.loss.at(t)
}

// Delay returns the profile's one-way delay at t, if one is in force.
func (p *Profile) Delay(t time.Duration) (time.Duration, bool) {
	if p == nil {
		return 0, false
	}
	v, ok := p.delay.at(t)
	return time.Duration(v * 1e6), ok
}

// Rate returns the profile's shaping rate (bit/s) at t, if one is in force.
func (p *Profile) Rate(t time.Duration) (float64, bool) {
	if p == nil {
		return 0, false
	}
	return p.rate.at(t)
}

// MaxRate is the highest rate the profile sets (every one is above 0), if
// it sets any.
func (p *Profile) MaxRate() (float64, bool) {
	if p == nil || len(p.rate) == 0 {
		return 0, false
	}
	top := 0.0
	for _, s := range p.rate {
		top = max(top, s.v)
	}
	return top, true
}

// Up reports whether the profile has the link up at t (true when no point
// has set "up" yet).
func (p *Profile) Up(t time.Duration) bool {
	if p == nil {
		return true
	}
	i := sort.Search(len(p.up), func(i int) bool { return p.up[i].t > t })
	if i == 0 {
		return true
	}
	return p.up[i-1].v
}

// Limits on profile values, shared with the configuration validator.
const (
	MaxRateBps  = 1e12
	MaxDelayMs  = 3_600_000
	MaxTimeSecs = 1e7
)

// NewProfile validates points (time non-decreasing, values in range) and
// builds the lookup tables.
func NewProfile(points []ProfilePoint) (*Profile, error) {
	p := &Profile{}
	var prev time.Duration
	for i, pt := range points {
		if pt.T < 0 || (i > 0 && pt.T < prev) {
			return nil, fmt.Errorf("profile point %d: time must be >= 0 and non-decreasing", i+1)
		}
		prev = pt.T
		if pt.BER != nil {
			if !(*pt.BER >= 0 && *pt.BER < 1) {
				return nil, fmt.Errorf("profile point %d: ber %v outside [0,1)", i+1, *pt.BER)
			}
			p.ber = append(p.ber, stepF{pt.T, *pt.BER})
		}
		if pt.Loss != nil {
			if !(*pt.Loss >= 0 && *pt.Loss < 1) {
				return nil, fmt.Errorf("profile point %d: loss %v outside [0,1)", i+1, *pt.Loss)
			}
			p.loss = append(p.loss, stepF{pt.T, *pt.Loss})
		}
		if pt.DelayMs != nil {
			if !(*pt.DelayMs >= 0 && *pt.DelayMs <= MaxDelayMs) {
				return nil, fmt.Errorf("profile point %d: delay_ms %v outside [0,%d]", i+1, *pt.DelayMs, MaxDelayMs)
			}
			p.delay = append(p.delay, stepF{pt.T, *pt.DelayMs})
		}
		if pt.RateBps != nil {
			if !(*pt.RateBps > 0 && *pt.RateBps <= MaxRateBps) {
				return nil, fmt.Errorf("profile point %d: rate_bps %v outside (0,%g]", i+1, *pt.RateBps, MaxRateBps)
			}
			p.rate = append(p.rate, stepF{pt.T, *pt.RateBps})
		}
		if pt.Up != nil {
			p.up = append(p.up, stepBool{pt.T, *pt.Up})
		}
	}
	return p, nil
}

// LoadProfile reads a profile file: JSON if its first non-blank byte is '[',
// CSV otherwise.
func LoadProfile(path string) (*Profile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("profile: %w", err)
	}
	p, err := ParseProfile(data)
	if err != nil {
		return nil, fmt.Errorf("profile %s: %w", path, err)
	}
	return p, nil
}

// ParseProfile parses profile text (see LoadProfile).
func ParseProfile(data []byte) (*Profile, error) {
	trim := bytes.TrimSpace(data)
	if len(trim) > 0 && trim[0] == '[' {
		return parseProfileJSON(trim)
	}
	return parseProfileCSV(data)
}

type jsonPoint struct {
	TS      *float64 `json:"t_s"`
	BER     *float64 `json:"ber"`
	Loss    *float64 `json:"loss"`
	DelayMs *float64 `json:"delay_ms"`
	RateBps *float64 `json:"rate_bps"`
	Up      *bool    `json:"up"`
}

func parseProfileJSON(data []byte) (*Profile, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var raw []jsonPoint
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("json: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("json: trailing data after array")
	}
	pts := make([]ProfilePoint, 0, len(raw))
	for i, r := range raw {
		if r.TS == nil {
			return nil, fmt.Errorf("point %d: t_s missing", i+1)
		}
		t, err := secondsToDuration(*r.TS)
		if err != nil {
			return nil, fmt.Errorf("point %d: %w", i+1, err)
		}
		pts = append(pts, ProfilePoint{T: t, BER: r.BER, Loss: r.Loss, DelayMs: r.DelayMs, RateBps: r.RateBps, Up: r.Up})
	}
	return NewProfile(pts)
}

func secondsToDuration(s float64) (time.Duration, error) {
	if math.IsNaN(s) || s < 0 || s > MaxTimeSecs {
		return 0, fmt.Errorf("t_s %v outside [0,%g]", s, MaxTimeSecs)
	}
	return time.Duration(math.Round(s * 1e9)), nil
}

// parseProfileCSV reads a header line naming columns among t_s (required),
// ber, loss, delay_ms, rate_bps, up; an empty cell leaves that parameter unchanged.
// Lines starting with '#' are comments.
func parseProfileCSV(data []byte) (*Profile, error) {
	r := csv.NewReader(bytes.NewReader(data))
	r.Comment = '#'
	r.TrimLeadingSpace = true
	header, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("csv header: %w", err)
	}
	col := map[string]int{}
	for i, h := range header {
		h = strings.TrimSpace(h)
		switch h {
		case "t_s", "ber", "loss", "delay_ms", "rate_bps", "up":
		default:
			return nil, fmt.Errorf("csv header: unknown column %q (want t_s, ber, loss, delay_ms, rate_bps, up)", h)
		}
		if _, dup := col[h]; dup {
			return nil, fmt.Errorf("csv header: duplicate column %q", h)
		}
		col[h] = i
	}
	if _, ok := col["t_s"]; !ok {
		return nil, errors.New("csv header: t_s column missing")
	}
	var pts []ProfilePoint
	for line := 2; ; line++ {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("csv: %w", err)
		}
		pt, err := csvPoint(rec, col)
		if err != nil {
			return nil, fmt.Errorf("csv record %d: %w", line-1, err)
		}
		pts = append(pts, pt)
	}
	return NewProfile(pts)
}

func csvPoint(rec []string, col map[string]int) (ProfilePoint, error) {
	var pt ProfilePoint
	cell := func(name string) string { return strings.TrimSpace(rec[col[name]]) }
	ts, err := strconv.ParseFloat(cell("t_s"), 64)
	if err != nil {
		return pt, fmt.Errorf("t_s: %w", err)
	}
	if pt.T, err = secondsToDuration(ts); err != nil {
		return pt, err
	}
	for _, f := range []struct {
		name string
		dst  **float64
	}{{"ber", &pt.BER}, {"loss", &pt.Loss}, {"delay_ms", &pt.DelayMs}, {"rate_bps", &pt.RateBps}} {
		if _, ok := col[f.name]; !ok || cell(f.name) == "" {
			continue
		}
		v, err := strconv.ParseFloat(cell(f.name), 64)
		if err != nil {
			return pt, fmt.Errorf("%s: %w", f.name, err)
		}
		*f.dst = &v
	}
	if _, ok := col["up"]; ok && cell("up") != "" {
		v, err := strconv.ParseBool(cell("up"))
		if err != nil {
			return pt, fmt.Errorf("up: %w", err)
		}
		pt.Up = &v
	}
	return pt, nil
}
