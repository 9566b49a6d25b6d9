package trafficgen

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a records sink tests can read after the run.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) records(t *testing.T) []FlowRecord {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []FlowRecord
	for _, line := range strings.Split(strings.TrimSpace(s.b.String()), "\n") {
		var r FlowRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("bad record %q: %v", line, err)
		}
		if r.Record == "flow" {
			out = append(out, r)
		}
	}
	return out
}

// startServer runs a Server on loopback until the test ends.
func startServer(t *testing.T) (string, *syncBuffer, func()) {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	out := &syncBuffer{}
	srv := &Server{Records: NewRecorder(out), Payload: NewPayload(9)}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	stop := func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}
	t.Cleanup(func() {
		if ctx.Err() == nil {
			stop()
		}
	})
	return ln.Addr().String(), out, stop
}

func TestLoopbackConstantAndLong(t *testing.T) {
	addr, srvOut, stopServer := startServer(t)
	out := &syncBuffer{}
	cfg := ClientConfig{Server: addr, ClientID: 4, Tag: "t", Long: 2, Arrival: ArrivalConstant, Concurrent: 5,
		Sizes: Fixed(200_000), UploadFraction: 0.5, Duration: 1500 * time.Millisecond, Seed: 3, Payload: NewPayload(3)}
	sum, err := Run(context.Background(), cfg, NewRecorder(out))
	if err != nil {
		t.Fatal(err)
	}
	// A download the client completed at its last byte is completed at the
	// server when the client's close arrives: wait for that, then stop it.
	completed := map[uint64]bool{}
	for _, r := range out.records(t) {
		if r.Status == Completed {
			completed[r.Flow] = true
		}
	}
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		done := 0
		for _, r := range srvOut.records(t) {
			if completed[r.Flow] && r.Status == Completed {
				done++
			}
		}
		if done == len(completed) {
			break
		}
	}
	stopServer()
	if sum.MaxActive != 7 {
		t.Errorf("max active %d, want 7 (2 long + 5 constant)", sum.MaxActive)
	}
	recs := out.records(t)
	if len(recs) != sum.Flows || sum.ByStatus[Aborted] != 0 {
		t.Fatalf("%d records, summary %+v", len(recs), sum)
	}
	server := map[uint64]FlowRecord{}
	for _, r := range srvOut.records(t) {
		server[r.Flow] = r
	}
	dirs := map[string]int{}
	for _, r := range recs {
		switch {
		case r.Kind == "long":
			if r.Status != Stopped || r.Bytes == 0 {
				t.Errorf("long flow %d: %s after %d bytes", r.Flow, r.Status, r.Bytes)
			}
		case r.Status == Completed:
			dirs[r.Direction]++
			if r.Bytes != 200_000 || !r.Completed || r.GoodputBps <= 0 {
				t.Errorf("flow %d: %+v", r.Flow, r)
			}
			s, ok := server[r.Flow]
			if !ok || s.Status != Completed || s.Bytes != 200_000 || s.Client != 4 {
				t.Errorf("flow %d: server record %+v", r.Flow, s)
			}
			sender := r
			if r.Direction == "download" {
				sender = s
			}
			if sender.Retrans == nil {
				t.Errorf("flow %d: sender side has no retransmission count", r.Flow)
			}
		}
		if r.Tag != "t" || r.End < r.Start {
			t.Errorf("flow %d: tag %q, start %f end %f", r.Flow, r.Tag, r.Start, r.End)
		}
	}
	if dirs["upload"] == 0 || dirs["download"] == 0 {
		t.Errorf("completed flows by direction: %v", dirs)
	}
	if sum.ByStatus[Stopped] > 7 {
		t.Errorf("%d flows stopped; at most the 7 active at the end can be", sum.ByStatus[Stopped])
	}
}

// A client whose server refuses connections records aborted flows, retries
// slowly and still stops on cancellation.
func TestLoopbackRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	cfg := ClientConfig{Server: addr, Arrival: ArrivalConstant, Concurrent: 3, Sizes: Fixed(10), Payload: NewPayload(1)}
	sum, err := Run(ctx, cfg, NewRecorder(nil))
	if err != nil {
		t.Fatal(err)
	}
	// Each of the 3 slots fails once and waits retryDelay (1 s) before trying again.
	if sum.ByStatus[Aborted] != 3 || sum.Flows != 3 {
		t.Errorf("summary %+v: want 3 aborted flows", sum)
	}
}

func TestValidate(t *testing.T) {
	base := ClientConfig{Server: "127.0.0.1:1", Arrival: ArrivalPoisson, Rate: 1, Sizes: Fixed(1), Payload: []byte{0}}
	if err := base.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(c *ClientConfig){
		"no server":       func(c *ClientConfig) { c.Server = "" },
		"no port":         func(c *ClientConfig) { c.Server = "127.0.0.1" },
		"negative long":   func(c *ClientConfig) { c.Long = -1 },
		"upload fraction": func(c *ClientConfig) { c.UploadFraction = 1.5 },
		"zero rate":       func(c *ClientConfig) { c.Rate = 0 },
		"no sizes":        func(c *ClientConfig) { c.Sizes = nil },
		"constant zero":   func(c *ClientConfig) { c.Arrival = ArrivalConstant },
		"unknown arrival": func(c *ClientConfig) { c.Arrival = "burst" },
		"nothing":         func(c *ClientConfig) { c.Arrival = ArrivalNone },
	} {
		c := base
		mutate(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// A constant count with a ramp-up rate starts its first flows at Poisson
// times, not all at once. The server never answers, so flows only start.
func TestConstantRampUp(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0") // never accepted: the kernel completes handshakes
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	out := &syncBuffer{}
	cfg := ClientConfig{Server: ln.Addr().String(), Arrival: ArrivalConstant, Concurrent: 10, Rate: 20,
		Sizes: Fixed(1 << 20), Duration: 800 * time.Millisecond, Seed: 5, Payload: NewPayload(5)}
	sum, err := Run(context.Background(), cfg, NewRecorder(out))
	if err != nil {
		t.Fatal(err)
	}
	recs := out.records(t)
	if len(recs) < 3 || len(recs) > 10 || sum.ByStatus[Stopped] != len(recs) {
		t.Fatalf("%d records, summary %+v: want 3..10 stopped flows", len(recs), sum)
	}
	first, last := recs[0].Start, recs[0].Start
	for _, r := range recs {
		first, last = min(first, r.Start), max(last, r.Start)
	}
	if last-first < 0.1 {
		t.Errorf("starts spread over %.3f s; a ramp-up at 20/s spreads them wider", last-first)
	}
}
