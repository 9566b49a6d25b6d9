package main

import (
	"errors"
	"io"
	"math"
	"testing"

	"satbed/emulator/bridge"
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

func TestTxSchedFor(t *testing.T) {
	on, off := bridge.RTBudget{RuntimeUs: 950000, PeriodUs: 1000000}, bridge.RTBudget{RuntimeUs: -1, PeriodUs: 1000000}
	cases := []struct {
		args   []string
		budget bridge.RTBudget
		share  float64
		warns  int
	}{
		{nil, on, 0.475, 0},
		{nil, off, 0, 0},
		{[]string{"-rt-share", "0.8"}, on, 0.8, 0},
		{[]string{"-rt-share", "0"}, on, 0, 1},
		{[]string{"-rt-share", "0"}, off, 0, 0},
		{[]string{"-rt-priority", "0"}, on, 0, 0},
	}
	for _, c := range cases {
		o, err := parseFlags(append([]string{"-a", "x0", "-b", "x1", "-config", "c.json"}, c.args...), io.Discard)
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		warns := 0
		r := txSchedFor(o, c.budget, func(string, ...any) { warns++ })
		if math.Abs(r.RTShare-c.share) > 1e-9 || warns != c.warns || r.Budget != c.budget {
			t.Errorf("%v with %+v: share %v, %d warnings, budget %+v; want %v, %d", c.args, c.budget, r.RTShare, warns, r.Budget, c.share, c.warns)
		}
	}
	for _, bad := range []string{"-0.5", "1.5", "-2"} {
		if _, err := parseFlags([]string{"-a", "x0", "-b", "x1", "-config", "c.json", "-rt-share", bad}, io.Discard); !errors.As(err, new(usageError)) {
			t.Errorf("-rt-share %s: %v, want a usage error", bad, err)
		}
	}
}
