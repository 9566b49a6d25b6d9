package main

import (
	"errors"
	"io"
	"testing"
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
