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

func TestWorkerArgs(t *testing.T) {
	ccFile := filepath.Join(t.TempDir(), "cc")
	if err := os.WriteFile(ccFile, []byte("reno cubic bbr\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SATBED_PEP_OPTS", "")
	tests := []struct {
		name                  string
		args                  []string
		wantErr               string
		worker, workers, max  int
		stateDir, connLogPath string
	}{
		{name: "single process", args: []string{"-opts", "max_conns=10000"}, max: 10000, stateDir: "/s"},
		{name: "worker gets its share and directory", args: []string{"-opts", "max_conns=10001 workers=auto", "-worker", "1/2"},
			worker: 1, workers: 2, max: 5001, stateDir: "/s/workers/1", connLogPath: "/s/conns.jsonl"},
		{name: "last of three", args: []string{"-opts", "max_conns=20000", "-worker", "2/3"},
			worker: 2, workers: 3, max: 6667, stateDir: "/s/workers/2", connLogPath: "/s/conns.jsonl"},
		{name: "index out of range", args: []string{"-worker", "2/2"}, wantErr: `-worker "2/2"`},
		{name: "one worker is no worker", args: []string{"-worker", "0/1"}, wantErr: "2 <= N"},
		{name: "garbage", args: []string{"-worker", "x"}, wantErr: `-worker "x"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseArgs(append([]string{"-cc-file", ccFile, "-state-dir", "/s"}, tt.args...))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.worker != tt.worker || c.workers != tt.workers || c.opts.MaxConns != tt.max || c.stateDir != tt.stateDir || c.connLog != tt.connLogPath {
				t.Fatalf("worker %d/%d max_conns %d state %q log %q; want %d/%d %d %q %q",
					c.worker, c.workers, c.opts.MaxConns, c.stateDir, c.connLog, tt.worker, tt.workers, tt.max, tt.stateDir, tt.connLogPath)
			}
		})
	}
}

func TestWorkerCount(t *testing.T) {
	tests := []struct {
		name     string
		opt      int
		maxConns int
		limit    uint64
		want     int
	}{
		{name: "explicit", opt: 3, maxConns: 10, limit: 1 << 20, want: 3},
		{name: "auto, limit suffices", opt: 0, maxConns: 9872, limit: 20000, want: 1},
		{name: "auto, 10000 under a 20000 limit", opt: 0, maxConns: 10000, limit: 20000, want: 2},
		{name: "auto, default max_conns", opt: 0, maxConns: 20000, limit: 20000, want: 3},
		{name: "auto, tiny limit is capped", opt: 0, maxConns: 1000000, limit: 1024, want: 64},
		{name: "auto, raised limit", opt: 0, maxConns: 20000, limit: 40256, want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := workerCount(tt.opt, tt.maxConns, tt.limit); got != tt.want {
				t.Fatalf("workerCount(%d, %d, %d) = %d, want %d", tt.opt, tt.maxConns, tt.limit, got, tt.want)
			}
		})
	}
}

func TestLastLine(t *testing.T) {
	var out strings.Builder
	l := &lastLine{w: &out}
	for _, s := range []string{"pepd[1]: first\n", "pepd[1]: a\npepd[1]: transparent listen on port 5100: busy\n", "\n"} {
		l.Write([]byte(s))
	}
	if got := l.String(); got != "pepd[1]: transparent listen on port 5100: busy" {
		t.Fatalf("last line %q", got)
	}
	if !strings.HasPrefix(out.String(), "pepd[1]: first\n") {
		t.Fatalf("not passed on: %q", out.String())
	}
}
