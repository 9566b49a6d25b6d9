package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"satbed/emulator/link"
)

const example = `{"seed": 1, "sample_ms": 100,
 "a_to_b": {"rate_bps": 8000000, "ceil_bps": 10000000, "burst_bytes": 0, "cburst_bytes": 131072, "delay_ms": 300, "ber": 1e-5, "loss": 0.01, "queue_packets": 1000, "queue_bytes": 0, "gilbert_elliott": null, "outage": {"period_s": 40, "down_s": 10, "offset_s": 0}, "profile": "p.csv"},
 "b_to_a": {"rate_bps": 8000000, "delay_ms": 300}}`

func writeFiles(t *testing.T, cfg string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p.csv"), []byte("t_s,ber\n0,1e-6\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "c.json")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadExample(t *testing.T) {
	c, err := Load(writeFiles(t, example))
	if err != nil {
		t.Fatal(err)
	}
	e, err := c.AToB.Effective()
	if err != nil {
		t.Fatal(err)
	}
	if e.BurstBytes != 1600 || e.CBurstBytes != 131072 || e.QueuePackets != 1000 || e.CeilBps != 10e6 {
		t.Errorf("effective a_to_b: %+v", e)
	}
	p, err := c.AToB.Params()
	if err != nil {
		t.Fatal(err)
	}
	if p.Delay != 300*time.Millisecond || p.Outage == nil || p.Outage.Down != 10*time.Second || p.Profile == nil {
		t.Errorf("params: %+v", p)
	}
	if e.Loss != 0.01 || p.Loss != 0.01 || p.BER != 1e-5 {
		t.Errorf("loss %v/%v, ber %v: want 0.01 and 1e-5", e.Loss, p.Loss, p.BER)
	}
	e2, _ := c.BToA.Effective()
	if e2.CeilBps != 8e6 || e2.CBurstBytes != 1600 {
		t.Errorf("b_to_a defaults: %+v", e2)
	}
	if c.Sample() != 100*time.Millisecond || *c.Seed != 1 {
		t.Error("globals")
	}
}

func TestValidationErrors(t *testing.T) {
	tests := []struct{ name, cfg, want string }{
		{"negative delay", `{"a_to_b":{"delay_ms":-1},"b_to_a":{}}`, "delay_ms"},
		{"ber 1", `{"a_to_b":{"ber":1},"b_to_a":{}}`, "ber"},
		{"ber negative", `{"a_to_b":{},"b_to_a":{"ber":-0.1}}`, "ber"},
		{"loss 1", `{"a_to_b":{"loss":1},"b_to_a":{}}`, "a_to_b: loss 1 outside [0,1)"},
		{"loss negative", `{"a_to_b":{},"b_to_a":{"loss":-0.1}}`, "b_to_a: loss -0.1 outside [0,1)"},
		{"loss percent", `{"a_to_b":{"loss":10},"b_to_a":{}}`, "loss 10 outside [0,1)"},
		{"loss string", `{"a_to_b":{"loss":"10%"},"b_to_a":{}}`, "json"},
		{"rate 0", `{"a_to_b":{"rate_bps":0},"b_to_a":{}}`, "rate_bps"},
		{"ceil < rate", `{"a_to_b":{"rate_bps":8e6,"ceil_bps":1e6},"b_to_a":{}}`, "ceil_bps"},
		{"ceil without rate", `{"a_to_b":{"ceil_bps":1e6},"b_to_a":{}}`, "ceil_bps"},
		{"unknown key", `{"a_to_b":{"rate":8e6},"b_to_a":{}}`, "unknown field"},
		{"unknown top key", `{"x":1,"a_to_b":{},"b_to_a":{}}`, "unknown field"},
		{"profile", `{"a_to_b":{"profile":"/nonexistent/p.csv"},"b_to_a":{}}`, "profile"},
		{"outage", `{"a_to_b":{"outage":{"period_s":10,"down_s":20}},"b_to_a":{}}`, "down_s"},
		{"ge", `{"a_to_b":{"gilbert_elliott":{"p":2}},"b_to_a":{}}`, "gilbert_elliott.p"},
		{"queue", `{"a_to_b":{"queue_packets":0},"b_to_a":{}}`, "unbounded"},
		{"sample", `{"sample_ms":0,"a_to_b":{},"b_to_a":{}}`, "sample_ms"},
		{"trailing", `{"a_to_b":{},"b_to_a":{}} {}`, "trailing"},
		{"type", `{"a_to_b":{"queue_packets":1.5},"b_to_a":{}}`, "json"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(writeFiles(t, tc.cfg))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want mention of %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans lines: %q", err)
			}
		})
	}
}

// TestLossValidation covers the values JSON cannot carry (NaN, infinities)
// too: a direction built in code, or merged from elsewhere, is checked the
// same way.
func TestLossValidation(t *testing.T) {
	tests := []struct {
		loss float64
		ok   bool
	}{
		{0, true},
		{1e-9, true},
		{0.1, true},
		{math.Nextafter(1, 0), true},
		{1, false},
		{1.5, false},
		{-1e-12, false},
		{math.NaN(), false},
		{math.Inf(1), false},
		{math.Inf(-1), false},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprint(tc.loss), func(t *testing.T) {
			c := Config{BToA: Direction{Loss: tc.loss}}
			err := c.Validate()
			if tc.ok {
				if err != nil {
					t.Fatalf("rejected: %v", err)
				}
				if p, err := c.BToA.Params(); err != nil || p.Loss != tc.loss {
					t.Errorf("params loss %v (%v), want %v", p.Loss, err, tc.loss)
				}
				return
			}
			want := fmt.Sprintf("b_to_a: loss %v outside [0,1)", tc.loss)
			if err == nil || err.Error() != want {
				t.Fatalf("err = %v, want %q", err, want)
			}
			if errors.Unwrap(err) == nil {
				t.Errorf("%q does not wrap the direction's error", err)
			}
		})
	}
}

func TestMerge(t *testing.T) {
	c, err := Load(writeFiles(t, example))
	if err != nil {
		t.Fatal(err)
	}
	orig := c.AToB
	m, err := Merge(c.AToB, []byte(`{"delay_ms": 50, "outage": {"down_s": 5}}`))
	if err != nil {
		t.Fatal(err)
	}
	if m.DelayMs != 50 || m.Outage.DownS != 5 || m.Outage.PeriodS != 40 || *m.RateBps != 8e6 {
		t.Errorf("merged %+v %+v", m, m.Outage)
	}
	if c.AToB.Outage.DownS != 10 || orig.DelayMs != 300 {
		t.Error("merge modified its input")
	}
	if m, err := Merge(c.AToB, []byte(`{"loss": 0.2}`)); err != nil || m.Loss != 0.2 || m.BER != 1e-5 || c.AToB.Loss != 0.01 {
		t.Errorf("merged loss: %v %v (ber %v, base %v)", err, m.Loss, m.BER, c.AToB.Loss)
	}
	m, err = Merge(c.AToB, []byte(`{"outage": null}`))
	if err != nil || m.Outage != nil {
		t.Errorf("null outage: %v %+v", err, m.Outage)
	}
	if _, err := Merge(c.AToB, []byte(`{"rate_bps": 1, "queue_packets": 5}`)); err != nil {
		t.Fatal(err)
	}
	if *c.AToB.RateBps != 8e6 || *c.AToB.QueuePackets != 1000 {
		t.Error("merge wrote through a shared pointer")
	}
	if _, err := Merge(c.AToB, []byte(`{"nope": 1}`)); err == nil {
		t.Error("unknown key accepted")
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(example))
	f.Add([]byte(`{"a_to_b":{"gilbert_elliott":{"p":0.01,"r":0.3,"loss_bad":1}},"b_to_a":{"outage":{"period_s":40,"down_s":10,"offset_s":5}}}`))
	f.Add([]byte(`{"a_to_b":{"rate_bps":1e12,"delay_ms":3600000},"b_to_a":{"queue_bytes":1}}`))
	f.Add([]byte(`{"a_to_b":{"loss":0.1,"ber":1e-6},"b_to_a":{"loss":0.999999}}`))
	f.Add([]byte(`{"a_to_b":{"loss":1},"b_to_a":{"loss":-0}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Decode(data)
		if err != nil {
			return
		}
		for _, d := range []Direction{c.AToB, c.BToA} {
			d.Profile = "" // no file access while fuzzing
			p, err := d.Params()
			if err != nil {
				if strings.Contains(err.Error(), "\n") {
					t.Fatalf("multi-line error %q", err)
				}
				continue
			}
			checkProbabilities(t, p)
		}
	})
}

// FuzzMerge drives what the control socket's `set` hands the emulator: a
// partial direction on top of a valid one. Whatever the bytes, the base is
// untouched, and an accepted merge either resolves to parameters or fails
// with one line.
func FuzzMerge(f *testing.F) {
	f.Add([]byte(`{"rate_bps": 2e6, "delay_ms": 300}`))
	f.Add([]byte(`{"ber": 1e-5, "queue_packets": 20}`))
	f.Add([]byte(`{"outage": {"period_s": 40, "down_s": 10, "offset_s": 0}}`))
	f.Add([]byte(`{"gilbert_elliott": null, "ceil_bps": -1}`))
	f.Add([]byte(`{"delay_ms": 1e308, "rate_bps": "fast"}`))
	f.Add([]byte(`{"loss": 0.05}`))
	f.Add([]byte(`{"loss": 1, "ber": 0}`))
	f.Add([]byte(`{"loss": null}`))
	f.Fuzz(func(t *testing.T, partial []byte) {
		c, err := Decode([]byte(example))
		if err != nil {
			t.Fatal(err)
		}
		base := c.AToB
		before, _ := json.Marshal(base)
		m, err := Merge(base, partial)
		if after, _ := json.Marshal(base); string(after) != string(before) {
			t.Fatalf("merge modified its base: %s -> %s", before, after)
		}
		if err != nil {
			return
		}
		m.Profile = "" // no file access while fuzzing
		p, err := m.Params()
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("multi-line error %q", err)
			}
			return
		}
		checkProbabilities(t, p)
	})
}

// checkProbabilities fails unless parameters that were accepted hold
// probabilities in [0,1).
func checkProbabilities(t *testing.T, p link.Params) {
	t.Helper()
	for _, v := range []float64{p.BER, p.Loss} {
		if !(v >= 0 && v < 1) {
			t.Fatalf("accepted probability %v (ber %v, loss %v)", v, p.BER, p.Loss)
		}
	}
}
