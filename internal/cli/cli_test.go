package cli

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"strings"
	"testing"
)

func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want int
	}{
		{"none", nil, 0},
		{"help", flag.ErrHelp, 0},
		{"usage", Usagef("bad -x %d", 3), 2},
		{"wrapped usage", fmt.Errorf("serve: %w", UsageError{errors.New("bad")}), 2},
		{"failure", errors.New("connection refused"), 1},
	} {
		if got := ExitCode(tc.err); got != tc.want {
			t.Errorf("%s: ExitCode(%v) = %d, want %d", tc.name, tc.err, got, tc.want)
		}
	}
}

func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     []string
		want     int // ExitCode of the result
		message  string
		printed  bool // the flags went to stderr
		rateSeen int
	}{
		{"fine", []string{"-rate", "5"}, 0, "", false, 5},
		{"bad value", []string{"-rate", "x"}, 2, "invalid value", false, 0},
		{"unknown flag", []string{"-nope"}, 2, "flag provided but not defined", false, 0},
		{"left over", []string{"-rate", "1", "extra"}, 2, `get: unexpected argument "extra"`, false, 1},
		{"help", []string{"-h"}, 0, "flag: help requested", true, 0},
	} {
		fs := flag.NewFlagSet("get", flag.ContinueOnError)
		rate := fs.Int("rate", 0, "the rate")
		var stderr bytes.Buffer
		err := ParseFlags(fs, tc.args, &stderr)
		if got := ExitCode(err); got != tc.want {
			t.Errorf("%s: ExitCode = %d (%v), want %d", tc.name, got, err, tc.want)
		}
		if tc.message != "" && (err == nil || !strings.Contains(err.Error(), tc.message)) {
			t.Errorf("%s: error %v, want it to say %q", tc.name, err, tc.message)
		}
		if printed := strings.Contains(stderr.String(), "-rate"); printed != tc.printed {
			t.Errorf("%s: flags printed = %v, want %v (%q)", tc.name, printed, tc.printed, stderr.String())
		}
		if *rate != tc.rateSeen {
			t.Errorf("%s: -rate = %d, want %d", tc.name, *rate, tc.rateSeen)
		}
	}
}
