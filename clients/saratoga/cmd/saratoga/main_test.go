package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"satbed/clients/saratoga"
	"satbed/internal/cli"
)

func startServer(t *testing.T, root string) string {
	t.Helper()
	conn, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	srv := &saratoga.Server{Root: root, RateBPS: 50e6, AutoDescriptor: true, Checksum: saratoga.CsumSHA1, Timeout: 5 * time.Second}
	go func() { done <- srv.Serve(ctx, conn) }()
	t.Cleanup(func() {
		cancel()
		<-done
		conn.Close()
	})
	return conn.LocalAddr().String()
}

func TestCLIGetPut(t *testing.T) {
	root := t.TempDir()
	data := bytes.Repeat([]byte("0123456789abcdef"), 40000)
	if err := os.WriteFile(filepath.Join(root, "f"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	addr := startServer(t, root)
	out := filepath.Join(t.TempDir(), "got")
	var stdout, stderr bytes.Buffer
	if err := run([]string{"get", "-server", addr, "-file", "f", "-out", out, "-timeout", "5s"}, &stdout, &stderr); err != nil {
		t.Fatalf("get: %v (%s)", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("want one JSON line, got %q", stdout.String())
	}
	var sum map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &sum); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"bytes", "seconds", "goodput_bps", "data_frames_sent", "retransmitted_frames",
		"status_frames", "holes_requested", "checksum", "checksum_ok"} {
		if _, ok := sum[k]; !ok {
			t.Errorf("summary lacks %q: %s", k, lines[0])
		}
	}
	if sum["checksum"] != "sha1" || sum["checksum_ok"] != true || sum["bytes"] != float64(len(data)) {
		t.Errorf("summary %s", lines[0])
	}
	if got, _ := os.ReadFile(out); !bytes.Equal(got, data) {
		t.Fatal("downloaded file differs")
	}
	stdout.Reset()
	if err := run([]string{"put", "-server", addr, "-file", out, "-name", "back", "-rate", "50000000", "-checksum", "sha1"}, &stdout, &stderr); err != nil {
		t.Fatalf("put: %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "back")); !bytes.Equal(got, data) {
		t.Fatal("uploaded file differs")
	}
}

func TestCLIErrors(t *testing.T) {
	addr := startServer(t, t.TempDir())
	tests := []struct {
		name  string
		args  []string
		want  string
		usage bool // bad input (exit 2), not a failed transfer (exit 1)
	}{
		{"no command", nil, "usage", true},
		{"unknown command", []string{"fetch"}, "unknown command", true},
		{"get without server", []string{"get", "-file", "f", "-out", "o"}, "required", true},
		{"unknown flag", []string{"get", "-bogus"}, "not defined", true},
		{"bad descriptor", []string{"put", "-server", addr, "-file", "x", "-descriptor", "24"}, "descriptor", true},
		{"bad checksum", []string{"serve", "-root", ".", "-checksum", "sha256"}, "checksum", true},
		{"bad frame", []string{"serve", "-root", ".", "-frame", "64"}, "-frame 64", true},
		{"missing file", []string{"get", "-server", addr, "-file", "nope", "-out", filepath.Join(t.TempDir(), "o")}, "file not found", false},
		{"escape", []string{"get", "-server", addr, "-file", "../x", "-out", filepath.Join(t.TempDir(), "o")}, "access denied", false},
		{"serve without root", []string{"serve"}, "-root is required", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(tc.args, &stdout, &stderr)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want mention of %q", err, tc.want)
			}
			var bad cli.UsageError
			if errors.As(err, &bad) != tc.usage {
				t.Fatalf("err = %v: usage error %v, want %v", err, !tc.usage, tc.usage)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error spans lines: %q", err)
			}
			if stdout.Len() != 0 {
				t.Fatalf("stdout on failure: %q", stdout.String())
			}
		})
	}
}
