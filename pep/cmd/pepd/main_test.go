package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseArgs(t *testing.T) {
	ccFile := filepath.Join(t.TempDir(), "cc")
	if err := os.WriteFile(ccFile, []byte("reno cubic bbr\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"SATBED_PEP_OPTS", "SATBED_RATE_BPS", "SATBED_RTT_MS", "SATBED_PEP_ROLE", "SATBED_STATE_DIR"} {
		t.Setenv(k, "")
	}
	tests := []struct {
		name    string
		env     map[string]string
		args    []string
		wantErr string
		wanBuf  int
	}{
		{name: "defaults autotune", wanBuf: 0},
		{name: "env sizes WAN buffer", env: map[string]string{"SATBED_RATE_BPS": "8000000", "SATBED_RTT_MS": "600", "SATBED_PEP_OPTS": "cc=bbr"}, wanBuf: 1_200_000},
		{name: "factor from options", args: []string{"-rate-bps", "8000000", "-rtt-ms", "600", "-opts", "buffer_factor=1"}, wanBuf: 600_000},
		{name: "explicit wan_buf wins", args: []string{"-rate-bps", "8000000", "-rtt-ms", "600", "-opts", "wan_buf=5000000"}, wanBuf: 5_000_000},
		{name: "unknown cc", args: []string{"-opts", "cc=vegas"}, wantErr: `congestion control "vegas" not offered by this kernel (available: reno cubic bbr)`},
		{name: "unknown lan cc", args: []string{"-opts", "lan_cc=hybla"}, wantErr: "hybla"},
		{name: "bad rate", args: []string{"-rate-bps", "fast"}, wantErr: `rate "fast"`},
		{name: "bad role", args: []string{"-role", "c"}, wantErr: `role "c"`},
		{name: "stray argument", args: []string{"extra"}, wantErr: `unexpected argument "extra"`},
		{name: "unknown flag", args: []string{"-bogus"}, wantErr: "-bogus"},
		{name: "unknown option", args: []string{"-opts", "turbo=1"}, wantErr: `unknown option "turbo"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			c, err := parseArgs(append([]string{"-cc-file", ccFile}, tt.args...))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("error %v, want one line containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			wan, lan := legs(c)
			if wan.Buf != tt.wanBuf || lan.Buf != 0 {
				t.Fatalf("wan buf %d lan buf %d, want %d and 0", wan.Buf, lan.Buf, tt.wanBuf)
			}
		})
	}
}

func TestConnsAllowed(t *testing.T) {
	tests := []struct {
		limit uint64
		want  int
	}{
		{limit: 20000, want: (20000 - fdReserve) / 2},
		{limit: 1024, want: (1024 - fdReserve) / 2},
		{limit: fdReserve + 2, want: 1},
		{limit: 10, want: 1},
	}
	for _, tt := range tests {
		if got := connsAllowed(tt.limit); got != tt.want {
			t.Errorf("connsAllowed(%d) = %d, want %d", tt.limit, got, tt.want)
		}
	}
}

func TestRaiseFileLimitKeepsEnough(t *testing.T) {
	// A limit already above the need is left as it is.
	got, err := raiseFileLimit(1, "/nonexistent")
	if err != nil {
		t.Fatal(err)
	}
	if got < 2+fdReserve {
		t.Fatalf("limit %d below the need of one connection", got)
	}
}
