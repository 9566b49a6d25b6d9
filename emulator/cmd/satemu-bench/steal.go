//go:build linux

package main

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// On a virtual machine the hypervisor takes CPU time away (steal), and a
// vCPU descheduled for tens of milliseconds makes every frame due meanwhile
// late by as much, whatever the emulator does. These helpers put the steal
// beside the lateness: over a measurement window, and per 100 ms slice of
// satemu's time series, so satemu's own lateness can be read from the
// slices the hypervisor left alone.

// cpuTimes is the machine-wide "cpu" line of /proc/stat, in seconds.
type cpuTimes struct {
	busy, softirq, steal, total float64
}

// parseProcStat reads the first ("cpu") line of /proc/stat: user nice
// system idle iowait irq softirq steal [guest guest_nice], in USER_HZ
// (100 per second). guest time is already inside user, so the total is the
// first eight fields.
func parseProcStat(data []byte) (cpuTimes, error) {
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return cpuTimes{}, fmt.Errorf("/proc/stat: first line %q is not the cpu total with 8 fields", line)
	}
	var v [8]float64
	for i := range v {
		x, err := strconv.ParseUint(f[i+1], 10, 64)
		if err != nil {
			return cpuTimes{}, fmt.Errorf("/proc/stat: field %d: %w", i+1, err)
		}
		v[i] = float64(x) / 100
	}
	c := cpuTimes{busy: v[0] + v[1] + v[2] + v[5] + v[6], softirq: v[6], steal: v[7]}
	for _, x := range v {
		c.total += x
	}
	return c, nil
}

func readCPU() (cpuTimes, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}, err
	}
	return parseProcStat(data)
}

// stealShare is the stolen share of all CPU time between two readings.
func stealShare(a, z cpuTimes) float64 {
	if z.total <= a.total {
		return 0
	}
	return (z.steal - a.steal) / (z.total - a.total)
}

type cpuSample struct {
	t time.Time
	c cpuTimes
}

// cpuSampler reads /proc/stat every period until stopped. The kernel
// counts in 10 ms units, so a period of 20 ms resolves a 100 ms slice.
type cpuSampler struct {
	mu      sync.Mutex
	samples []cpuSample
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

func startCPUSampler(period time.Duration) *cpuSampler {
	s := &cpuSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			if c, err := readCPU(); err == nil {
				s.mu.Lock()
				s.samples = append(s.samples, cpuSample{time.Now(), c})
				s.mu.Unlock()
			}
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

// finish stops sampling (once; later calls only return) and returns the
// samples in time order.
func (s *cpuSampler) finish() []cpuSample {
	s.once.Do(func() { close(s.stop) })
	<-s.done
	return s.samples
}

// at returns the last sample taken at or before t (the first if none).
func at(samples []cpuSample, t time.Time) cpuTimes {
	i, _ := slices.BinarySearchFunc(samples, t, func(s cpuSample, t time.Time) int { return s.t.Compare(t) })
	if i < len(samples) && samples[i].t.Equal(t) {
		return samples[i].c
	}
	return samples[max(i-1, 0)].c
}

// slice is one row of satemu's time series (a_to_b): the frames sent in
// (start, end] and their lateness p99.
type slice struct {
	start, end time.Time
	frames     float64
	lateP99    float64 // us
}

// readSlices reads a stopped satemu's a_to_b time series and places its
// rows on the wall clock by the start time in emulator.json.
func readSlices(statsDir string) ([]slice, error) {
	data, err := os.ReadFile(filepath.Join(statsDir, "emulator.json"))
	if err != nil {
		return nil, err
	}
	var rep struct {
		StartedAt time.Time `json:"started_at"`
	}
	if err := json.Unmarshal(data, &rep); err != nil {
		return nil, fmt.Errorf("emulator.json: %w", err)
	}
	f, err := os.Open(filepath.Join(statsDir, "emulator_timeseries.csv"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("emulator_timeseries.csv: %w", err)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("emulator_timeseries.csv: empty")
	}
	col := map[string]int{}
	for i, name := range rows[0] {
		col[name] = i
	}
	for _, name := range []string{"t_s", "direction", "frames_out", "late_p99_us"} {
		if _, ok := col[name]; !ok {
			return nil, fmt.Errorf("emulator_timeseries.csv: no column %s (satemu too old?)", name)
		}
	}
	var out []slice
	prevT, prevFrames := rep.StartedAt, 0.0
	for _, r := range rows[1:] {
		if r[col["direction"]] != "a_to_b" {
			continue
		}
		ts, err1 := strconv.ParseFloat(r[col["t_s"]], 64)
		frames, err2 := strconv.ParseFloat(r[col["frames_out"]], 64)
		late, err3 := strconv.ParseFloat(r[col["late_p99_us"]], 64)
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, fmt.Errorf("emulator_timeseries.csv: %w", err)
		}
		end := rep.StartedAt.Add(time.Duration(ts * 1e9))
		out = append(out, slice{start: prevT, end: end, frames: frames - prevFrames, lateP99: late})
		prevT, prevFrames = end, frames
	}
	return out, nil
}

// sliceSummary splits the slices inside [from, to] that sent frames into
// clean ones (no steal counted from the previous slice's start to one
// sampling period after this one's end: a stall just before a slice makes
// its first frames late, and the kernel books steal a little after the
// fact) and stolen ones, and gives each group's per-slice p99s.
type sliceSummary struct {
	clean, stolen []float64 // per-slice lateness p99, us, sorted
}

func summarise(sl []slice, cpu []cpuSample, from, to time.Time, period time.Duration) sliceSummary {
	var s sliceSummary
	if len(cpu) == 0 {
		return s
	}
	for i, x := range sl {
		if x.frames == 0 || x.start.Before(from) || x.end.After(to) {
			continue
		}
		begin := x.start
		if i > 0 {
			begin = sl[i-1].start
		}
		if at(cpu, x.end.Add(period)).steal > at(cpu, begin).steal {
			s.stolen = append(s.stolen, x.lateP99)
		} else {
			s.clean = append(s.clean, x.lateP99)
		}
	}
	slices.Sort(s.clean)
	slices.Sort(s.stolen)
	return s
}

// String reads e.g. "26 clean slices: p99 median 45 us, worst 120 us, 26
// of 26 <= 500 us; 9 with steal: p99 median 8000 us, worst 25000 us".
func (s sliceSummary) String() string {
	group := func(name string, v []float64) string {
		if len(v) == 0 {
			return "0 " + name
		}
		ok := 0
		for _, x := range v {
			if x <= holdLateUs {
				ok++
			}
		}
		return fmt.Sprintf("%d %s: p99 median %.0f us, worst %.0f us, %d of %d <= %d us",
			len(v), name, v[len(v)/2], v[len(v)-1], ok, len(v), holdLateUs)
	}
	return group("clean slices", s.clean) + "; " + group("with steal", s.stolen)
}

// cleanHolds reports whether every clean slice kept p99 <= holdLateUs, so
// the frames of all clean slices together do too (each slice has at most 1%
// of its frames above it).
func (s sliceSummary) cleanHolds() bool {
	return len(s.clean) > 0 && s.clean[len(s.clean)-1] <= holdLateUs
}

// keepRun copies a satemu run's time series to dir/name.timeseries.csv and
// writes its /proc/stat samples and measurement window to dir/name.cpu.csv
// (seconds since satemu started, to line up with the time series' t_s).
func keepRun(dir, name, statsDir string, s sample) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	data, err := os.ReadFile(filepath.Join(statsDir, "emulator_timeseries.csv"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, name+".timeseries.csv"), data, 0o644); err != nil {
		return err
	}
	rep, err := os.ReadFile(filepath.Join(statsDir, "emulator.json"))
	if err != nil {
		return err
	}
	var st struct {
		StartedAt time.Time `json:"started_at"`
	}
	if err := json.Unmarshal(rep, &st); err != nil {
		return fmt.Errorf("emulator.json: %w", err)
	}
	rel := func(t time.Time) string { return strconv.FormatFloat(t.Sub(st.StartedAt).Seconds(), 'f', 3, 64) }
	var b strings.Builder
	b.WriteString("t_s,busy_s,softirq_s,steal_s,total_s,in_window\n")
	for _, c := range s.cpu {
		in := !c.t.Before(s.from) && !c.t.After(s.to)
		fmt.Fprintf(&b, "%s,%.2f,%.2f,%.2f,%.2f,%t\n", rel(c.t), c.c.busy, c.c.softirq, c.c.steal, c.c.total, in)
	}
	return os.WriteFile(filepath.Join(dir, name+".cpu.csv"), []byte(b.String()), 0o644)
}
