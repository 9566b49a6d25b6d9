// Command satemu is a userspace satellite-link emulator: it bridges two
// interfaces at layer 2 and applies, per direction, a drop-tail queue, an
// HTB-like shaper, channel errors and propagation delay. See
// docs/components/satemu.md.
package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"satbed/emulator/bridge"
	"satbed/emulator/config"
	"satbed/emulator/control"
	"satbed/emulator/rawsock"
)

// usageError makes main exit with status 2 (bad invocation or configuration).
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

func main() {
	err := run(os.Args[1:], os.Stderr)
	if err == nil {
		return
	}
	fmt.Fprintln(os.Stderr, "satemu:", err)
	var u usageError
	if errors.As(err, &u) {
		os.Exit(2)
	}
	os.Exit(1)
}

type options struct {
	a, b, cfg, ctl, statsDir         string
	io                               string
	noBypass                         bool
	spinUs, gridUs, rtPrio, rxRTPrio int
	rtShare                          float64
	rtPrioSet                        bool // -rt-priority given, not the default
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("satemu", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.a, "a", "", "interface facing the ground (Client A side)")
	fs.StringVar(&o.b, "b", "", "interface facing the aircraft (Client B side)")
	fs.StringVar(&o.cfg, "config", "", "JSON configuration file")
	fs.StringVar(&o.ctl, "control", "", "unix control socket path (optional)")
	fs.StringVar(&o.statsDir, "stats-dir", "", "directory for emulator_timeseries.csv and emulator.json (optional)")
	fs.BoolVar(&o.noBypass, "no-qdisc-bypass", false, "send through the ports' qdiscs (lets tcpdump on the emulator ports see sent frames)")
	fs.StringVar(&o.io, "io", "auto", "packet path: tpacket (TPACKET_V3 receive ring, sendmmsg), socket (recvmmsg/sendmmsg), auto (socket on links shaped to at most 20 Mbit/s in both directions, else tpacket, else socket)")
	fs.IntVar(&o.spinUs, "spin-us", 200, "busy-wait this many microseconds before each departure for timing precision (0 = sleep only)")
	fs.IntVar(&o.gridUs, "grid-us", 250, "on links whose full-size frame takes 1 ms or more (12 Mbit/s and slower), departures wait for the next point of a grid this many microseconds apart on the machine's monotonic clock, shared by every satemu, so transmit threads wake together (0 = each frame at its own time)")
	fs.IntVar(&o.rtPrio, "rt-priority", 10, "run transmit threads under SCHED_FIFO at this priority (1-99, 0 = off: nice -20); off by default where satemu may run on one CPU only; a warning if not permitted")
	fs.Float64Var(&o.rtShare, "rt-share", -1, "a transmit thread using more than this share of a CPU (over 100 ms) leaves SCHED_FIFO for nice -20 until it falls below a quarter of it; -1 = half the kernel's real-time budget (kernel.sched_rt_runtime_us/period, no limit when it is -1), 0 = stay real-time")
	fs.IntVar(&o.rxRTPrio, "rx-rt-priority", 0, "run the receive loops under SCHED_FIFO at this priority too (1-99, 0 = off): for high rates on a loaded machine")
	if err := fs.Parse(args); err != nil {
		return o, usageError{err}
	}
	fs.Visit(func(f *flag.Flag) { o.rtPrioSet = o.rtPrioSet || f.Name == "rt-priority" })
	if fs.NArg() > 0 {
		return o, usageError{fmt.Errorf("unexpected arguments %v", fs.Args())}
	}
	if o.a == "" || o.b == "" || o.cfg == "" {
		return o, usageError{errors.New("-a, -b and -config are required")}
	}
	if o.gridUs < 0 || o.gridUs > 1000 {
		return o, usageError{errors.New("-grid-us must be in [0,1000]")}
	}
	if o.spinUs < 0 || o.spinUs > 100000 || o.rtPrio < 0 || o.rtPrio > 99 || o.rxRTPrio < 0 || o.rxRTPrio > 99 {
		return o, usageError{errors.New("-spin-us must be in [0,100000], -rt-priority and -rx-rt-priority in [0,99]")}
	}
	if o.rtShare != -1 && (o.rtShare < 0 || o.rtShare > 1) {
		return o, usageError{errors.New("-rt-share must be -1 or in [0,1]")}
	}
	switch o.io {
	case "auto", ioTpacket, ioSocket:
	default:
		return o, usageError{fmt.Errorf("-io %q: want auto, tpacket or socket", o.io)}
	}
	if o.a == o.b {
		return o, usageError{errors.New("-a and -b must differ")}
	}
	return o, nil
}

func randomSeed() uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return uint64(time.Now().UnixNano())
	}
	return binary.LittleEndian.Uint64(b[:])
}

// txSchedReport is how the transmit threads were scheduled.
type txSchedReport struct {
	RTPriority int             `json:"rt_priority"` // 0: ordinary threads
	RTShare    float64         `json:"rt_share"`    // CPU share that ends SCHED_FIFO; 0 = none
	Budget     bridge.RTBudget `json:"kernel"`
	Why        string          `json:"why,omitempty"` // why the default SCHED_FIFO was not used
}

// oneCPU is why transmit threads pinned to one CPU stay ordinary unless
// -rt-priority asks otherwise. Go's runtime at times waits for another of
// its threads by spinning with sched_yield (suspending a goroutine for the
// garbage collector's stack scan, a goroutine's status change), and
// sched_yield never hands a CPU from a SCHED_FIFO thread to an ordinary
// one. With one CPU allowed, the thread waited for can only run where the
// real-time one spins, so the spin ends only when the kernel's real-time
// throttle stops it: in a Global Hawk matrix, whose cells each run on one
// core, a transmit thread held its core for 0.95 s at a time, stalling every
// cell pinned there (docs/benchmarks/matrix.md).
const oneCPU = "one CPU allowed: a real-time thread spinning in Go's runtime for another of its threads would hold it until the kernel's real-time throttle"

// finalReport is emulator.json.
type finalReport struct {
	Seed      uint64                      `json:"seed"`
	IO        string                      `json:"io"`
	TxSched   txSchedReport               `json:"tx_sched"`
	StartedAt time.Time                   `json:"started_at"`
	StoppedAt time.Time                   `json:"stopped_at"`
	Config    map[string]bridge.DirConfig `json:"config"`
	SampleMs  int64                       `json:"sample_ms"`
	Totals    bridge.Stats                `json:"totals"`
}

type handler struct {
	b  *bridge.Bridge
	io string
}

func (h handler) Config() any {
	return map[string]any{"seed": h.b.Seed, "io": h.io, "directions": h.b.Config()}
}
func (h handler) Set(dir string, p json.RawMessage) error { return h.b.Set(dir, p) }
func (h handler) Stats() any                              { return h.b.Snapshot() }
func (h handler) StartClock() float64                     { return h.b.StartClock().Seconds() }

// Packet paths (-io).
const (
	ioTpacket = "tpacket"
	ioSocket  = "socket"
)

// socketMaxBps is the fastest link "auto" serves with plain sockets. Their
// 8 MiB receive buffer holds about 3,000 veth frames: at 20 Mbit/s that is
// 1.8 s of frames, longer than this VM's scheduling stalls, where at
// 1 Gbit/s it was 36 ms and frames were lost (hence the ring). The ring has
// a cost of its own that sockets do not: the kernel retires its blocks on a
// 1 ms timer that runs whether frames come or not, 2,000 timer interrupts a
// second for an idle satemu, which took a tenth of a core on this VM
// (docs/benchmarks/matrix.md).
const socketMaxBps = 20e6

// autoIO is the packet path "auto" takes for cfg: plain sockets where
// both directions are shaped to at most socketMaxBps, else the ring.
func autoIO(cfg *config.Config) string {
	for _, d := range []config.Direction{cfg.AToB, cfg.BToA} {
		p, err := d.Params()
		if err != nil {
			return ioTpacket
		}
		if r := p.HighestRate(); r == 0 || r > socketMaxBps {
			return ioTpacket
		}
	}
	return ioSocket
}

// openPorts opens both ports on the packet path o.io asks for; "auto"
// takes autoIO's and falls back from the TPACKET_V3 ring to plain sockets
// (with a warning) where the kernel refuses it. It returns the path used.
func openPorts(o options, cfg *config.Config, stderr io.Writer) (pa, pb *rawsock.Socket, path string, err error) {
	open := func(ring bool) (*rawsock.Socket, *rawsock.Socket, error) {
		opts := rawsock.Options{QdiscBypass: !o.noBypass, Ring: ring}
		a, err := rawsock.Open(o.a, opts)
		if err != nil {
			return nil, nil, err
		}
		b, err := rawsock.Open(o.b, opts)
		if err != nil {
			a.Close()
			return nil, nil, err
		}
		return a, b, nil
	}
	if o.io == ioSocket || o.io == "auto" && autoIO(cfg) == ioSocket {
		pa, pb, err = open(false)
		return pa, pb, ioSocket, err
	}
	pa, pb, err = open(true)
	if err == nil || o.io == ioTpacket {
		return pa, pb, ioTpacket, err
	}
	fmt.Fprintf(stderr, "satemu: warning: %v; using plain sockets\n", err)
	pa, pb, err = open(false)
	return pa, pb, ioSocket, err
}

// txSchedFor resolves -rt-priority against the CPUs satemu may run on
// (oneCPU) and -rt-share against the kernel's real-time budget.
func txSchedFor(o options, cpus int, budget bridge.RTBudget, warn func(string, ...any)) txSchedReport {
	r := txSchedReport{RTPriority: o.rtPrio, RTShare: o.rtShare, Budget: budget}
	if o.rtPrio > 0 && cpus == 1 {
		if !o.rtPrioSet {
			r.RTPriority, r.Why = 0, oneCPU
		} else {
			warn("transmit threads under SCHED_FIFO with %s", oneCPU)
		}
	}
	if r.RTPriority == 0 {
		r.RTShare = 0
	} else if o.rtShare < 0 {
		r.RTShare = 0
		if budget.Limited() {
			r.RTShare = budget.Share() * bridge.RTShareOfBudget
		}
	}
	if r.RTPriority > 0 && r.RTShare == 0 && budget.Limited() {
		warn("transmit threads stay SCHED_FIFO (-rt-share 0) under the kernel's real-time throttle (kernel.sched_rt_runtime_us %d of %d): one busy for %.0f%% of a CPU is stopped for the rest of each %d ms",
			budget.RuntimeUs, budget.PeriodUs, budget.Share()*100, budget.PeriodUs/1000)
	}
	return r
}

func run(args []string, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	// The two transmit goroutines sit on their own threads and need a P the
	// moment their sleep ends; two extra Ps keep them from queueing behind
	// the receive loops for one.
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(runtime.NumCPU() + 2)
	}
	// Catch signals from the start so a stop during setup still ends cleanly.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	cfg, err := config.Load(o.cfg)
	if err != nil {
		return usageError{err}
	}
	seed := randomSeed()
	if cfg.Seed != nil {
		seed = *cfg.Seed
	}

	var ts *bridge.TimeseriesWriter
	if o.statsDir != "" {
		if err := os.MkdirAll(o.statsDir, 0o755); err != nil {
			return fmt.Errorf("stats dir: %w", err)
		}
		f, err := os.Create(filepath.Join(o.statsDir, "emulator_timeseries.csv"))
		if err != nil {
			return fmt.Errorf("stats: %w", err)
		}
		defer f.Close()
		if ts, err = bridge.NewTimeseriesWriter(f); err != nil {
			return fmt.Errorf("stats: %w", err)
		}
	}

	pa, pb, ioPath, err := openPorts(o, cfg, stderr)
	if err != nil {
		return err
	}
	defer pa.Close()
	defer pb.Close()

	warn := func(format string, args ...any) {
		fmt.Fprintf(stderr, "satemu: warning: "+format+"\n", args...)
	}
	budget, err := bridge.ReadRTBudget()
	if err != nil {
		warn("%v; taken as unlimited", err)
		budget.RuntimeUs = -1
	}
	// NumCPU: the CPUs of the affinity mask satemu started with.
	sched := txSchedFor(o, runtime.NumCPU(), budget, warn)
	started := time.Now()
	clock := func() time.Duration { return time.Since(started) }
	var mono unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono); err != nil {
		return fmt.Errorf("monotonic clock: %w", err)
	}
	gridOrigin := time.Duration(mono.Nano()) - clock()
	br, err := bridge.New(cfg, seed, clock, pa, pb, bridge.Options{
		Spin: time.Duration(o.spinUs) * time.Microsecond, RTPriority: sched.RTPriority, RxRTPriority: o.rxRTPrio,
		RTShare: sched.RTShare, Grid: time.Duration(o.gridUs) * time.Microsecond, GridOrigin: gridOrigin,
		// Ethernet header plus one VLAN tag above the larger MTU.
		FrameSize: max(pa.MTU, pb.MTU) + 18, IO: ioPath, Warn: warn})
	if err != nil {
		return usageError{err}
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var wg sync.WaitGroup
	if o.ctl != "" {
		srv, err := control.Listen(o.ctl, handler{br, ioPath})
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() { defer wg.Done(); srv.Serve(ctx) }()
	}
	if ts != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(cfg.Sample())
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
					if err := ts.Write(br.Snapshot()); err != nil {
						fmt.Fprintln(stderr, "satemu: timeseries:", err)
						return
					}
				}
			}
		}()
	}

	runErr := br.Run(ctx)
	cancel()
	wg.Wait()
	final := br.Snapshot()
	if ts != nil {
		_ = ts.Write(final)
	}
	if o.statsDir != "" {
		rep := finalReport{Seed: seed, IO: ioPath, TxSched: sched, StartedAt: started.UTC(), StoppedAt: time.Now().UTC(),
			Config: br.Config(), SampleMs: cfg.Sample().Milliseconds(), Totals: final}
		data, err := json.MarshalIndent(rep, "", "  ")
		if err == nil {
			err = os.WriteFile(filepath.Join(o.statsDir, "emulator.json"), append(data, '\n'), 0o644)
		}
		if err != nil && runErr == nil {
			runErr = fmt.Errorf("final stats: %w", err)
		}
	}
	return runErr
}
