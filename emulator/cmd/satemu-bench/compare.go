//go:build linux

package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"net"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"satbed/emulator/internal/netns"
	"satbed/emulator/rawsock"
)

// The side-by-side section: the same offered load through satemu (each
// packet path) and through the kernel's HTB on a plain bridge in the
// emulator namespace, rate-only, on the same two CPUs.
//
// Load is whole Ethernet frames sent from an AF_PACKET socket in the
// sender namespace to a unicast MAC nobody owns: the generator skips the
// UDP/IP stack and the receiver drops each frame at its first check
// (PACKET_OTHERHOST), so the ends cost little next to the emulator and the
// kernel bridge floods the frames to the far port exactly as satemu bridges
// them. Rates are the veth counters (skb->len, what HTB and satemu charge).

const (
	frameLen    = 1514
	compareDur  = 5 * time.Second
	compareSkip = 1500 * time.Millisecond
	// /proc/stat sampling period: the kernel counts in 10 ms units.
	samplePeriod = 20 * time.Millisecond
	// Done-when tolerances for a rate that holds.
	holdRateErr = 0.005
	holdLateUs  = 500
)

// sample is what one measurement window saw.
type sample struct {
	inBps, outBps    float64
	drops            float64
	lateP50, lateP99 float64 // us; NaN where there is no schedule to compare against
	// CPU-seconds in the window: the satemu process, the machine's softirq
	// time (where the kernel's bridge and HTB run, and satemu's receive
	// copy into the ring), and all busy CPU (generator and other work included).
	procCPU, softirq, machCPU float64
	steal                     float64 // stolen CPU-seconds in the window
	stealShare                float64 // of all CPU time in the window
	from, to                  time.Time
	cpu                       []cpuSample // /proc/stat every samplePeriod over the run
	slices                    *sliceSummary
	outBytes                  float64
	softnet                   float64 // backlog drops on any interface of the machine
	load                      string
	ioPath, emuErrors         string
	txSched                   string // satemu's a_to_b transmit thread at the end: class and switches
}

func (s sample) perGB(cpu float64) float64 {
	if s.outBytes <= 0 {
		return math.NaN()
	}
	return cpu / (s.outBytes / 1e9)
}

// compare runs every path at every rate, then the 300 ms case.
func (b *bench) compare(paths []string, rates []float64) error {
	fmt.Println("\n== side by side, rate only (1514-byte frames from an AF_PACKET generator, offered 1.1 x rate, 5 s, measured after 1.5 s)")
	fmt.Println("   holds = output within 0.5% of min(rate, input), no drops anywhere, and for satemu departure lateness p99 <= 500 us")
	fmt.Println("   CPU per GB out: emulator = satemu process + machine softirq (kernel HTB: softirq alone, where bridge and HTB run);")
	fmt.Println("   machine = all busy CPU, generator and other work on the machine included; steal = CPU-seconds the hypervisor took")
	fmt.Println("   (share of all CPU time). satemu's lateness per 100 ms slice of its time series: a slice is clean when /proc/stat")
	fmt.Println("   counted no steal (it counts in 10 ms units) from the previous slice's start to this one's end")
	best := map[string]float64{}
	for _, r := range rates {
		s, err := b.kernelHTB(r)
		if err != nil {
			return fmt.Errorf("kernel HTB at %g: %w", r, err)
		}
		if b.report("kernel-htb", r, 0, s) {
			best["kernel-htb"] = math.Max(best["kernel-htb"], r)
		}
		for _, p := range paths {
			s, err := b.satemuRate(p, r, 0)
			if err != nil {
				return fmt.Errorf("satemu -io %s at %g: %w", p, r, err)
			}
			if b.report("satemu-"+p, r, 0, s) {
				best["satemu-"+p] = math.Max(best["satemu-"+p], r)
			}
		}
	}
	for k, v := range best {
		fmt.Printf("   highest rate that holds, %s: %.0f Mbit/s\n", k, v/1e6)
	}
	fmt.Println("\n== 1 Gbit/s with 300 ms one-way delay (the kernel has no netem: satemu only)")
	for _, p := range paths {
		s, err := b.satemuRate(p, 1e9, 300)
		if err != nil {
			return fmt.Errorf("satemu -io %s at 1G/300ms: %w", p, err)
		}
		b.report("satemu-"+p, 1e9, 300, s)
	}
	return nil
}

// report prints one row and returns whether the rate held.
func (b *bench) report(name string, r float64, delayMs int, s sample) bool {
	want := math.Min(r, s.inBps)
	errPct := (s.outBps/want - 1) * 100
	ok := math.Abs(errPct) <= holdRateErr*100 && s.drops == 0 && (math.IsNaN(s.lateP99) || s.lateP99 <= holdLateUs)
	verdict := "holds"
	switch {
	case ok && s.inBps < 0.995*r:
		verdict, ok = "holds at the offered rate (generator-limited)", false
	case !ok && s.inBps < 0.995*r:
		verdict = "FAILS (generator reached only the input shown)"
	case !ok:
		verdict = "FAILS"
	}
	late := "lateness n/a (no departure schedule)"
	if !math.IsNaN(s.lateP99) {
		late = fmt.Sprintf("lateness p50 %4.0f us p99 %5.0f us", s.lateP50, s.lateP99)
	}
	extra := ""
	if s.emuErrors != "" {
		extra = " [" + s.emuErrors + "]"
	}
	if s.txSched != "" {
		extra += " (" + s.txSched + ")"
	}
	fmt.Printf("%-15s %5.0f Mbit/s delay %3d ms: in %8.2f out %8.2f Mbit/s (%+.3f%% of min(rate,in)), %s, drops %.0f (backlog, machine-wide: %.0f), CPU/GB emulator %5.2f s (process %5.2f) machine %5.2f s, steal %.2f s (%.1f%%), load %s -> %s%s\n",
		name, r/1e6, delayMs, s.inBps/1e6, s.outBps/1e6, errPct, late, s.drops, s.softnet,
		s.perGB(s.procCPU+s.softirq), s.perGB(s.procCPU), s.perGB(s.machCPU), s.steal, s.stealShare*100, s.load, verdict, extra)
	if s.slices != nil {
		clean := "no clean slice"
		if len(s.slices.clean) > 0 {
			clean = "a clean slice exceeded it"
			if s.slices.cleanHolds() {
				clean = "held in every clean slice"
			}
		}
		fmt.Printf("%15s per 100 ms: %s -> lateness p99 <= %d us %s\n", "", s.slices, holdLateUs, clean)
	}
	return ok
}

// window holds the counters read at the start and the end of a measurement.
type window struct {
	t             time.Time
	inB, outB     float64
	cpu           cpuTimes
	proc          float64
	emuDrops      float64
	softnetDrops  float64
	kernelDrops   float64
	haveEmuCounts bool
}

func (b *bench) read(procPid int, emu *netns.Satemu, tcDev string) (window, error) {
	w := window{t: time.Now()}
	var err error
	if w.inB, w.outB, err = b.portBytes(); err != nil {
		return w, err
	}
	if w.cpu, err = readCPU(); err != nil {
		return w, err
	}
	w.softnetDrops = softnetDrops()
	if procPid > 0 {
		w.proc = procCPU(procPid)
	}
	if emu != nil {
		st, err := emu.DirStats("a_to_b")
		if err != nil {
			return w, err
		}
		w.emuDrops = num(st, "rx_kernel_drops") + num(st, "in_flight_overflow") + num(st, "tx_errors")
		if d, ok := st["drops"].(map[string]any); ok {
			for _, v := range d {
				f, _ := v.(float64)
				w.emuDrops += f
			}
		}
		w.haveEmuCounts = true
	}
	if tcDev != "" {
		out, err := netns.Command(b.chain.Emulator, "tc", "-s", "qdisc", "show", "dev", tcDev).CombinedOutput()
		if err != nil {
			return w, fmt.Errorf("tc -s: %w: %s", err, out)
		}
		// The root (HTB) line comes first and counts its leaf's drops too.
		if m := tcDropped.FindSubmatch(out); m != nil {
			w.kernelDrops, _ = strconv.ParseFloat(string(m[1]), 64)
		}
	}
	return w, nil
}

var tcDropped = regexp.MustCompile(`dropped (\d+)`)

func diff(a, z window) sample {
	dt := z.t.Sub(a.t).Seconds()
	return sample{
		inBps: (z.inB - a.inB) * 8 / dt, outBps: (z.outB - a.outB) * 8 / dt,
		outBytes: z.outB - a.outB,
		drops:    (z.emuDrops - a.emuDrops) + (z.kernelDrops - a.kernelDrops),
		softnet:  z.softnetDrops - a.softnetDrops,
		procCPU:  z.proc - a.proc, machCPU: z.cpu.busy - a.cpu.busy, softirq: z.cpu.softirq - a.cpu.softirq,
		steal: z.cpu.steal - a.cpu.steal, stealShare: stealShare(a.cpu, z.cpu),
		lateP50: math.NaN(), lateP99: math.NaN(), from: a.t, to: z.t,
	}
}

// measure offers 1.1 x rate for compareDur and differences the counters
// over [compareSkip, compareDur].
func (b *bench) measure(r float64, pid int, emu *netns.Satemu, tcDev string) (sample, error) {
	gen, err := b.openGenerator()
	if err != nil {
		return sample{}, err
	}
	defer gen.Close()
	sampler := startCPUSampler(samplePeriod)
	defer sampler.finish()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- blastFrames(ctx, gen, 1.1*r, compareDur, b.genPrio) }()
	time.Sleep(compareSkip)
	w0, err := b.read(pid, emu, tcDev)
	if err != nil {
		return sample{}, err
	}
	time.Sleep(compareDur - compareSkip)
	w1, err := b.read(pid, emu, tcDev)
	if err != nil {
		return sample{}, err
	}
	cancel()
	if err := <-errc; err != nil {
		return sample{}, err
	}
	s := diff(w0, w1)
	s.load = loadavg()
	// One more period, so the last slice's steal is booked.
	time.Sleep(samplePeriod)
	s.cpu = sampler.finish()
	return s, nil
}

func (b *bench) kernelHTB(r float64) (sample, error) {
	e := b.chain.Emulator
	qb := queueBytes(r)
	setup := [][]string{
		{"ip", "link", "add", "br0", "type", "bridge"},
		{"ip", "link", "set", b.chain.EmuA, "master", "br0"},
		{"ip", "link", "set", b.chain.EmuB, "master", "br0"},
		{"ip", "link", "set", "br0", "up"},
		{"tc", "qdisc", "add", "dev", b.chain.EmuB, "root", "handle", "1:", "htb", "default", "1"},
		{"tc", "class", "add", "dev", b.chain.EmuB, "parent", "1:", "classid", "1:1", "htb",
			"rate", fmt.Sprintf("%.0fbit", r), "ceil", fmt.Sprintf("%.0fbit", r)},
		{"tc", "qdisc", "add", "dev", b.chain.EmuB, "parent", "1:1", "handle", "10:", "bfifo", "limit", strconv.Itoa(qb)},
	}
	teardown := func() {
		_ = netns.Command(e, "tc", "qdisc", "del", "dev", b.chain.EmuB, "root").Run()
		_ = netns.Command(e, "ip", "link", "del", "br0").Run()
	}
	defer teardown()
	for _, s := range setup {
		if out, err := netns.Command(e, s[0], s[1:]...).CombinedOutput(); err != nil {
			return sample{}, fmt.Errorf("%s: %w: %s", strings.Join(s, " "), err, out)
		}
	}
	return b.measure(r, 0, nil, b.chain.EmuB)
}

// queueBytes is the drop-tail limit for both emulators: 1 s at the rate
// (at least 1 MiB), so the 10% excess of a 5 s run never overflows it.
func queueBytes(r float64) int { return max(int(r/8), 1<<20) }

func (b *bench) satemuRate(path string, r float64, delayMs int) (sample, error) {
	cfg := fmt.Sprintf(`{"seed":1,"a_to_b":{"rate_bps":%g,"delay_ms":%d,"queue_packets":0,"queue_bytes":%d},"b_to_a":{"delay_ms":%d}}`,
		r, delayMs, queueBytes(r), delayMs)
	emu, err := b.chain.StartSatemu(b.bin, b.dir, []byte(cfg), append(append([]string(nil), b.flags...), "-io", path)...)
	if err != nil {
		return sample{}, err
	}
	s, merr := b.measure(r, emu.Cmd.Process.Pid, emu, "")
	st, serr := emu.DirStats("a_to_b")
	if serr == nil {
		s.lateP50, s.lateP99 = num(st, "tx_late_p50_us"), num(st, "tx_late_p99_us")
		class := "ordinary"
		if rt, _ := st["tx_realtime"].(bool); rt {
			class = "SCHED_FIFO"
		} else if num(st, "tx_sched_switches") > 0 {
			class = "nice -20"
		}
		s.txSched = fmt.Sprintf("transmit thread %s at the end, %.0f switches", class, num(st, "tx_sched_switches"))
		if s.drops > 0 {
			// Since satemu started, by cause: which stage lost them.
			s.emuErrors = fmt.Sprintf("since start: queue %.0f, rx_kernel_drops %.0f, in_flight_overflow %.0f, tx_errors %.0f",
				drops(st, "queue"), num(st, "rx_kernel_drops"), num(st, "in_flight_overflow"), num(st, "tx_errors"))
		}
	}
	if m, err := emu.Request(`{"op":"get"}`); err == nil {
		if c, ok := m["config"].(map[string]any); ok {
			s.ioPath, _ = c["io"].(string)
			if s.ioPath != path {
				s.emuErrors += " satemu reports io " + s.ioPath
			}
		}
	}
	if err := emu.Stop(); err != nil && merr == nil {
		merr = err
	}
	if merr == nil {
		// The time series is complete once satemu has stopped.
		sl, err := readSlices(emu.StatsDir)
		if err != nil {
			return s, fmt.Errorf("slices: %w", err)
		}
		sum := summarise(sl, s.cpu, s.from, s.to, samplePeriod)
		s.slices = &sum
		if b.keep != "" {
			if err := keepRun(b.keep, fmt.Sprintf("satemu-%s-%.0fM-%dms", path, r/1e6, delayMs), emu.StatsDir, s); err != nil {
				return s, fmt.Errorf("keep: %w", err)
			}
		}
	}
	return s, merr
}

// openGenerator opens a raw socket on the sender's interface.
func (b *bench) openGenerator() (*rawsock.Socket, error) {
	var s *rawsock.Socket
	err := netns.Do(b.chain.Sender, func() error {
		var err error
		s, err = rawsock.Open(b.chain.SenderIf, rawsock.Options{QdiscBypass: true, RcvBuf: 1 << 16, SndBuf: 4 << 20})
		return err
	})
	return s, err
}

// loadFrame is an IPv4/UDP frame to a MAC no host owns.
func loadFrame() []byte {
	f := make([]byte, frameLen)
	copy(f, []byte{0x02, 0, 0, 0, 0xbe, 0xef, 0x02, 0, 0, 0, 0xbe, 0xee, 0x08, 0x00})
	ip := f[14:]
	ip[0], ip[8], ip[9] = 0x45, 64, 17
	binary.BigEndian.PutUint16(ip[2:], frameLen-14)
	copy(ip[12:], net.ParseIP(netns.SenderIP).To4())
	copy(ip[16:], net.ParseIP(netns.ReceiverIP).To4())
	binary.BigEndian.PutUint16(ip[20:], 9)
	binary.BigEndian.PutUint16(ip[22:], 9) // discard
	binary.BigEndian.PutUint16(ip[24:], frameLen-34)
	// A valid header checksum: with br_netfilter loaded the bridge checks it.
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	return f
}

// blastFrames sends frames at rateBps (wire bits = 8 x frame length) for
// dur. prio > 0 runs it under SCHED_FIFO: the generator stands for a line
// that offers the rate whatever else the machine runs.
func blastFrames(ctx context.Context, s *rawsock.Socket, rateBps float64, dur time.Duration, prio int) error {
	if prio > 0 {
		// Locked and never unlocked: the thread ends with the goroutine.
		// Unlocked, it went back to the runtime still real-time, and a
		// satemu forked from it later inherited SCHED_FIFO in every thread.
		runtime.LockOSThread()
		attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: uint32(prio)}
		if err := unix.SchedSetAttr(0, &attr, 0); err != nil {
			return fmt.Errorf("generator SCHED_FIFO: %w", err)
		}
	}
	f := loadFrame()
	frames := make([][]byte, rawsock.MaxBatch)
	for i := range frames {
		frames[i] = f
	}
	per := rateBps / 8 / frameLen
	start := time.Now()
	sent := 0
	for ctx.Err() == nil {
		el := time.Since(start)
		if el >= dur {
			return nil
		}
		allowed := int(per*el.Seconds()) + 1
		if sent >= allowed {
			time.Sleep(100 * time.Microsecond)
			continue
		}
		n, err := s.WriteBatch(frames[:min(allowed-sent, len(frames))])
		sent += n
		if err != nil {
			return err
		}
	}
	return nil
}

// portBytes reads the emulator ports' byte counters (port a received, port
// b sent) in one read of the namespace's /proc/net/dev, so both are taken
// at the same instant (a command per counter put tens of ms between them
// on a loaded machine, a visible error over a 3.5 s window).
func (b *bench) portBytes() (in, out float64, err error) {
	var data []byte
	err = netns.Do(b.chain.Emulator, func() error {
		var err error
		data, err = os.ReadFile("/proc/thread-self/net/dev")
		return err
	})
	if err != nil {
		return 0, 0, err
	}
	found := 0
	for _, l := range strings.Split(string(data), "\n") {
		name, rest, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 9 {
			continue
		}
		switch strings.TrimSpace(name) {
		case b.chain.EmuA:
			in, _ = strconv.ParseFloat(f[0], 64) // receive bytes
			found++
		case b.chain.EmuB:
			out, _ = strconv.ParseFloat(f[8], 64) // transmit bytes
			found++
		}
	}
	if found != 2 {
		return 0, 0, fmt.Errorf("emulator ports not in /proc/net/dev")
	}
	return in, out, nil
}

// procCPU returns a process's user+system CPU-seconds.
func procCPU(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the parenthesised command name; utime and stime are
	// fields 14 and 15 of the whole line.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (u + st) / 100
}

// softnetDrops sums the backlog drops of every CPU (/proc/net/softnet_stat
// column 2, hex): frames the kernel lost before any socket or bridge saw them.
func softnetDrops() float64 {
	data, _ := os.ReadFile("/proc/net/softnet_stat")
	var n float64
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Fields(l)
		if len(f) > 1 {
			v, _ := strconv.ParseUint(f[1], 16, 64)
			n += float64(v)
		}
	}
	return n
}
