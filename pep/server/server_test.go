package server

import (
	"io"
	"log"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"satbed/pep/options"
	"satbed/pep/relay"
	"satbed/pep/stats"
)

func TestDirectional(t *testing.T) {
	lan := &side{name: "lan"}
	wan := &side{name: "wan"}
	tests := []struct {
		sd           *side
		a2b, b2a     int64
		wantL, wantW int64
	}{
		// SYN from the LAN: client->upstream is LAN->WAN.
		{lan, 10, 3, 10, 3},
		// SYN from the WAN: client->upstream is WAN->LAN.
		{wan, 10, 3, 3, 10},
	}
	for _, tt := range tests {
		l, w := directional(tt.sd, tt.a2b, tt.b2a)
		if l != tt.wantL || w != tt.wantW {
			t.Fatalf("%s: got %d/%d, want %d/%d", tt.sd.name, l, w, tt.wantL, tt.wantW)
		}
	}
}

func loopPair(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	d, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	a, err := ln.AcceptTCP()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(); a.Close() })
	return d, a
}

// TestEnforceTimeouts registers real relays and checks which ones the
// sweeper resets, with "now" moved forward instead of sleeping.
func TestEnforceTimeouts(t *testing.T) {
	o := options.Defaults()
	o.IdleTimeout = 10 * time.Second
	o.HalfCloseTimeout = 2 * time.Second
	s, err := New(Config{Opts: o, Log: log.New(io.Discard, "", 0)})
	if err != nil {
		t.Fatal(err)
	}
	type tc struct {
		name       string
		halfClose  bool
		wantReason string
	}
	cases := []tc{{"busy", false, ""}, {"half-closed", true, "half_close_timeout"}}
	results := make([]chan string, len(cases))
	for i, c := range cases {
		client, a := loopPair(t)
		b, server := loopPair(t)
		p := relay.NewPair(a, b, s.pool)
		s.conns[uint64(i)] = &entry{pair: p, side: s.sides[0]}
		results[i] = make(chan string, 1)
		go func() {
			r, _ := p.Run()
			results[i] <- r
		}()
		if c.halfClose {
			client.CloseWrite()
			io.ReadAll(server)
			for _, ok := p.HalfClosed(); !ok; _, ok = p.HalfClosed() {
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
	// 5 s later: past the half-close timeout, not the idle timeout.
	s.enforceTimeouts(time.Now().Add(5 * time.Second))
	for i, c := range cases {
		select {
		case r := <-results[i]:
			if r != c.wantReason {
				t.Fatalf("%s: ended with %q, want %q", c.name, r, c.wantReason)
			}
		case <-time.After(time.Second):
			if c.wantReason != "" {
				t.Fatalf("%s: not reset", c.name)
			}
		}
	}
	// 20 s later: everything is past the idle timeout.
	s.enforceTimeouts(time.Now().Add(20 * time.Second))
	select {
	case r := <-results[0]:
		if r != "idle_timeout" {
			t.Fatalf("busy: ended with %q, want idle_timeout", r)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("idle connection not reset")
	}
}

// TestTraceOnlyMeasures: trace_interval without buffer_packets or
// outage_detect samples what a connection holds (buffer.jsonl and the
// stats' buffer_bytes) and neither bounds it nor detects outages.
func TestTraceOnlyMeasures(t *testing.T) {
	o := options.Defaults()
	o.TraceInterval = 20 * time.Millisecond
	dir := t.TempDir()
	s, err := New(Config{Opts: o, StateDir: dir, Log: log.New(io.Discard, "", 0)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.closeAccessFiles()
	// The source writes into the LAN-facing socket; nothing reads it, so it
	// stays in that socket's receive queue: held by the PEP.
	source, lanSock := loopPair(t)
	wanSock, _ := loopPair(t)
	e := &entry{pair: relay.NewPair(lanSock, wanSock, s.pool), side: s.sides[0]}
	s.conns[1] = e
	stop := s.attachAccess(1, e, lanSock, wanSock)
	defer stop()
	if e.acc == nil {
		t.Fatal("trace_interval alone attached no monitor")
	}
	if _, err := source.Write(make([]byte, 30000)); err != nil {
		t.Fatal(err)
	}
	var snap stats.Snapshot
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		snap = stats.Snapshot{}
		s.accessStats(&snap)
		if snap.BufferBytes == 30000 {
			break
		}
	}
	if snap.BufferBytes != 30000 || snap.BufferLimitBytes != 0 || snap.OutagesDetected != 0 || snap.ConnectionsWanDown != 0 {
		t.Fatalf("stats %+v: want 30000 bytes held, no bound, no outage", snap)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		b, _ := os.ReadFile(filepath.Join(dir, TraceFile))
		if strings.Contains(string(b), `"occupancy_bytes":30000`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no sample of the 30000 bytes held: %q", TraceFile, b)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, OutagesFile)); err == nil {
		t.Fatalf("%s written with outage detection off", OutagesFile)
	}
}
