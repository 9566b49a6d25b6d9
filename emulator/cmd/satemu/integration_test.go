//go:build linux

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"satbed/emulator/internal/netns"
	"satbed/emulator/link"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// satemuBin builds the real binary once per test run.
func satemuBin(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		// Builds satemu and runs it on namespaces: `make test`'s tier, not `make check`'s.
		t.Skip("integration test: skipped under -short")
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "satemu-bin")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "satemu")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %w: %s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

func TestBadConfigExitsTwo(t *testing.T) {
	bin := satemuBin(t)
	dir := t.TempDir()
	cases := map[string]string{
		"negative delay": `{"a_to_b":{"delay_ms":-5},"b_to_a":{}}`,
		"ber":            `{"a_to_b":{"ber":1.5},"b_to_a":{}}`,
		"loss":           `{"a_to_b":{},"b_to_a":{"loss":1}}`,
		"rate 0":         `{"a_to_b":{"rate_bps":0},"b_to_a":{}}`,
		"ceil < rate":    `{"a_to_b":{"rate_bps":8e6,"ceil_bps":1},"b_to_a":{}}`,
		"profile":        `{"a_to_b":{"profile":"missing.csv"},"b_to_a":{}}`,
		"unknown key":    `{"a_to_b":{"delay":5},"b_to_a":{}}`,
		"not json":       `{{{`,
	}
	for name, cfg := range cases {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".json")
			if err := os.WriteFile(p, []byte(cfg), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(bin, "-a", "x0", "-b", "x1", "-config", p)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 2 {
				t.Fatalf("exit %v, want 2; stderr %q", err, stderr.String())
			}
			if s := strings.TrimRight(stderr.String(), "\n"); s == "" || strings.Contains(s, "\n") || strings.Contains(s, "panic") {
				t.Errorf("stderr not one clear line: %q", stderr.String())
			}
		})
	}
}

// env is one namespace chain with satemu running in the middle.
type env struct {
	chain *netns.Chain
	emu   *netns.Satemu
	dir   string
}

func setup(t *testing.T, cfg string) *env {
	t.Helper()
	if !netns.Root() {
		t.Skip("namespace integration test needs root (CAP_NET_ADMIN); skipping")
	}
	bin := satemuBin(t)
	chain, err := netns.New()
	if err != nil {
		t.Fatal(err)
	}
	e := &env{chain: chain, dir: t.TempDir()}
	emu, err := chain.StartSatemu(bin, e.dir, []byte(cfg), strings.Fields(os.Getenv("SATEMU_TEST_FLAGS"))...)
	if err != nil {
		chain.Close()
		t.Fatal(err)
	}
	e.emu = emu
	t.Cleanup(func() {
		if err := e.stop(); err != nil {
			t.Error(err)
		}
		if err := chain.Close(); err != nil {
			t.Error(err)
		}
	})
	return e
}

// stop ends satemu with SIGTERM and checks the exit status and final files.
func (e *env) stop() error {
	if e.emu == nil {
		return nil
	}
	emu := e.emu
	e.emu = nil
	if err := emu.Stop(); err != nil {
		msg, _ := os.ReadFile(filepath.Join(e.dir, "satemu.stderr"))
		return fmt.Errorf("satemu stop: %w; stderr: %s", err, msg)
	}
	data, err := os.ReadFile(filepath.Join(emu.StatsDir, "emulator.json"))
	if err != nil {
		return err
	}
	var rep struct {
		Seed   *uint64                    `json:"seed"`
		Config map[string]json.RawMessage `json:"config"`
		Totals struct {
			Dirs map[string]json.RawMessage `json:"directions"`
		} `json:"totals"`
	}
	if err := json.Unmarshal(data, &rep); err != nil {
		return fmt.Errorf("emulator.json: %w", err)
	}
	if rep.Seed == nil || len(rep.Config) != 2 || len(rep.Totals.Dirs) != 2 {
		return fmt.Errorf("emulator.json incomplete: %s", data)
	}
	ts, err := os.ReadFile(filepath.Join(emu.StatsDir, "emulator_timeseries.csv"))
	if err != nil {
		return err
	}
	if !strings.HasPrefix(string(ts), "t_s,direction,") || strings.Count(string(ts), "\n") < 3 {
		return fmt.Errorf("timeseries too short: %q", ts)
	}
	return nil
}

func (e *env) udpPair(t *testing.T, port int) (snd, rcv *net.UDPConn, dst *net.UDPAddr) {
	t.Helper()
	rcv, err := netns.ListenUDP(e.chain.Recv, fmt.Sprintf("%s:%d", netns.ReceiverIP, port))
	if err != nil {
		t.Fatal(err)
	}
	snd, err = netns.ListenUDP(e.chain.Sender, netns.SenderIP+":0")
	if err != nil {
		rcv.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { snd.Close(); rcv.Close() })
	return snd, rcv, &net.UDPAddr{IP: net.ParseIP(netns.ReceiverIP), Port: port}
}

var pingTime = regexp.MustCompile(`icmp_seq=(\d+) ttl=\d+ time=([0-9.]+) ms`)

// pingRTTs pings the receiver from the sender and returns the RTTs in ms of
// every echo but the first, whose RTT includes ARP resolution through the
// emulator.
// awaitAccounted waits until every one of sent datagrams is either in the
// sink or counted as dropped by the emulator's a_to_b direction: the test
// then reads final figures, whatever the link's delay and the machine's load.
func (e *env) awaitAccounted(t *testing.T, sink *netns.Sink, sent int) {
	t.Helper()
	end := time.Now().Add(5 * time.Second)
	for {
		st, err := e.emu.DirStats("a_to_b")
		if err != nil {
			t.Fatal(err)
		}
		dropped := 0
		for _, n := range st["drops"].(map[string]any) {
			dropped += int(n.(float64))
		}
		if sink.Count()+dropped >= sent {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("after 5s: %d received + %d dropped of %d sent", sink.Count(), dropped, sent)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (e *env) pingRTTs(t *testing.T, count int) []float64 {
	t.Helper()
	out, err := netns.Command(e.chain.Sender, "ping", "-n", "-c", strconv.Itoa(count), "-i", "0.2", "-W", "3", netns.ReceiverIP).CombinedOutput()
	if err != nil {
		t.Fatalf("ping: %v\n%s", err, out)
	}
	var rtts []float64
	for _, m := range pingTime.FindAllStringSubmatch(string(out), -1) {
		if m[1] == "1" {
			continue
		}
		v, _ := strconv.ParseFloat(m[2], 64)
		rtts = append(rtts, v)
	}
	if len(rtts) != count-1 {
		t.Fatalf("got %d echoes, want %d:\n%s", len(rtts), count-1, out)
	}
	return rtts
}

func TestARPAndPing(t *testing.T) {
	e := setup(t, `{"seed":3,"sample_ms":50,"a_to_b":{"delay_ms":50},"b_to_a":{"delay_ms":50}}`)
	// Never early; how late depends on the machine's load, which is the
	// benchmark's business (satemu-bench measures the delay error), not a test's.
	for _, v := range e.pingRTTs(t, 5) {
		if v < 99.9 || v > 400 {
			t.Errorf("ping rtt %v ms, want 100 and not much more", v)
		}
	}
	// ARP went through the emulator (the receiver learnt the sender's MAC).
	neigh, err := netns.Command(e.chain.Recv, "ip", "neigh", "show", netns.SenderIP).CombinedOutput()
	if err != nil || !strings.Contains(string(neigh), "lladdr") {
		t.Errorf("receiver has no neighbour entry for the sender: %s %v", neigh, err)
	}
}

func TestRTTUnderUDPEcho(t *testing.T) {
	e := setup(t, `{"seed":4,"a_to_b":{"delay_ms":50},"b_to_a":{"delay_ms":50}}`)
	snd, rcv, dst := e.udpPair(t, 7001)
	go netns.Echo(rcv)
	e.pingRTTs(t, 2) // resolve ARP first
	rtts := netns.Probe(snd, dst, 10*time.Millisecond, 3*time.Second, 300*time.Millisecond)
	if len(rtts) < 100 {
		st, _ := e.emu.DirStats("a_to_b")
		t.Fatalf("only %d probe answers; %v", len(rtts), st)
	}
	p50, p99 := netns.Quantile(rtts, 0.5), netns.Quantile(rtts, 0.99)
	st, err := e.emu.DirStats("a_to_b")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("RTT p50 %v p99 %v (configured 100ms); satemu lateness p50 %vus p99 %vus max %vus",
		p50, p99, st["tx_late_p50_us"], st["tx_late_p99_us"], st["tx_late_max_us"])
	// Never early, and the delay applied once per direction, not twice: the
	// fastest answer says both, since a busy or descheduled machine only
	// ever adds time (a VM's stolen CPU once put the p50 at 170 ms). How close
	// to 100 ms is satemu-bench's figure (-only rtt), not a test's.
	fastest := netns.Quantile(rtts, 0)
	if fastest < 100*time.Millisecond || fastest >= 150*time.Millisecond {
		t.Errorf("fastest RTT %v, want it in [100,150) ms", fastest)
	}
}

func TestUDPRate(t *testing.T) {
	e := setup(t, `{"seed":5,"a_to_b":{"rate_bps":8000000,"delay_ms":10},"b_to_a":{"delay_ms":10}}`)
	snd, rcv, dst := e.udpPair(t, 7002)
	var sink netns.Sink
	go sink.RunSink(rcv)
	start := time.Now()
	sent, err := netns.Blast(context.Background(), snd, dst, 1458, 12e6, 4*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	e.awaitAccounted(t, &sink, sent)
	got := sink.WireRate(start.Add(time.Second), start.Add(4*time.Second))
	t.Logf("wire rate %.0f bit/s (configured 8000000)", got)
	if math.Abs(got-8e6)/8e6 > 0.02 {
		t.Errorf("wire rate %.0f, want 8e6 +-2%%", got)
	}
	st, err := e.emu.DirStats("a_to_b")
	if err != nil {
		t.Fatal(err)
	}
	if d := st["drops"].(map[string]any)["queue"].(float64); d == 0 {
		t.Error("no queue drops while offering 12 Mbit/s to an 8 Mbit/s link")
	}
	if hw := st["queue_high_water_packets"].(float64); hw != 1000 {
		t.Errorf("queue high water %v, want the 1000-packet limit", hw)
	}
}

func TestOutageDropsWhileDown(t *testing.T) {
	e := setup(t, `{"seed":6,"a_to_b":{"outage":{"period_s":2,"down_s":1,"offset_s":0.5}},"b_to_a":{}}`)
	snd, rcv, dst := e.udpPair(t, 7003)
	var sink netns.Sink
	go sink.RunSink(rcv)
	// Paced at 1000 datagrams/s for 4 s: two full cycles.
	sent, err := netns.Blast(context.Background(), snd, dst, 100, 1000*(100+netns.WireOverhead)*8, 4*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	e.awaitAccounted(t, &sink, sent)
	st, err := e.emu.DirStats("a_to_b")
	if err != nil {
		t.Fatal(err)
	}
	outage := st["drops"].(map[string]any)["outage"].(float64)
	got := sink.Count()
	t.Logf("sent %d received %d outage drops %.0f", sent, got, outage)
	if got+int(outage) != sent {
		t.Errorf("received %d + outage drops %.0f != sent %d", got, outage, sent)
	}
	if f := outage / float64(sent); f < 0.4 || f > 0.6 {
		t.Errorf("outage drop fraction %.3f, want ~0.5", f)
	}
	// While down nothing passes: the received sequence numbers form runs
	// separated by gaps of about one second's worth of datagrams.
	seqs := sink.Seqs()
	gaps := 0
	for i := 1; i < len(seqs); i++ {
		if d := seqs[i] - seqs[i-1]; d > 1 {
			gaps++
			if d < 700 {
				t.Errorf("gap of %d datagrams, want ~1000", d)
			}
		}
	}
	if gaps < 1 {
		t.Errorf("no outage gap in the received sequence")
	}
}

func TestBERLoss(t *testing.T) {
	const ber = 1e-5
	e := setup(t, fmt.Sprintf(`{"seed":7,"a_to_b":{"ber":%g},"b_to_a":{}}`, ber))
	snd, rcv, dst := e.udpPair(t, 7004)
	var sink netns.Sink
	go sink.RunSink(rcv)
	const payload = 1500 - netns.WireOverhead
	sent, err := netns.Blast(context.Background(), snd, dst, payload, 40e6, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	e.awaitAccounted(t, &sink, sent)
	st, err := e.emu.DirStats("a_to_b")
	if err != nil {
		t.Fatal(err)
	}
	in := st["frames_in"].(float64)
	lost := float64(sent - sink.Count())
	per := link.PER(ber, 1500)
	sd := math.Sqrt(per * (1 - per) / float64(sent))
	t.Logf("sent %d lost %.0f (%.4f), formula %.4f, frames_in %.0f", sent, lost, lost/float64(sent), per, in)
	if math.Abs(lost/float64(sent)-per) > 4*sd {
		t.Errorf("loss %.4f, want %.4f +- %.4f", lost/float64(sent), per, 4*sd)
	}
	if ber := st["drops"].(map[string]any)["ber"].(float64); ber != lost {
		t.Errorf("ber drops %.0f != lost %.0f", ber, lost)
	}
}

// TestPacketLoss sets loss live through the control socket and sends small,
// then large datagrams: each size loses the configured share, and every
// loss is counted as such.
func TestPacketLoss(t *testing.T) {
	const loss = 0.1
	e := setup(t, `{"a_to_b":{},"b_to_a":{}}`)
	snd, rcv, dst := e.udpPair(t, 7005)
	var sink netns.Sink
	go sink.RunSink(rcv)
	e.pingRTTs(t, 2) // resolve ARP before frames start to go
	if r, err := e.emu.Request(fmt.Sprintf(`{"op":"set","dir":"a_to_b","params":{"loss":%g}}`, loss)); err != nil || r["ok"] != true {
		t.Fatalf("set: %v %v", r, err)
	}
	sent, received := 0, 0
	for _, payload := range []int{64, 1500 - netns.WireOverhead} {
		// 2,500 datagrams a second for 2 s.
		n, err := netns.Blast(context.Background(), snd, dst, payload, 2500*float64(payload+netns.WireOverhead)*8, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		sent += n
		e.awaitAccounted(t, &sink, sent)
		got := sink.Count() - received
		received += got
		f := float64(n-got) / float64(n)
		sd := math.Sqrt(loss * (1 - loss) / float64(n))
		t.Logf("%d-byte frames: sent %d lost %d (%.4f)", payload+netns.WireOverhead, n, n-got, f)
		if math.Abs(f-loss) > 4*sd {
			t.Errorf("%d-byte frames: lost %.4f, want %.2f +- %.4f", payload+netns.WireOverhead, f, loss, 4*sd)
		}
	}
	st, err := e.emu.DirStats("a_to_b")
	if err != nil {
		t.Fatal(err)
	}
	if lost := st["drops"].(map[string]any)["loss"].(float64); lost != float64(sent-received) {
		t.Errorf("loss drops %.0f != lost %d", lost, sent-received)
	}
	if st["loss"] != loss {
		t.Errorf("loss in force %v, want %v", st["loss"], loss)
	}
}

func TestControlSet(t *testing.T) {
	e := setup(t, `{"seed":8,"a_to_b":{"delay_ms":5},"b_to_a":{"delay_ms":5}}`)
	r, err := e.emu.Request(`{"op":"set","dir":"both","params":{"delay_ms":40}}`)
	if err != nil || r["ok"] != true {
		t.Fatalf("set: %v %v", r, err)
	}
	r, err = e.emu.Request(`{"op":"set","dir":"a_to_b","params":{"ber":2}}`)
	if err != nil || r["ok"] != false || !strings.Contains(fmt.Sprint(r["error"]), "ber") {
		t.Fatalf("invalid set: %v %v", r, err)
	}
	// The new delay, applied once: not the old 10 ms, never early, not
	// doubled. A loaded host delays some echoes (lateness is the
	// benchmark's business), so "once" is judged on the fastest echo: a
	// doubled delay makes every one at least 160 ms.
	rtts := e.pingRTTs(t, 4)
	fastest := math.Inf(1)
	for _, v := range rtts {
		if v < 79.9 {
			t.Errorf("rtt after set %v ms, earlier than the 80 ms set", v)
		}
		fastest = math.Min(fastest, v)
	}
	if fastest >= 150 {
		t.Errorf("fastest rtt after set %v ms (all %v), want 80: the delay applied twice?", fastest, rtts)
	}
	// Loss is set after the pings, so that it cannot cost an echo; get
	// reports it as set, and a refused set leaves it alone.
	r, err = e.emu.Request(`{"op":"set","dir":"b_to_a","params":{"loss":0.001}}`)
	if err != nil || r["ok"] != true {
		t.Fatalf("loss set: %v %v", r, err)
	}
	r, err = e.emu.Request(`{"op":"set","dir":"b_to_a","params":{"loss":1}}`)
	if err != nil || r["ok"] != false || !strings.Contains(fmt.Sprint(r["error"]), "b_to_a: loss 1 outside [0,1)") {
		t.Fatalf("invalid loss set: %v %v", r, err)
	}
	r, err = e.emu.Request(`{"op":"get"}`)
	if err != nil {
		t.Fatal(err)
	}
	dirs := r["config"].(map[string]any)["directions"].(map[string]any)
	for name, want := range map[string]float64{"a_to_b": 0, "b_to_a": 0.001} {
		if got := dirs[name].(map[string]any)["effective"].(map[string]any)["loss"]; got != want {
			t.Errorf("get %s: loss %v, want %v", name, got, want)
		}
	}
}

func TestProfileAndGilbertElliott(t *testing.T) {
	if !netns.Root() {
		t.Skip("namespace integration test needs root (CAP_NET_ADMIN); skipping")
	}
	prof := filepath.Join(t.TempDir(), "leo.csv")
	// One-way delay 20 ms, then 60 ms from t = 2.5 s.
	if err := os.WriteFile(prof, []byte("t_s,delay_ms\n0,20\n2.5,60\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e := setup(t, fmt.Sprintf(`{"seed":9,"a_to_b":{"profile":%q},"b_to_a":{"gilbert_elliott":{"p":0.1,"r":0.5,"loss_bad":1}}}`, prof))
	out, _ := netns.Command(e.chain.Sender, "ping", "-n", "-c", "40", "-i", "0.1", "-W", "1", netns.ReceiverIP).CombinedOutput()
	var early, late int
	for _, m := range pingTime.FindAllStringSubmatch(string(out), -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		switch {
		case v >= 19.9 && v < 25:
			early++
		case v >= 59.9 && v < 65:
			late++
		}
	}
	if early < 5 || late < 5 {
		t.Errorf("RTTs did not follow the profile (20 ms then 60 ms): %d early, %d late\n%s", early, late, out)
	}
	st, err := e.emu.DirStats("b_to_a")
	if err != nil {
		t.Fatal(err)
	}
	// Stationary loss p/(p+r) = 17%; with about 40 replies, expect a few.
	if ge := st["drops"].(map[string]any)["gilbert_elliott"].(float64); ge < 1 || ge > 20 {
		t.Errorf("gilbert_elliott drops %v, want a few of ~40", ge)
	}
}
