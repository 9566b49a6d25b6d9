package quic

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"satbed/clients/quic/qlogsum"
)

// startServer serves root on a loopback port until the test ends.
func startServer(t *testing.T, mode, root string, q *QlogDir) string {
	t.Helper()
	conn, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	srv := &Server{Root: root, Mode: mode, Timeout: 5 * time.Second, Qlog: q}
	go func() { done <- srv.Serve(ctx, conn) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		conn.Close()
	})
	return conn.LocalAddr().String()
}

func digest(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func TestLoopbackTransfers(t *testing.T) {
	data := make([]byte, 3<<20+17)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{ModeQUIC, ModeHTTP3} {
		t.Run(mode, func(t *testing.T) {
			root, work := t.TempDir(), t.TempDir()
			if err := os.WriteFile(filepath.Join(root, "payload.bin"), data, 0o644); err != nil {
				t.Fatal(err)
			}
			addr := startServer(t, mode, root, nil)
			var keys bytes.Buffer
			q := &QlogDir{Dir: t.TempDir()}
			cfg := ClientConfig{Server: addr, Mode: mode, Timeout: 5 * time.Second, Qlog: q, KeyLog: &keys}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()

			out := filepath.Join(work, "got.bin")
			sum, err := Get(ctx, cfg, "payload.bin", out)
			if err != nil {
				t.Fatalf("get: %v", err)
			}
			got, _ := os.ReadFile(out)
			if !bytes.Equal(got, data) || sum.SHA256 != digest(data) || sum.Bytes != int64(len(data)) {
				t.Fatalf("get delivered %d bytes sha256 %s, summary %+v", len(got), digest(got), sum)
			}
			if sum.HandshakeSeconds <= 0 || sum.FirstByteSeconds < sum.HandshakeSeconds || sum.Seconds < sum.FirstByteSeconds {
				t.Errorf("times out of order: %+v", sum)
			}
			if sum.CongestionControl != CongestionControl || sum.GoodputBPS <= 0 || sum.ALPN != alpn(mode) {
				t.Errorf("summary %+v", sum)
			}
			if !bytes.Contains(keys.Bytes(), []byte("CLIENT_TRAFFIC_SECRET_0 ")) {
				t.Errorf("key log lacks the traffic secret: %q", keys.String())
			}
			// The client's own qlog is complete once Get returns.
			if len(sum.Qlogs) != 1 {
				t.Fatalf("qlogs %v", sum.Qlogs)
			}
			f, err := os.Open(sum.Qlogs[0])
			if err != nil {
				t.Fatal(err)
			}
			qs, err := qlogsum.Read(f)
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			if qs.Vantage != "client" || qs.HandshakeMS <= 0 || qs.FirstByteMS < qs.HandshakeMS ||
				qs.StreamBytesRecv < int64(len(data)) || qs.Malformed != 0 {
				t.Errorf("qlog summary %+v", qs)
			}

			sum, err = Put(ctx, ClientConfig{Server: addr, Mode: mode, Timeout: 5 * time.Second}, out, "up.bin")
			if err != nil {
				t.Fatalf("put: %v", err)
			}
			got, _ = os.ReadFile(filepath.Join(root, "up.bin"))
			if !bytes.Equal(got, data) || sum.SHA256 != digest(data) || sum.SentSHA256 != sum.SHA256 {
				t.Fatalf("put stored %d bytes sha256 %s, summary %+v", len(got), digest(got), sum)
			}
			if left, _ := filepath.Glob(filepath.Join(root, ".*")); len(left) != 0 {
				t.Errorf("temporary copies left: %v", left)
			}

			_, err = Get(ctx, cfg, "absent.bin", filepath.Join(work, "absent"))
			if !errors.Is(err, ErrRemote) {
				t.Errorf("get of a missing file: %v, want ErrRemote", err)
			}
			// Nothing arrived, and what arrived stays: an empty copy.
			if st, err := os.Stat(filepath.Join(work, "absent")); err != nil || st.Size() != 0 {
				t.Errorf("a failed get's copy: %v, %v; want it empty", st, err)
			}
		})
	}
}

func TestBadInput(t *testing.T) {
	ctx := context.Background()
	cfg := ClientConfig{Server: "127.0.0.1:1", Mode: ModeQUIC, Timeout: time.Second}
	if _, err := Get(ctx, cfg, "../x", filepath.Join(t.TempDir(), "x")); err == nil {
		t.Error("get accepted a path as a name")
	}
	if _, err := Get(ctx, ClientConfig{Mode: "tcp"}, "x", filepath.Join(t.TempDir(), "x")); err == nil {
		t.Error("get accepted mode tcp")
	}
	if err := (&Server{Mode: "h2"}).Serve(ctx, nil); err == nil {
		t.Error("serve accepted mode h2")
	}
}

func TestCancelledGetReturns(t *testing.T) {
	// Nothing answers: the cancelled context, not the idle timeout, ends it.
	conn, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = Get(ctx, ClientConfig{Server: conn.LocalAddr().String(), Mode: ModeQUIC, Timeout: time.Minute}, "x", filepath.Join(t.TempDir(), "x"))
	if err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("get: %v after %v", err, time.Since(start))
	}
}

// TestGetKeepsWhatArrived: a get that fails leaves its copy in place (here
// empty: nothing listens), so a stopped transfer's prefix can be checked.
func TestGetKeepsWhatArrived(t *testing.T) {
	out := filepath.Join(t.TempDir(), "got.bin")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	cfg := ClientConfig{Server: "127.0.0.1:9", Mode: ModeQUIC, Timeout: time.Second}
	if _, err := Get(ctx, cfg, "payload.bin", out); err == nil {
		t.Fatal("get from nowhere succeeded")
	}
	if st, err := os.Stat(out); err != nil || st.Size() != 0 {
		t.Fatalf("the copy in place: %v, %v", st, err)
	}
}
