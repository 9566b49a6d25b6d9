package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"satbed/clients/quic"
	"satbed/internal/cli"
)

func startServer(t *testing.T, mode, root string) string {
	t.Helper()
	conn, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	srv := &quic.Server{Root: root, Mode: mode, Timeout: 5 * time.Second}
	go func() { done <- srv.Serve(ctx, conn) }()
	t.Cleanup(func() {
		cancel()
		<-done
		conn.Close()
	})
	return conn.LocalAddr().String()
}

func TestCLIGetPutQlog(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 40000)
	want := sha256.Sum256(data)
	for _, mode := range []string{"quic", "http3"} {
		t.Run(mode, func(t *testing.T) {
			root, work := t.TempDir(), t.TempDir()
			if err := os.WriteFile(filepath.Join(root, "f"), data, 0o644); err != nil {
				t.Fatal(err)
			}
			addr := startServer(t, mode, root)
			out := filepath.Join(work, "got")
			qdir := filepath.Join(work, "qlog")
			keys := filepath.Join(work, "keys")
			var stdout, stderr bytes.Buffer
			if err := run([]string{"get", "-mode", mode, "-server", addr, "-file", "f", "-out", out, "-timeout", "5s",
				"--qlog-dir", qdir, "--keylog", keys}, &stdout, &stderr); err != nil {
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
			for _, k := range []string{"bytes", "seconds", "handshake_s", "first_byte_s", "goodput_bps", "congestion_control", "sha256", "qlogs"} {
				if _, ok := sum[k]; !ok {
					t.Errorf("summary lacks %q: %s", k, lines[0])
				}
			}
			if sum["sha256"] != hex.EncodeToString(want[:]) || sum["bytes"] != float64(len(data)) || sum["mode"] != mode {
				t.Errorf("summary %s", lines[0])
			}
			if k, err := os.ReadFile(keys); err != nil || !bytes.Contains(k, []byte("SERVER_HANDSHAKE_TRAFFIC_SECRET ")) {
				t.Errorf("key log %q, %v", k, err)
			}

			qlogs, _ := filepath.Glob(filepath.Join(qdir, "*_client.sqlog"))
			stdout.Reset()
			if err := run(append([]string{"qlog"}, qlogs...), &stdout, &stderr); err != nil || len(qlogs) != 1 {
				t.Fatalf("qlog %v: %v", qlogs, err)
			}
			var qs map[string]any
			if err := json.Unmarshal(stdout.Bytes(), &qs); err != nil {
				t.Fatal(err)
			}
			if qs["vantage"] != "client" || qs["handshake_ms"].(float64) <= 0 || qs["stream_bytes_received"].(float64) < float64(len(data)) {
				t.Errorf("qlog summary %s", stdout.String())
			}

			stdout.Reset()
			if err := run([]string{"put", "-mode", mode, "-server", addr, "-file", out, "-name", "back"}, &stdout, &stderr); err != nil {
				t.Fatalf("put: %v", err)
			}
			if got, _ := os.ReadFile(filepath.Join(root, "back")); !bytes.Equal(got, data) {
				t.Fatal("uploaded file differs")
			}
			if !strings.Contains(stdout.String(), `"sha256":"`+hex.EncodeToString(want[:])) {
				t.Errorf("put summary %s", stdout.String())
			}
		})
	}
}

func TestCLIErrors(t *testing.T) {
	addr := startServer(t, "quic", t.TempDir())
	tests := []struct {
		name  string
		args  []string
		usage bool
	}{
		{"no command", nil, true},
		{"unknown command", []string{"fetch"}, true},
		{"bad flag", []string{"get", "-bogus"}, true},
		{"missing flags", []string{"get", "-server", addr}, true},
		{"bad mode", []string{"get", "-server", addr, "-file", "f", "-out", "o", "-mode", "tcp"}, true},
		{"serve without root", []string{"serve"}, true},
		{"qlog without files", []string{"qlog"}, true},
		{"stray argument", []string{"get", "-server", addr, "-file", "f", "-out", "o", "extra"}, true},
		{"missing remote file", []string{"get", "-server", addr, "-file", "absent", "-out", filepath.Join(t.TempDir(), "o"), "-timeout", "5s"}, false},
		{"unreadable qlog", []string{"qlog", filepath.Join(t.TempDir(), "none.sqlog")}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(tt.args, &stdout, &stderr)
			var bad cli.UsageError
			if err == nil || errors.As(err, &bad) != tt.usage {
				t.Fatalf("err %v, want usage error %v", err, tt.usage)
			}
			if stdout.Len() != 0 {
				t.Errorf("printed %q on failure", stdout.String())
			}
		})
	}
}
