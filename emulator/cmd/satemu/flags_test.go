package main

import (
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"satbed/emulator/bridge"
	"satbed/emulator/config"
)

func TestIOFlag(t *testing.T) {
	base := []string{"-a", "x0", "-b", "x1", "-config", "c.json"}
	cases := []struct {
		args     []string
		want     string
		usageErr bool
	}{
		{nil, "auto", false},
		{[]string{"-io", "tpacket"}, "tpacket", false},
		{[]string{"-io", "socket"}, "socket", false},
		{[]string{"-io", "auto"}, "auto", false},
		{[]string{"-io", "xdp"}, "", true},
		{[]string{"-io", ""}, "", true},
	}
	for _, c := range cases {
		o, err := parseFlags(append(append([]string(nil), base...), c.args...), io.Discard)
		var u usageError
		if c.usageErr {
			if !errors.As(err, &u) {
				t.Errorf("%v: error %v, want a usage error (exit 2)", c.args, err)
			}
			continue
		}
		if err != nil || o.io != c.want {
			t.Errorf("%v: io %q, %v; want %q", c.args, o.io, err, c.want)
		}
	}
}

func TestGridFlag(t *testing.T) {
	base := []string{"-a", "x0", "-b", "x1", "-config", "c.json"}
	for _, c := range []struct {
		args []string
		want int
		ok   bool
	}{
		{nil, 250, true},
		{[]string{"-grid-us", "0"}, 0, true},
		{[]string{"-grid-us", "1000"}, 1000, true},
		{[]string{"-grid-us", "1001"}, 0, false},
		{[]string{"-grid-us", "-1"}, 0, false},
	} {
		o, err := parseFlags(append(append([]string(nil), base...), c.args...), io.Discard)
		var u usageError
		switch {
		case !c.ok && !errors.As(err, &u):
			t.Errorf("%v: error %v, want a usage error (exit 2)", c.args, err)
		case c.ok && (err != nil || o.gridUs != c.want):
			t.Errorf("%v: grid %d, %v; want %d", c.args, o.gridUs, err, c.want)
		}
	}
}

func TestTxSchedFor(t *testing.T) {
	on, off := bridge.RTBudget{RuntimeUs: 950000, PeriodUs: 1000000}, bridge.RTBudget{RuntimeUs: -1, PeriodUs: 1000000}
	cases := []struct {
		args   []string
		cpus   int
		budget bridge.RTBudget
		prio   int
		share  float64
		warns  int
	}{
		{nil, 2, on, 10, 0.475, 0},
		{nil, 2, off, 10, 0, 0},
		{[]string{"-rt-share", "0.8"}, 2, on, 10, 0.8, 0},
		{[]string{"-rt-share", "0"}, 2, on, 10, 0, 1},
		{[]string{"-rt-share", "0"}, 2, off, 10, 0, 0},
		{[]string{"-rt-priority", "0"}, 2, on, 0, 0, 0},
		// Pinned to one CPU: ordinary threads, unless real time is asked for by name.
		{nil, 1, on, 0, 0, 0},
		{[]string{"-rt-share", "0"}, 1, on, 0, 0, 0},
		{[]string{"-rt-priority", "10"}, 1, on, 10, 0.475, 1},
		{[]string{"-rt-priority", "0"}, 1, on, 0, 0, 0},
	}
	for _, c := range cases {
		o, err := parseFlags(append([]string{"-a", "x0", "-b", "x1", "-config", "c.json"}, c.args...), io.Discard)
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		warns := 0
		r := txSchedFor(o, c.cpus, c.budget, func(string, ...any) { warns++ })
		demoted := c.prio == 0 && o.rtPrio > 0
		if r.RTPriority != c.prio || math.Abs(r.RTShare-c.share) > 1e-9 || warns != c.warns || r.Budget != c.budget ||
			(r.Why != "") != demoted {
			t.Errorf("%v on %d CPUs with %+v: priority %d (%q), share %v, %d warnings, budget %+v; want %d, %v, %d",
				c.args, c.cpus, c.budget, r.RTPriority, r.Why, r.RTShare, warns, r.Budget, c.prio, c.share, c.warns)
		}
	}
	for _, bad := range []string{"-0.5", "1.5", "-2"} {
		if _, err := parseFlags([]string{"-a", "x0", "-b", "x1", "-config", "c.json", "-rt-share", bad}, io.Discard); !errors.As(err, new(usageError)) {
			t.Errorf("-rt-share %s: %v, want a usage error", bad, err)
		}
	}
}

// TestAutoIO: "auto" serves slow shaped links with plain sockets (no
// ring timer) and everything else, an unshaped direction or a profile
// step above the bound included, with the ring.
func TestAutoIO(t *testing.T) {
	cases := []struct {
		name, cfg, want string
	}{
		{"the Global Hawk link", `{"a_to_b": {"rate_bps": 8e6, "ceil_bps": 10e6, "delay_ms": 300}, "b_to_a": {"rate_bps": 8e6, "ceil_bps": 10e6, "delay_ms": 300}}`, ioSocket},
		{"at the bound", `{"a_to_b": {"rate_bps": 20e6, "delay_ms": 0}, "b_to_a": {"rate_bps": 1e6, "delay_ms": 0}}`, ioSocket},
		{"ceil above the bound", `{"a_to_b": {"rate_bps": 8e6, "ceil_bps": 21e6, "delay_ms": 0}, "b_to_a": {"rate_bps": 8e6, "delay_ms": 0}}`, ioTpacket},
		{"one direction fast", `{"a_to_b": {"rate_bps": 8e6, "delay_ms": 0}, "b_to_a": {"rate_bps": 1e9, "delay_ms": 0}}`, ioTpacket},
		{"one direction unshaped", `{"a_to_b": {"rate_bps": 8e6, "delay_ms": 0}, "b_to_a": {"delay_ms": 0}}`, ioTpacket},
		{"a profile step above the bound", `{"a_to_b": {"rate_bps": 8e6, "delay_ms": 0, "profile": "PROFILE"}, "b_to_a": {"rate_bps": 8e6, "delay_ms": 0}}`, ioTpacket},
	}
	dir := t.TempDir()
	profile := filepath.Join(dir, "p.csv")
	if err := os.WriteFile(profile, []byte("t_s,rate_bps\n0,8000000\n10,50000000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		path := filepath.Join(dir, "c.json")
		if err := os.WriteFile(path, []byte(strings.ReplaceAll(c.cfg, "PROFILE", profile)), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Load(path)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := autoIO(cfg); got != c.want {
			t.Errorf("%s: auto takes %s, want %s", c.name, got, c.want)
		}
	}
}
