package saratoga

import (
	"context"
	"encoding/json"
	"log"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestEfficiency measures get goodput over a lossy, delayed loopback path
// against what the link can carry after frame losses:
//
//	reference = rate x (1 - PER) x payload/frame
//
// where frame is the DATA frame's size on the wire (IP+UDP+Saratoga) and
// PER = 1-(1-BER)^(8 x frame). The Global Hawk case is 8 Mbit/s, 600 ms
// RTT, BER 1e-5 and a 100 MB file. By default RTT and size are both scaled
// down 10x, which keeps the transfer the same number of RTTs long (the
// ratio that decides efficiency, since the loss-recovery tail costs a few
// RTTs); SARATOGA_EFFICIENCY_FULL=1 runs the full-size case (~2 minutes).
//
// The goodput is taken over the transfer's time less the sending time the
// server's pacer lost to host scheduling (its summary's
// pacer_stall_seconds): on a loaded machine the sender can be kept off the
// CPU for half a second, which is the host's cost, not the protocol's. Time
// the protocol itself wastes (waiting on STATUS, a slow loss-recovery tail)
// still counts.
func TestEfficiency(t *testing.T) {
	if testing.Short() {
		t.Skip("efficiency run takes ~12 s")
	}
	const (
		rate = 8_000_000
		ber  = 1e-5
	)
	rtt, size := 60*time.Millisecond, 10<<20
	if os.Getenv("SARATOGA_EFFICIENCY_FULL") != "" {
		rtt, size = 600*time.Millisecond, 100<<20
	}
	// Finer control for experiments: size in MiB and RTT as a duration.
	if v, err := strconv.Atoi(os.Getenv("SARATOGA_EFFICIENCY_MB")); err == nil && v > 0 {
		size = v << 20
	}
	if v, err := time.ParseDuration(os.Getenv("SARATOGA_EFFICIENCY_RTT")); err == nil {
		rtt = v
	}
	serverLog := newSummaryLog(t)
	root := t.TempDir()
	want := writeRandom(t, filepath.Join(root, "f"), size, 9)
	im := impair{seed: 42, delay: rtt / 2, ber: ber}
	ts := startServer(t, &Server{Root: root, RateBPS: rate, AutoDescriptor: true, Checksum: CsumMD5,
		Timeout: 10 * time.Second, Log: log.New(serverLog, "server: ", 0)}, im)
	cc := testClientConn(t, im)
	out := filepath.Join(t.TempDir(), "o")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// Every time constant scales with the RTT, the REQUEST's retry too (1 s
	// at 600 ms): a lost REQUEST must cost the same share of the transfer.
	retry := rtt * 5 / 3
	sum, err := Get(ctx, ClientConfig{Server: ts.addr, Timeout: 10 * time.Second, Conn: cc, RequestRetry: retry},
		"f", out)
	if err != nil {
		t.Fatal(err)
	}
	sameFile(t, out, want)

	desc := DescriptorFor(uint64(size))
	payload := chunkSize(FrameFor(DefaultMTU, 0), desc)
	frame := DataHeaderLen(desc, false) + payload + WireOverhead
	per := 1 - math.Pow(1-ber, float64(frame*8))
	ref := rate * (1 - per) * float64(payload) / float64(frame)
	sent, dropped := ts.conn.counts()
	csent, cdropped := cc.counts()
	stall := serverLog.pacerStall(t)
	if stall >= sum.Seconds/2 {
		t.Fatalf("the server's pacer lost %.2f s of a %.2f s transfer to scheduling: the host is too loaded to measure", stall, sum.Seconds)
	}
	ratio := sum.GoodputBPS * sum.Seconds / (sum.Seconds - stall) / ref
	t.Logf("rate %d bit/s, RTT %v, BER %g, %d bytes, %d-bit descriptor", rate, rtt, ber, size, desc.Bits())
	t.Logf("DATA frame %d B on wire, payload %d B, PER %.4f (measured %.4f over %d DATA frames)",
		frame, payload, per, float64(dropped[TypeData])/float64(sent[TypeData]), sent[TypeData])
	t.Logf("STATUS frames %d sent, %d lost", csent[TypeStatus], cdropped[TypeStatus])
	t.Logf("goodput %.0f bit/s in %.2f s, %.2f s of them the pacer's stalls; reference %.0f bit/s; ratio %.4f",
		sum.GoodputBPS, sum.Seconds, stall, ref, ratio)
	t.Logf("receiver: %d DATA frames, %d filled holes, %d duplicates, %d STATUS, %d holes listed",
		sum.DataFramesReceived, sum.RetransmittedFrames, sum.DuplicateFrames, sum.StatusFrames, sum.HolesRequested)
	if ratio < 0.95 {
		t.Fatalf("goodput %.0f bit/s (less the pacer's stalls) is %.1f%% of reference %.0f bit/s, want >= 95%%",
			sum.GoodputBPS, ratio*100, ref)
	}
}

// summaryLog sends the server's log to the test log and hands over the
// summary of the session it finished.
type summaryLog struct {
	t    *testing.T
	done chan string
}

func newSummaryLog(t *testing.T) *summaryLog {
	return &summaryLog{t: t, done: make(chan string, 1)}
}

func (w *summaryLog) Write(p []byte) (int, error) {
	line := string(p)
	w.t.Log(line)
	if _, js, ok := strings.Cut(line, ": {"); ok && strings.Contains(line, " done in ") {
		select {
		case w.done <- "{" + js:
		default:
		}
	}
	return len(p), nil
}

// pacerStall is the finished session's pacer stall, in seconds. The server
// may log its summary just after the client has its file.
func (w *summaryLog) pacerStall(t *testing.T) float64 {
	t.Helper()
	select {
	case js := <-w.done:
		var sum Summary
		if err := json.Unmarshal([]byte(js), &sum); err != nil {
			t.Fatalf("the server's session summary %q: %v", js, err)
		}
		return sum.PacerStallSeconds
	case <-time.After(10 * time.Second):
		t.Fatal("the server logged no session summary within 10 s of the transfer's end")
		return 0
	}
}
