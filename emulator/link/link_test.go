package link

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

func TestPERFormula(t *testing.T) {
	tests := []struct {
		ber   float64
		bytes int
		want  float64
	}{
		{0, 1500, 0},
		{1e-5, 1500, 1 - math.Pow(1-1e-5, 12000)},
		{1e-7, 64, 1 - math.Pow(1-1e-7, 512)},
		{1e-9, 1500, 1.2e-5},
		{0.5, 1, 1 - 1.0/256},
	}
	for _, tc := range tests {
		got := PER(tc.ber, tc.bytes)
		if math.Abs(got-tc.want) > 1e-9*math.Max(1, tc.want) && math.Abs(got-tc.want)/tc.want > 1e-6 {
			t.Errorf("PER(%g,%d)=%g want %g", tc.ber, tc.bytes, got, tc.want)
		}
	}
}

// TestPERStatistical pushes many frames through an unshaped pipeline and
// checks the drop fraction against the formula within 4 standard deviations.
func TestPERStatistical(t *testing.T) {
	for _, size := range []int{64, 576, 1500} {
		pl := NewPipeline(Params{BER: 1e-4}, 42, 0)
		const n = 40000
		for i := 0; i < n; i++ {
			pl.Arrive(time.Duration(i)*time.Microsecond, size)
		}
		p := PER(1e-4, size)
		got := float64(pl.Counters().Drops[DropBER]) / n
		sd := math.Sqrt(p * (1 - p) / n)
		if math.Abs(got-p) > 4*sd {
			t.Errorf("size %d: loss %.4f, formula %.4f (sd %.4f)", size, got, p, sd)
		}
	}
}

// TestLossStatistical checks netem's meaning of loss: the same share of
// small and large frames is lost, a loss does not make the next frame more
// likely to go (no bursts), and the frames go to the loss counter alone.
func TestLossStatistical(t *testing.T) {
	const loss, n = 0.1, 200000
	sizes := [2]int{64, 1514}
	pl := NewPipeline(Params{Loss: loss}, 42, 0)
	var in, lost [2]float64
	var afterLoss, lostAfterLoss float64
	prev := false
	for i := 0; i < n; i++ {
		k := i % 2
		v := pl.Arrive(time.Duration(i)*time.Microsecond, sizes[k])
		in[k]++
		dropped := v.Cause != None
		if dropped {
			lost[k]++
			if v.Cause != DropLoss {
				t.Fatalf("frame %d dropped by %v", i, v.Cause)
			}
		}
		if prev {
			afterLoss++
			if dropped {
				lostAfterLoss++
			}
		}
		prev = dropped
	}
	// Four standard deviations: about 0.4 percentage points per size here.
	sd := func(n float64) float64 { return math.Sqrt(loss * (1 - loss) / n) }
	for k, size := range sizes {
		if f := lost[k] / in[k]; math.Abs(f-loss) > 4*sd(in[k]) {
			t.Errorf("%d-byte frames: lost %.4f, want %.2f +- %.4f", size, f, loss, 4*sd(in[k]))
		}
	}
	small, large := lost[0]/in[0], lost[1]/in[1]
	if d := math.Abs(small - large); d > 4*math.Sqrt2*sd(in[0]) {
		t.Errorf("loss depends on size: %.4f of %d-byte frames, %.4f of %d-byte", small, sizes[0], large, sizes[1])
	}
	if f := lostAfterLoss / afterLoss; math.Abs(f-loss) > 4*sd(afterLoss) {
		t.Errorf("lost after a loss %.4f, want %.2f: losses are not independent", f, loss)
	}
	c := pl.Counters()
	if c.Drops[DropLoss] != uint64(lost[0]+lost[1]) || c.Drops[DropBER] != 0 || c.FramesIn != n {
		t.Errorf("counters %+v, want %v loss drops", c, lost[0]+lost[1])
	}
}

func TestLossZeroDropsNothing(t *testing.T) {
	pl := NewPipeline(Params{}, 42, 0)
	for i := 0; i < 200000; i++ {
		pl.Arrive(time.Duration(i)*time.Microsecond, 64+i%1451)
	}
	if c := pl.Counters(); c.Drops != [NumCauses]uint64{} {
		t.Errorf("drops %v with no loss configured", c.Drops)
	}
}

// TestLossWithBER: both models at once, each drawn on its own: a frame is
// lost with 1-(1-loss)(1-PER), and loss, drawn first, takes its full share.
func TestLossWithBER(t *testing.T) {
	const loss, ber, size, n = 0.05, 2e-5, 1514, 100000
	pl := NewPipeline(Params{Loss: loss, BER: ber}, 9, 1)
	for i := 0; i < n; i++ {
		pl.Arrive(time.Duration(i)*time.Microsecond, size)
	}
	c := pl.Counters()
	per := PER(ber, size)
	for _, k := range []struct {
		what string
		got  uint64
		want float64
	}{
		{"loss", c.Drops[DropLoss], loss},
		{"ber", c.Drops[DropBER], (1 - loss) * per},
		{"total", c.Drops[DropLoss] + c.Drops[DropBER], 1 - (1-loss)*(1-per)},
	} {
		f, sd := float64(k.got)/n, math.Sqrt(k.want*(1-k.want)/n)
		if math.Abs(f-k.want) > 4*sd {
			t.Errorf("%s: %.4f of frames, want %.4f +- %.4f", k.what, f, k.want, 4*sd)
		}
	}
}

// TestLossRepeatable: NewPipeline's two PRNG numbers alone decide which
// frames are lost, and a link without loss draws exactly one number per
// frame for its BER, as it did before loss existed, so older runs repeat.
func TestLossRepeatable(t *testing.T) {
	fates := func(p Params, key, stream uint64) []Cause {
		pl := NewPipeline(p, key, stream)
		out := make([]Cause, 5000)
		for i := range out {
			out[i] = pl.Arrive(time.Duration(i)*time.Microsecond, 200+i%1300).Cause
		}
		return out
	}
	p := Params{Loss: 0.1, BER: 1e-5}
	a := fates(p, 7, 0)
	if b := fates(p, 7, 0); !slices.Equal(a, b) {
		t.Error("same PRNG numbers, different losses")
	}
	if b := fates(p, 7, 1); slices.Equal(a, b) {
		t.Error("other stream, same losses")
	}
	if b := fates(p, 8, 0); slices.Equal(a, b) {
		t.Error("other first PRNG number, same losses")
	}
	rng := rand.New(rand.NewPCG(7, 0))
	for i, c := range fates(Params{BER: 1e-4}, 7, 0) {
		want := None
		if rng.Float64() < PER(1e-4, 200+i%1300) {
			want = DropBER
		}
		if c != want {
			t.Fatalf("frame %d: %v, want %v: loss 0 changed the BER draws", i, c, want)
		}
	}
}

func TestShaperSustainedRate(t *testing.T) {
	// No ceil: a plain token bucket; 1500-byte frames every 1.5 ms at 8 Mbit/s.
	sh := NewShaper(8e6, 8e6, 1600, 1600)
	var exits []time.Duration
	var last time.Duration
	for i := 0; i < 100; i++ {
		last = sh.Admit(last, 1500)
		exits = append(exits, last)
	}
	for i := 3; i < len(exits); i++ {
		if d := exits[i] - exits[i-1]; d < 1499*time.Microsecond || d > 1501*time.Microsecond {
			t.Fatalf("gap %d = %v, want 1.5ms", i, d)
		}
	}
}

func TestShaperCeilBurst(t *testing.T) {
	// The study's class: rate 8M, ceil 10M, cburst 128k. From idle, about
	// cburst bytes should leave at ceil, then the rate settles at 8M.
	const rate, ceil, burst, cburst = 8e6, 10e6, 1600, 131072
	sh := NewShaper(rate, ceil, burst, cburst)
	var last time.Duration
	var exits []time.Duration
	for i := 0; i < 2000; i++ {
		last = sh.Admit(last, 1500)
		exits = append(exits, last)
	}
	// Count frames sent at ceil pacing (gap 1.2 ms) from the start.
	fast := 0
	for i := 2; i < len(exits); i++ {
		if exits[i]-exits[i-1] < 1300*time.Microsecond {
			fast++
		} else {
			break
		}
	}
	bytesAtCeil := (fast + 2) * 1500
	if math.Abs(float64(bytesAtCeil-cburst)) > 2*1500 {
		t.Errorf("bytes at ceil = %d, want about %d", bytesAtCeil, cburst)
	}
	// Long-run rate over the last 1000 frames.
	span := exits[1999] - exits[999]
	got := 1000 * 1500 * 8 / span.Seconds()
	if math.Abs(got-rate)/rate > 0.001 {
		t.Errorf("sustained rate %.0f, want %.0f", got, rate)
	}
	// Peak: no 10-frame window faster than ceil (beyond the burst bucket).
	for i := 10; i < len(exits); i++ {
		bits := float64(9 * 1500 * 8)
		if d := (exits[i] - exits[i-9]).Seconds(); d > 0 && bits/d > ceil*1.01 && i > 3 {
			t.Fatalf("window ending %d: %.0f bit/s exceeds ceil", i, bits/d)
		}
	}
}

func TestShaperIdleRefill(t *testing.T) {
	sh := NewShaper(8e6, 10e6, 1600, 131072)
	var last time.Duration
	for i := 0; i < 500; i++ {
		last = sh.Admit(last, 1500)
	}
	// After a long idle period the burst is available again.
	start := last + 10*time.Second
	if got := sh.Admit(start, 1500); got != start {
		t.Fatalf("after idle: exit %v, want %v", got, start)
	}
}

func TestDefaultBurst(t *testing.T) {
	if got := DefaultBurst(8e6); got != 1600 {
		t.Errorf("DefaultBurst(8M)=%d want 1600", got)
	}
	if got := DefaultBurst(80e9); got != 1610 {
		t.Errorf("DefaultBurst(80G)=%d want 1610", got)
	}
}

func TestQueueLimits(t *testing.T) {
	tests := []struct {
		name        string
		pkts, bytes int
		wantDrops   uint64
	}{
		// Two frames pass at once (burst 1600 allows the second to start
		// with 100 tokens left), ten wait, eight are dropped.
		{"packets", 10, 0, 8},
		{"bytes", 0, 15000, 8},
		{"both", 20, 4500, 15},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pl := NewPipeline(Params{RateBps: 8e6, CeilBps: 8e6, Burst: 1600, CBurst: 1600,
				QueuePackets: tc.pkts, QueueBytes: tc.bytes}, 1, 0)
			for i := 0; i < 20; i++ {
				pl.Arrive(0, 1500)
			}
			c := pl.Counters()
			if c.Drops[DropQueue] != tc.wantDrops {
				t.Errorf("drops %d want %d", c.Drops[DropQueue], tc.wantDrops)
			}
			if n, b := pl.QueueLen(0); n != 18-int(tc.wantDrops) || b != n*1500 {
				t.Errorf("queue %d/%d", n, b)
			}
			if c.QueueHWPackets != 18-int(tc.wantDrops) {
				t.Errorf("high water %d", c.QueueHWPackets)
			}
			// The queue drains at the shaping rate.
			if n, _ := pl.QueueLen(time.Second); n != 0 {
				t.Errorf("queue after 1s: %d", n)
			}
		})
	}
}

func TestOutageSchedule(t *testing.T) {
	o := &Outage{Period: 40 * time.Second, Down: 10 * time.Second, Offset: 5 * time.Second}
	tests := []struct {
		t    time.Duration
		down bool
	}{
		{0, false}, {4999 * time.Millisecond, false}, {5 * time.Second, true},
		{14999 * time.Millisecond, true}, {15 * time.Second, false},
		{44 * time.Second, false}, {45 * time.Second, true}, {85 * time.Second, true},
	}
	for _, tc := range tests {
		if got := o.IsDown(tc.t); got != tc.down {
			t.Errorf("IsDown(%v)=%v want %v", tc.t, got, tc.down)
		}
	}
	var nilO *Outage
	if nilO.IsDown(time.Second) {
		t.Error("nil outage is down")
	}
	// Through a pipeline: a quarter of evenly spaced frames is lost.
	pl := NewPipeline(Params{Outage: &Outage{Period: 40 * time.Second, Down: 10 * time.Second}}, 1, 0)
	for i := 0; i < 4000; i++ {
		pl.Arrive(time.Duration(i)*10*time.Millisecond, 100)
	}
	if d := pl.Counters().Drops[DropOutage]; d != 1000 {
		t.Errorf("outage drops %d want 1000", d)
	}
}

func TestSchedulesHeldThenStarted(t *testing.T) {
	pl := NewPipeline(Params{Delay: 250 * time.Millisecond,
		Outage: &Outage{Period: 40 * time.Second, Down: 10 * time.Second}}, 1, 0)
	pl.HoldSchedules()
	// Held: the link is up through what would be the first outage.
	for _, at := range []time.Duration{0, 5 * time.Second, 9 * time.Second} {
		if c := pl.Effective(at); !c.Up || c.Delay != 250*time.Millisecond {
			t.Errorf("held at %v: up=%v delay=%v", at, c.Up, c.Delay)
		}
	}
	// Started at 100 s: the schedule counts from there.
	pl.StartSchedules(100 * time.Second)
	tests := []struct {
		at   time.Duration
		down bool
	}{{100 * time.Second, true}, {109 * time.Second, true}, {110 * time.Second, false}, {140 * time.Second, true}}
	for _, tc := range tests {
		if up := pl.Effective(tc.at).Up; up == tc.down {
			t.Errorf("started at 100 s, at %v: up=%v want down=%v", tc.at, up, tc.down)
		}
	}
}

func TestGilbertElliott(t *testing.T) {
	g := &GE{P: 0.1, R: 0.4, LossBad: 1}
	var s GEState
	rng := rand.New(rand.NewPCG(7, 0))
	const n = 200000
	lost, bursts, run := 0, 0, 0
	for i := 0; i < n; i++ {
		if s.Step(g, rng, 1500) {
			lost++
			run++
		} else if run > 0 {
			bursts++
			run = 0
		}
	}
	// Stationary bad fraction p/(p+r) = 0.2, mean burst 1/r = 2.5 frames.
	if f := float64(lost) / n; math.Abs(f-0.2) > 0.01 {
		t.Errorf("loss fraction %.4f want 0.2", f)
	}
	if m := float64(lost) / float64(bursts); math.Abs(m-2.5) > 0.1 {
		t.Errorf("mean burst %.3f want 2.5", m)
	}
}

func TestProfileFollowAndNoReorder(t *testing.T) {
	prof, err := ParseProfile([]byte("t_s,delay_ms,ber,up,rate_bps\n0,300,,,\n1,100,,,\n2,,0.999,,\n3,,0,false,\n4,,,true,\n"))
	if err != nil {
		t.Fatal(err)
	}
	pl := NewPipeline(Params{Delay: 50 * time.Millisecond, Profile: prof}, 1, 0)
	var last time.Duration
	counts := map[string]int{}
	for i := 0; i < 5000; i++ {
		now := time.Duration(i) * time.Millisecond
		v := pl.Arrive(now, 1000)
		counts[v.Cause.String()]++
		if v.Cause != None {
			continue
		}
		if v.Depart < last {
			t.Fatalf("reordered at %v", now)
		}
		last = v.Depart
		switch {
		case now < time.Second && v.Depart != now+300*time.Millisecond:
			t.Fatalf("t=%v depart %v want +300ms", now, v.Depart)
		case now >= 1300*time.Millisecond && now < 2*time.Second && v.Depart != now+100*time.Millisecond:
			t.Fatalf("t=%v depart %v want +100ms", now, v.Depart)
		case now >= time.Second && now < 1300*time.Millisecond && v.Depart != max(now+100*time.Millisecond, 1299*time.Millisecond):
			// Frames after the delay drop wait behind the last 300 ms frame.
			t.Fatalf("t=%v depart %v want held at 1.299s", now, v.Depart)
		}
	}
	if counts["outage"] != 1000 {
		t.Errorf("outage drops %d want 1000", counts["outage"])
	}
	if counts["ber"] < 990 {
		t.Errorf("ber drops %d want ~1000", counts["ber"])
	}
}

// TestProfileLoss: a profile's loss replaces the configured one from its
// point on, in CSV and JSON alike.
func TestProfileLoss(t *testing.T) {
	for _, text := range []string{
		"t_s,loss\n1,0.5\n2,0\n",
		`[{"t_s":1,"loss":0.5},{"t_s":2,"loss":0}]`,
	} {
		prof, err := ParseProfile([]byte(text))
		if err != nil {
			t.Fatal(err)
		}
		pl := NewPipeline(Params{Loss: 0.2, Profile: prof}, 1, 0)
		var lost [3]float64
		for i := 0; i < 30000; i++ {
			now := time.Duration(i) * 100 * time.Microsecond
			if pl.Arrive(now, 1000).Cause == DropLoss {
				lost[now/time.Second]++
			}
		}
		// 10,000 frames a second: 4 sd is under 0.02 at these shares.
		for sec, want := range []float64{0.2, 0.5, 0} {
			if f := lost[sec] / 10000; math.Abs(f-want) > 0.02 {
				t.Errorf("%q: second %d lost %.3f, want %.1f", text, sec, f, want)
			}
		}
		if got := pl.Effective(1500 * time.Millisecond).Loss; got != 0.5 {
			t.Errorf("%q: loss in force at 1.5 s %v, want 0.5", text, got)
		}
	}
}

func TestProfileRate(t *testing.T) {
	prof, err := ParseProfile([]byte(`[{"t_s":0,"rate_bps":8000000},{"t_s":10,"rate_bps":1000000}]`))
	if err != nil {
		t.Fatal(err)
	}
	pl := NewPipeline(Params{RateBps: 100e6, CeilBps: 100e6, Burst: 1600, CBurst: 1600, Profile: prof}, 1, 0)
	var a, b time.Duration
	for i := 0; i < 100; i++ {
		a = pl.Arrive(0, 1000).Exit
	}
	if want := 99 * time.Millisecond; a < want-2*time.Millisecond || a > want+time.Millisecond {
		t.Errorf("100 frames at 8M end at %v", a)
	}
	for i := 0; i < 10; i++ {
		b = pl.Arrive(20*time.Second, 1000).Exit
	}
	// Bucket of 1600 bytes: two frames at once, then 400 bytes of debt, then
	// one 1000-byte frame per 8 ms: 3.2 ms + 7 * 8 ms.
	if want := 20*time.Second + 59200*time.Microsecond; b < want-time.Millisecond || b > want+time.Millisecond {
		t.Errorf("10 frames at 1M end at %v", b)
	}
}

func TestProfileParseErrors(t *testing.T) {
	bad := []string{
		"",
		"ber\n0.1\n",
		"t_s,foo\n1,2\n",
		"t_s,ber\n1,2\n",
		"t_s,loss\n0,1\n",
		"t_s,loss\n0,-0.1\n",
		"t_s,loss\n0,NaN\n",
		"t_s,loss\n0,+Inf\n",
		"t_s,loss,loss\n0,0,0\n",
		"t_s,ber\n2,0\n1,0\n",
		"t_s,up\n1,maybe\n",
		"t_s,delay_ms\n-1,5\n",
		`[{"t_s":1,"bogus":2}]`,
		`[{"ber":0.1}]`,
		`[{"t_s":0,"rate_bps":0}]`,
		`[{"t_s":0,"loss":1}]`,
		`[{"t_s":0,"loss":"0.1"}]`,
		`[{"t_s":0}] x`,
	}
	for _, s := range bad {
		if _, err := ParseProfile([]byte(s)); err == nil {
			t.Errorf("ParseProfile(%q) accepted", s)
		}
	}
}

func FuzzParseProfile(f *testing.F) {
	f.Add([]byte("t_s,ber,delay_ms,rate_bps,up\n0,1e-5,300,8000000,true\n10,,250,,false\n"))
	f.Add([]byte(`[{"t_s":0,"ber":1e-7},{"t_s":5.5,"delay_ms":120,"up":false}]`))
	f.Add([]byte("# comment\nt_s\n1\n"))
	f.Add([]byte("t_s,loss,ber\n0,0.1,1e-6\n2,0,\n3,0.999,\n"))
	f.Add([]byte(`[{"t_s":0,"loss":0.25},{"t_s":1,"loss":0}]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParseProfile(data)
		if err != nil {
			if strings.TrimSpace(err.Error()) == "" {
				t.Fatal("empty error")
			}
			return
		}
		// Only probabilities get through.
		for _, s := range []series{p.ber, p.loss} {
			for _, st := range s {
				if !(st.v >= 0 && st.v < 1) {
					t.Fatalf("accepted probability %v", st.v)
				}
			}
		}
		// Whatever parsed must be usable.
		pl := NewPipeline(Params{RateBps: 1e6, CeilBps: 1e6, Burst: 1600, CBurst: 1600, Profile: p}, 1, 0)
		for i := 0; i < 10; i++ {
			pl.Arrive(time.Duration(i)*time.Second, 1500)
		}
	})
}

func BenchmarkArrive(b *testing.B) {
	pl := NewPipeline(Params{RateBps: 1e9, CeilBps: 1e9, Burst: 1600, CBurst: 1600, Delay: 300 * time.Millisecond,
		BER: 1e-7, QueuePackets: 1000, Outage: &Outage{Period: 40 * time.Second, Down: 10 * time.Second}}, 1, 0)
	for i := 0; i < b.N; i++ {
		pl.Arrive(time.Duration(i)*12*time.Microsecond, 1514)
	}
}

// TestProfileRateOnScheduleClock: a profile's rate steps at the same
// schedule time as its delay, counted from the origin StartSchedules set,
// and the configured rate holds while the schedules are held.
func TestProfileRateOnScheduleClock(t *testing.T) {
	prof, err := ParseProfile([]byte("t_s,rate_bps,delay_ms\n0,8000000,300\n10,1000000,100\n"))
	if err != nil {
		t.Fatal(err)
	}
	const origin = 100 * time.Second
	tests := []struct {
		name      string
		held      bool
		at        time.Duration // arrival on the emulator's clock
		wantRate  float64       // in force at the arrival
		wantDelay time.Duration
		gapRate   float64 // the last frames' rate, when they start after a step (0: wantRate)
	}{
		{"held before the origin", true, 5 * time.Second, 100e6, 50 * time.Millisecond, 0},
		{"held after the origin", true, origin + 20*time.Second, 100e6, 50 * time.Millisecond, 0},
		{"before the origin", false, 50 * time.Second, 100e6, 50 * time.Millisecond, 0},
		{"first point", false, origin, 8e6, 300 * time.Millisecond, 0},
		{"first step, where the emulator's clock is past the second", false, origin + 5*time.Second, 8e6, 300 * time.Millisecond, 0},
		{"just before the second step", false, origin + 9990*time.Millisecond, 8e6, 300 * time.Millisecond, 0},
		// The fifth and sixth frames start after the step: serialised at its rate.
		{"arriving before the second step, starting after it", false, origin + 9999*time.Millisecond, 8e6, 300 * time.Millisecond, 1e6},
		{"second step", false, origin + 10*time.Second, 1e6, 100 * time.Millisecond, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pl := NewPipeline(Params{RateBps: 100e6, CeilBps: 100e6, Burst: 1600, CBurst: 1600,
				Delay: 50 * time.Millisecond, Profile: prof}, 1, 0)
			if tc.held {
				pl.HoldSchedules()
			} else {
				pl.StartSchedules(origin)
			}
			// Bucket of 1600 bytes: the first two frames leave at once,
			// then one per 8000 bits at the rate in force.
			var v [6]Verdict
			for i := range v {
				v[i] = pl.Arrive(tc.at, 1000)
			}
			gapRate := tc.wantRate
			if tc.gapRate != 0 {
				gapRate = tc.gapRate
			}
			gap := v[5].Exit - v[4].Exit
			if want := time.Duration(8000 / gapRate * 1e9); gap < want-want/100 || gap > want+want/100 {
				t.Errorf("gap between frames %v, want %v (%g bit/s)", gap, want, gapRate)
			}
			if d := v[0].Depart - v[0].Exit; d != tc.wantDelay {
				t.Errorf("delay %v, want %v", d, tc.wantDelay)
			}
			if r := pl.Effective(tc.at).Rate; r != tc.wantRate {
				t.Errorf("Effective rate %g, want %g", r, tc.wantRate)
			}
		})
	}
}

// TestProfileDelayStepFIFO: a delay step d1 -> d2 at schedule time T (the
// schedule's origin not at zero) applies to frames leaving the shaper from T
// on, but departures never go backwards (a bent pipe does not reorder): a
// frame leaving the shaper at or after T + max(0, d1-d2) leaves the delay
// line at exactly exit + d2, one in between waits for the last frame sent
// before T, and an increase applies to the first frame after T.
func TestProfileDelayStepFIFO(t *testing.T) {
	const origin, step = 37 * time.Second, 5 * time.Second
	tests := []struct {
		name   string
		d1, d2 float64 // ms
	}{
		{"decrease", 30, 10},
		{"handover to a nearer satellite", 28.4, 25.1},
		{"increase", 10, 30},
		{"no change", 20, 20},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			prof, err := NewProfile([]ProfilePoint{{T: 0, DelayMs: &tc.d1}, {T: step, DelayMs: &tc.d2}})
			if err != nil {
				t.Fatal(err)
			}
			d1 := time.Duration(tc.d1 * 1e6)
			d2 := time.Duration(tc.d2 * 1e6)
			settle := origin + step + max(0, d1-d2)
			// 10 Mbit/s, and frames in bursts of three every 2.5 ms (9.6 Mbit/s),
			// so the shaper delays some frames and exits differ from arrivals.
			pl := NewPipeline(Params{RateBps: 10e6, CeilBps: 10e6, Burst: 1600, CBurst: 1600, Profile: prof}, 1, 0)
			pl.HoldSchedules()
			pl.StartSchedules(origin)
			var last, lastBefore time.Duration
			firstAfter := true
			n := 0
			for now := origin; now < origin+2*step; now += 2500 * time.Microsecond {
				for range 3 {
					v := pl.Arrive(now, 1000)
					if v.Cause != None {
						t.Fatalf("frame at %v dropped: %v", now, v.Cause)
					}
					n++
					if v.Depart < last {
						t.Fatalf("exit %v: departs %v before the frame ahead (%v)", v.Exit, v.Depart, last)
					}
					last = v.Depart
					switch {
					case v.Exit < origin+step:
						if v.Depart != v.Exit+d1 {
							t.Fatalf("exit %v before the step: departs %v, want exit + %v", v.Exit, v.Depart, d1)
						}
						lastBefore = v.Depart
					case v.Exit >= settle:
						if v.Depart != v.Exit+d2 {
							t.Fatalf("exit %v after the step settled: departs %v, want exit + %v", v.Exit, v.Depart, d2)
						}
					default:
						if want := max(v.Exit+d2, lastBefore); v.Depart != want {
							t.Fatalf("exit %v within %v of the step: departs %v, want %v", v.Exit, d1-d2, v.Depart, want)
						}
					}
					if v.Exit >= origin+step && firstAfter {
						firstAfter = false
						if tc.d2 > tc.d1 && v.Depart != v.Exit+d2 {
							t.Fatalf("first frame after an increase departs %v, want exit + %v", v.Depart, d2)
						}
					}
				}
			}
			if firstAfter || n < 1000 {
				t.Fatalf("%d frames, none after the step", n)
			}
		})
	}
}

// satbed leo-profile writes its handover instants on a comment line of their
// own, after the line naming the source: the parser skips both, and the
// committed LEO profile parses.
func TestProfileHandoverCommentLines(t *testing.T) {
	committed, err := os.ReadFile("../../profiles/link/leo-starlink.csv")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		text  string
		delay time.Duration
	}{
		{"two comment lines", "# made by\n# handovers_s: 15,30\nt_s,delay_ms\n0,4.5\n15,4\n", 4 * time.Millisecond},
		{"no handovers", "# handovers_s:\nt_s,delay_ms\n0,4.5\n", 4500 * time.Microsecond},
		{"committed", string(committed), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prof, err := ParseProfile([]byte(tc.text))
			if err != nil {
				t.Fatalf("ParseProfile: %v", err)
			}
			d, ok := prof.Delay(20 * time.Second)
			if !ok {
				t.Fatal("no delay at 20 s")
			}
			if tc.delay != 0 && d != tc.delay {
				t.Errorf("delay at 20 s = %v, want %v", d, tc.delay)
			}
		})
	}
}

// TestRateStepFullQueue: a rate step while the queue is full reaches the
// wire at the step, whether a profile row or a live change makes it. The
// frame on the wire at the step finishes at the old rate, the first frame
// to start after it is serialised at the new rate, departures never go
// backwards, and every window after the step carries the new rate to
// within one frame from the moment the new rate is on the wire (under the
// rule "rate at arrival" the queue would first drain at the old rate for
// queue*frame/old: 100 ms here).
func TestRateStepFullQueue(t *testing.T) {
	const (
		size  = 1500
		step  = time.Second
		delay = 20 * time.Millisecond
		end   = 2 * time.Second
	)
	tests := []struct {
		name     string
		old, new float64 // bit/s
		live     bool    // SetParams at the step instead of a profile row
	}{
		{"profile, down", 12e6, 4e6, false},
		{"profile, up", 12e6, 36e6, false},
		{"live, down", 12e6, 4e6, true},
		{"live, up", 12e6, 36e6, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := Params{RateBps: tc.old, CeilBps: tc.old, Burst: 1600, CBurst: 1600, Delay: delay, QueuePackets: 100}
			if !tc.live {
				prof, err := ParseProfile([]byte(fmt.Sprintf("t_s,rate_bps\n0,%g\n%g,%g\n", tc.old, step.Seconds(), tc.new)))
				if err != nil {
					t.Fatal(err)
				}
				p.Profile = prof
			}
			pl := NewPipeline(p, 1, 0)
			var departs []time.Duration // by Verdict.Seq
			moved := func(seq uint64, d time.Duration) { departs[seq] = d }
			changed := false
			// Four frames a millisecond (48 Mbit/s): above both rates, so
			// the queue stays full.
			for now := time.Duration(0); now < end; now += time.Millisecond {
				if tc.live && !changed && now >= step {
					changed = true
					np := pl.Params()
					np.RateBps, np.CeilBps = tc.new, tc.new
					pl.SetParams(step, np, moved)
				}
				for range 4 {
					v := pl.Arrive(now, size)
					if v.Cause == None {
						if v.Seq != uint64(len(departs)) {
							t.Fatalf("seq %d, want %d", v.Seq, len(departs))
						}
						departs = append(departs, v.Depart)
					}
				}
			}
			// Delay constant: a departure is the frame's start plus delay.
			var starts []time.Duration
			for i, d := range departs {
				if i > 0 && d < departs[i-1] {
					t.Fatalf("frame %d departs %v, before frame %d (%v)", i, d, i-1, departs[i-1])
				}
				starts = append(starts, d-delay)
			}
			k := sort.Search(len(starts), func(i int) bool { return starts[i] >= step })
			if k < 2 || k+1 >= len(starts) {
				t.Fatalf("no frames around the step (%d of %d)", k, len(starts))
			}
			frameTime := func(bps float64) time.Duration { return time.Duration(size * 8 / bps * 1e9) }
			near := func(got, want time.Duration) bool { return got >= want-2 && got <= want+2 }
			if got, want := starts[k]-starts[k-1], frameTime(tc.old); !near(got, want) {
				t.Errorf("the frame on the wire at the step took %v, want %v (old rate)", got, want)
			}
			if got, want := starts[k+1]-starts[k], frameTime(tc.new); !near(got, want) {
				t.Errorf("the first frame after the step took %v, want %v (new rate)", got, want)
			}
			// The new rate is on the wire once the frame sent at the step
			// ends: within one frame time at the old rate.
			onWire := starts[k]
			if onWire-step >= frameTime(tc.old) {
				t.Errorf("first frame at the new rate starts %v after the step, want under %v", onWire-step, frameTime(tc.old))
			}
			// Bytes started per 100 ms window, before the step and from then on.
			const win = 100 * time.Millisecond
			var windows []time.Duration
			for w := step - 5*win; w < step; w += win {
				windows = append(windows, w)
			}
			for w := onWire; w+win <= end-win; w += win {
				windows = append(windows, w)
			}
			for _, w := range windows {
				rate := tc.old
				if w >= step {
					rate = tc.new
				}
				bytes := 0
				for _, s := range starts {
					if s >= w && s < w+win {
						bytes += size
					}
				}
				if want := rate / 8 * win.Seconds(); math.Abs(float64(bytes)-want) > size {
					t.Errorf("window at %v: %d bytes, want %.0f (%g bit/s) within one frame", w, bytes, want, rate)
				}
			}
		})
	}
}
