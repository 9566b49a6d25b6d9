// Package bridge runs the two pipelines of satemu between two ports: a
// receive loop per port feeds its direction's pipeline, and a transmit loop
// per direction sends frames out of the other port when their delay expires.
package bridge

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"satbed/emulator/config"
	"satbed/emulator/link"
)

// Port sends and receives whole Ethernet frames. Read blocks until a frame
// arrives or the read deadline passes; SetReadDeadline(past) must wake it.
// Read may return n = 0 (no frame); age is how long ago the frame really
// arrived (0 if unknown).
type Port interface {
	Read(b []byte) (n int, age time.Duration, err error)
	Write(b []byte) error
	SetReadDeadline(t time.Time) error
}

// kernelDropper is implemented by ports that can report frames lost before
// the emulator saw them (full receive buffer, frame larger than the buffer).
type kernelDropper interface {
	KernelDrops() uint64
	Truncated() uint64
}

// Direction names, in pipeline order.
const (
	AToB = "a_to_b"
	BToA = "b_to_a"
)

const (
	minFrameSize = 2048 // read buffer size when Options.FrameSize is smaller
	rxBatch      = 32
	txBatch      = 64
	// maxInFlight bounds the frames held in one direction (queue + delay
	// line), about 512 MiB of buffers: an unshaped link with a long delay
	// would otherwise grow without limit.
	maxInFlight = 1 << 18
)

// Clock returns the time since the emulator started.
type Clock func() time.Duration

// Dir is one direction: its pipeline, user configuration and counters.
type Dir struct {
	Name string

	mu          sync.Mutex // guards pl, raw and lastArrival
	pl          *link.Pipeline
	raw         config.Direction
	lastArrival time.Duration

	dl                  *delayLine
	framesOut, bytesOut atomic.Uint64
	txErrors            atomic.Uint64
	overflow            atomic.Uint64
	txSwitches          atomic.Uint64 // transmit thread's moves in and out of SCHED_FIFO
	txRealtime          atomic.Bool
	sleepOnly           atomic.Bool // the link is too slow to be worth spinning for (spinWorthwhile)
	late                lateHist
	in                  Port
}

// Options tune the transmit loops.
type Options struct {
	// Spin is how long before a frame's departure time the transmit loop
	// stops sleeping and busy-waits. Wake-ups from sleep are tens of
	// microseconds to milliseconds late (more in VMs), so spinning buys
	// precision with CPU time. 0 disables spinning.
	Spin time.Duration
	// FrameSize is the largest frame bridged (larger ones are dropped and
	// counted by the port); at least 2048.
	FrameSize int
	// RTPriority, if > 0, runs the transmit threads under SCHED_FIFO at that
	// priority so other load cannot delay departures; at 0 they run at
	// nice -20 with a short slice (txSched.start).
	RTPriority int
	// RTShare, if > 0, is the share of a CPU above which a transmit thread
	// leaves SCHED_FIFO for nice -20 (see txSched): the kernel's real-time
	// throttle would otherwise stop it for up to 50 ms a second.
	RTShare float64
	// RxRTPriority, if > 0, does the same for the two receive loops: on a
	// machine loaded by other work an ordinary receive thread falls behind
	// at high rates, while the kernel's own shaper runs in softirq ahead of
	// every thread.
	RxRTPriority int
	// Grid, if > 0, is the spacing of the departure grid of slow links (see
	// onGrid); GridOrigin is CLOCK_MONOTONIC's reading at the clock's zero,
	// which puts every satemu on the machine on the same grid.
	Grid       time.Duration
	GridOrigin time.Duration
	// IO names the ports' packet path, reported with the statistics.
	IO string
	// Warn receives non-fatal problems (e.g. SCHED_FIFO not permitted).
	Warn func(format string, args ...any)
}

// Bridge is the running emulator.
type Bridge struct {
	opts  Options
	clock Clock
	Seed  uint64
	dirs  [2]*Dir
	pool  bufPool
}

// bufPool is a free list of frame buffers. Not a sync.Pool: that one is
// emptied at every GC, and at 1 Gbit/s with a 300 ms delay (25,000 frames,
// 50 MB in flight) the buffers were then reallocated at line rate, which
// brought on the next GC. The list keeps the high-water mark of buffers.
type bufPool struct {
	mu   sync.Mutex
	free []*[]byte
	size int
}

func (p *bufPool) get() *[]byte {
	p.mu.Lock()
	if n := len(p.free); n > 0 {
		b := p.free[n-1]
		p.free = p.free[:n-1]
		p.mu.Unlock()
		return b
	}
	p.mu.Unlock()
	b := make([]byte, p.size)
	return &b
}

func (p *bufPool) put(b *[]byte) {
	p.mu.Lock()
	p.free = append(p.free, b)
	p.mu.Unlock()
}

// New builds the pipelines from a validated configuration. seed is the
// PRNG seed actually used; each direction gets its own stream.
// a and bp are the ports facing the ground and the aircraft.
func New(cfg *config.Config, seed uint64, clock Clock, a, bp Port, opts Options) (*Bridge, error) {
	b := &Bridge{clock: clock, Seed: seed, opts: opts}
	b.pool.size = max(opts.FrameSize, minFrameSize)
	for i, d := range []struct {
		name string
		raw  config.Direction
	}{{AToB, cfg.AToB}, {BToA, cfg.BToA}} {
		p, err := d.raw.Params()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", d.name, err)
		}
		b.dirs[i] = &Dir{Name: d.name, pl: link.NewPipeline(p, seed, uint64(i)), raw: d.raw, dl: newDelayLine(maxInFlight)}
		if cfg.Clock == "control" {
			b.dirs[i].pl.HoldSchedules()
		}
	}
	b.dirs[0].in, b.dirs[1].in = a, bp
	return b, nil
}

// Run bridges the ports until ctx is cancelled or a port fails.
func (b *Bridge) Run(ctx context.Context) error {
	a, bp := b.dirs[0].in, b.dirs[1].in
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	start := func(f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil {
				errc <- err
				cancel()
			}
		}()
	}
	// Wake blocked readers on cancellation.
	go func() {
		<-ctx.Done()
		_ = a.SetReadDeadline(time.Now())
		_ = bp.SetReadDeadline(time.Now())
	}()
	start(func() error { return b.rxLoop(ctx, a, b.dirs[0]) })
	start(func() error { return b.rxLoop(ctx, bp, b.dirs[1]) })
	start(func() error { return b.txLoop(ctx, b.dirs[0], bp) })
	start(func() error { return b.txLoop(ctx, b.dirs[1], a) })
	wg.Wait()
	close(errc)
	return <-errc
}

func (b *Bridge) getBuf() *[]byte { return b.pool.get() }

func (b *Bridge) putBuf(p *[]byte) { b.pool.put(p) }

// batchReader and batchWriter are the optional batched forms of Port.
type batchReader interface {
	ReadBatch(bufs [][]byte, sizes []int, ages []time.Duration) (int, error)
}

type batchWriter interface {
	WriteBatch(frames [][]byte) (int, error)
}

// single adapts a plain Port to batchReader.
type single struct{ Port }

func (s single) ReadBatch(bufs [][]byte, sizes []int, ages []time.Duration) (int, error) {
	n, age, err := s.Read(bufs[0])
	if err != nil || n == 0 {
		return 0, err
	}
	sizes[0], ages[0] = n, age
	return 1, nil
}

func (b *Bridge) rxLoop(ctx context.Context, in Port, d *Dir) error {
	if b.opts.RxRTPriority > 0 {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		setSched(unix.SCHED_FIFO, b.opts.RxRTPriority, d.Name+" receive", b.opts.Warn)
	}
	br, ok := in.(batchReader)
	if !ok {
		br = single{in}
	}
	// Frames are read straight into pool buffers; a delivered frame's buffer
	// travels down the delay line and is replaced here.
	bufs := make([][]byte, rxBatch)
	ptrs := make([]*[]byte, rxBatch)
	for i := range bufs {
		ptrs[i] = b.getBuf()
		bufs[i] = *ptrs[i]
	}
	sizes := make([]int, rxBatch)
	ages := make([]time.Duration, rxBatch)
	for ctx.Err() == nil {
		n, err := br.ReadBatch(bufs, sizes, ages)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("%s receive: %w", d.Name, err)
		}
		if n == 0 {
			continue
		}
		now := b.clock()
		d.mu.Lock()
		for i := 0; i < n; i++ {
			if d.receive(now-ages[i], ptrs[i], sizes[i]) {
				ptrs[i] = b.getBuf()
				bufs[i] = *ptrs[i]
			}
		}
		d.sleepOnly.Store(!spinWorthwhile(d.pl.PeakRate()))
		d.mu.Unlock()
		d.dl.signal()
	}
	return nil
}

// receive runs a frame that arrived at t through the pipeline and, if it is
// delivered, into the delay line; true if the delay line took buf. The
// caller holds d.mu.
func (d *Dir) receive(t time.Duration, buf *[]byte, n int) bool {
	// Kernel timestamps may step back by microseconds between frames; the
	// pipeline needs non-decreasing time.
	t = max(t, d.lastArrival)
	d.lastArrival = t
	v := d.pl.Arrive(t, n)
	if v.Cause != link.None {
		return false
	}
	if !d.dl.push(frame{buf: buf, n: n, seq: v.Seq, due: v.Depart}) {
		d.overflow.Add(1)
		return false
	}
	return true
}

func (b *Bridge) txLoop(ctx context.Context, d *Dir, out Port) error {
	// Departure precision: pin the goroutine to a thread whose timer slack is
	// 1 ns, and sleep with nanosleep (hrtimer) instead of Go timers, which
	// round to about a millisecond when the runtime is idle.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	sched := newTxSched(d.Name+" transmit", b.opts.RTPriority, b.opts.RTShare, b.opts.Warn, d)
	sched.start(b.clock())
	wait := waiter{nap: syscallNap, park: parkOnTimer}
	if napHoldingP(runtime.GOMAXPROCS(0)) {
		wait = waiter{nap: rawNap}
	}
	batch := make([]frame, 0, txBatch)
	frames := make([][]byte, 0, txBatch)
	var windowStart, spun time.Duration
	for ctx.Err() == nil {
		due, ok := d.dl.front()
		if !ok {
			select {
			case <-ctx.Done():
				return nil
			case <-d.dl.notify:
			}
			continue
		}
		// Spinning is capped at spinBudget of each spinWindow so that at
		// high frame rates (a frame due every few microseconds) the transmit
		// thread, possibly real-time, does not burn a whole CPU waiting.
		now := b.clock()
		if now-windowStart > spinWindow {
			windowStart, spun = now, 0
		}
		sched.tick(now)
		spin := b.opts.Spin
		if spun > spinBudget || d.sleepOnly.Load() {
			spin = 0
		}
		wake := due
		if b.opts.Grid > 0 && d.sleepOnly.Load() {
			wake = onGrid(due, b.opts.GridOrigin, b.opts.Grid)
		}
		ok, s := sleepUntil(ctx, b.clock, wake, spin, wait)
		spun += s
		if !ok {
			return nil
		}
		batch = d.dl.popDue(b.clock(), batch[:0], txBatch)
		// Lateness is taken when the send starts: on a veth the send call
		// also runs the receiver's stack, which is not link delay.
		now = b.clock()
		for _, f := range batch {
			d.late.add(now - f.due)
		}
		if bw, ok := out.(batchWriter); ok {
			frames = frames[:0]
			for _, f := range batch {
				frames = append(frames, (*f.buf)[:f.n])
			}
			sent, err := bw.WriteBatch(frames)
			for i, f := range batch {
				switch {
				case i < sent:
					d.framesOut.Add(1)
					d.bytesOut.Add(uint64(f.n))
				case i == sent && err != nil:
					d.txErrors.Add(1)
				default:
					// Not attempted after a failure: send individually.
					if out.Write((*f.buf)[:f.n]) != nil {
						d.txErrors.Add(1)
					} else {
						d.framesOut.Add(1)
						d.bytesOut.Add(uint64(f.n))
					}
				}
				b.putBuf(f.buf)
			}
			continue
		}
		for _, f := range batch {
			if err := out.Write((*f.buf)[:f.n]); err != nil {
				d.txErrors.Add(1)
			} else {
				d.framesOut.Add(1)
				d.bytesOut.Add(uint64(f.n))
			}
			b.putBuf(f.buf)
		}
	}
	return nil
}

// Spin budget: at most spinBudget of busy-waiting per spinWindow.
const (
	spinWindow = 100 * time.Millisecond
	spinBudget = 10 * time.Millisecond
)

// sleepOnlyFrameTime: a link whose full-size frame takes at least this long
// to send is not worth spinning for. Its departures are over a millisecond
// apart and each one's due time comes from the shaper's clock, not from the
// previous send, so a wake-up tens of microseconds late moves one frame by a
// few percent of its own transmission time and never accumulates. On an
// 8 Mbit/s link spinning doubled satemu's CPU (18.9 against 9.1 s for a
// 100 MB transfer) for the same goodput (7.648 against 7.650 Mbit/s).
const sleepOnlyFrameTime = time.Millisecond

// onGrid is the first point at or after t (on the emulator's clock, whose
// zero is origin on CLOCK_MONOTONIC) of a grid spaced g apart on
// CLOCK_MONOTONIC itself. A slow link's transmit thread wakes there rather
// than at each frame's own due time: every satemu on the machine uses the
// same grid, so the threads of the cells sharing a core expire their timers
// together and one timer interrupt wakes them all. On this kind of
// paravirtualised machine a thread's timed wake-up costs 20-30 us of CPU,
// against 2 us for one thread waking another; a frame leaves at most
// g late, which on a link slow enough to qualify (sleepOnlyFrameTime) is a
// fraction of its own transmission time and never accumulates, because
// each due time comes from the shaper's clock.
func onGrid(t, origin, g time.Duration) time.Duration {
	abs := t + origin
	if r := abs % g; r != 0 {
		abs += g - r
	}
	return abs - origin
}

// fullFrameBits is an Ethernet frame at the usual 1500-byte MTU.
const fullFrameBits = 1514 * 8

// spinWorthwhile reports whether departures on a link whose shaper sends at
// most peakBps (0 = unshaped: frames may be microseconds apart) can be
// closer together than sleepOnlyFrameTime.
func spinWorthwhile(peakBps float64) bool {
	return peakBps == 0 || time.Duration(fullFrameBits/peakBps*float64(time.Second)) < sleepOnlyFrameTime
}

// parkMargin is where waiting switches from a Go timer to nanosleep. A
// thread blocked in a system call for more than 10 ms makes Go's sysmon take
// its P back and keep polling every 20 us to 1 ms for as long as that goes
// on; an idle satemu sleeping in 50 ms nanosleeps made ~1,000 sysmon
// wake-ups a second, about 9% of a core on this VM, times every cell of a
// matrix. Parked on a timer, the goroutine holds no thread and sysmon
// sleeps; the timer may fire a millisecond late, which the margin absorbs.
const parkMargin = 3 * time.Millisecond

// txThreads is how many transmit loops hold a thread of their own.
const txThreads = 2

// napHoldingP reports whether the transmit loops may sleep in nanosleep
// without telling the Go scheduler (rawNap), given the runtime's Ps. A
// transmit loop with frames queued never passes through the scheduler, so
// every 10 ms sysmon finds its P on the same tick and, the P being in a
// system call, takes it away; each such retake also resets sysmon's own
// polling to 20 us. With both loops doing that, sysmon woke about 2,100
// times a second on an 8 Mbit/s link, half of satemu's context switches. A
// raw nanosleep keeps the P, so sysmon only asks the loop to yield and
// backs off to 10 ms; but the sleeping loop then holds its P, which is
// safe only when the receive loops and the rest keep at least one other
// (satemu's main gives the transmit loops two Ps of their own). A nap is
// at most parkMargin long, which bounds how long it holds up the garbage
// collector's stop-the-world.
func napHoldingP(procs int) bool { return procs > txThreads }

// syscallNap sleeps through the scheduler's system-call path (the P may
// be handed to other goroutines meanwhile).
func syscallNap(d time.Duration) error {
	ts := unix.NsecToTimespec(d.Nanoseconds())
	return unix.Nanosleep(&ts, nil)
}

// rawNap sleeps holding the P (see napHoldingP). A signal (the scheduler's
// preemption request) may end it early with EINTR; the caller sleeps again.
func rawNap(d time.Duration) error {
	ts := unix.NsecToTimespec(d.Nanoseconds())
	if _, _, errno := unix.RawSyscall(unix.SYS_NANOSLEEP, uintptr(unsafe.Pointer(&ts)), 0, 0); errno != 0 {
		return errno
	}
	return nil
}

// A waiter is how a transmit loop waits for a departure more than a
// spin away.
//
// With park set, a long wait parks on a Go timer until parkMargin before
// the due time, then naps. A Go timer fires from whichever of the runtime's
// ordinary threads next looks at the timer heap, so on a loaded host the
// real-time transmit thread can be woken late by the scheduling of a thread
// that is not real-time: under make test a lone echo at 100 ms left 189 ms
// late. Without park (the nap holds the P, see napHoldingP), the transmit
// thread naps the whole wait itself, at most napChunk at a time, and wakes
// at its own real-time priority.
type waiter struct {
	nap func(time.Duration) error
	// park, where set, waits out all but the last parkMargin of a long
	// wait (parkOnTimer); it reports false if ctx ended first.
	park func(context.Context, time.Duration) bool
}

// parkOnTimer waits d on a Go timer, holding no thread.
func parkOnTimer(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// napChunk is the longest nap of a waiter that does not park. A nap held
// past 10 ms draws the scheduler's preemption signal, which ends it early
// (EINTR) and lets the garbage collector's stop-the-world through; longer
// chunks would only be cut there.
const napChunk = 10 * time.Millisecond

// sleepUntil blocks until clock() >= due: parked on a Go timer until
// parkMargin before (if w parks), then naps (nanosleep, an hrtimer, unlike
// Go timers which round to about a millisecond when the runtime is idle),
// then a busy-wait for the last spin. It returns false if ctx ended first,
// and the time spent busy-waiting.
func sleepUntil(ctx context.Context, clock Clock, due, spin time.Duration, w waiter) (bool, time.Duration) {
	for {
		if ctx.Err() != nil {
			return false, 0
		}
		now := clock()
		rem := due - now
		if rem <= 0 {
			return true, 0
		}
		if rem <= spin {
			t := now
			for t < due {
				t = clock()
			}
			return true, t - now
		}
		if park := rem - spin - parkMargin; w.park != nil && park > 0 {
			if !w.park(ctx, park) {
				return false, 0
			}
			continue
		}
		// An early wake-up (EINTR) only costs another round.
		_ = w.nap(min(rem-spin, napChunk))
	}
}

// Set merges a partial direction configuration (JSON object) into dir
// ("a_to_b", "b_to_a" or "both"), validates it like the file and applies it.
// Either every named direction changes or none does.
func (b *Bridge) Set(dir string, partial json.RawMessage) error {
	var targets []*Dir
	switch dir {
	case AToB:
		targets = []*Dir{b.dirs[0]}
	case BToA:
		targets = []*Dir{b.dirs[1]}
	case "both":
		targets = b.dirs[:]
	default:
		return fmt.Errorf("dir %q: want a_to_b, b_to_a or both", dir)
	}
	raws := make([]config.Direction, len(targets))
	params := make([]link.Params, len(targets))
	for i, d := range targets {
		d.mu.Lock()
		cur := d.raw
		d.mu.Unlock()
		m, err := config.Merge(cur, partial)
		if err != nil {
			return fmt.Errorf("%s: %w", d.Name, err)
		}
		p, err := m.Params()
		if err != nil {
			return fmt.Errorf("%s: %w", d.Name, err)
		}
		raws[i], params[i] = m, p
	}
	for i, d := range targets {
		d.mu.Lock()
		// The pipeline's time never goes back: arrivals read after the
		// change count from it.
		now := max(b.clock(), d.lastArrival)
		d.lastArrival = now
		d.raw = raws[i]
		// Frames still in the shaper queue move in the delay line; this
		// runs under d.mu, so the receive loop (its only other producer)
		// is not pushing meanwhile.
		d.pl.SetParams(now, params[i], d.dl.retime)
		d.mu.Unlock()
	}
	return nil
}

// StartClock starts both directions' outage and profile schedules now and
// returns the moment (time since the emulator started).
func (b *Bridge) StartClock() time.Duration {
	now := b.clock()
	for _, d := range b.dirs {
		d.mu.Lock()
		d.pl.StartSchedules(now)
		d.mu.Unlock()
	}
	return now
}

// DirConfig is a direction's configuration as the user wrote it and with
// defaults resolved.
type DirConfig struct {
	Config    config.Direction `json:"config"`
	Effective config.Effective `json:"effective"`
}

// Config returns both directions' configurations.
func (b *Bridge) Config() map[string]DirConfig {
	out := map[string]DirConfig{}
	for _, d := range b.dirs {
		d.mu.Lock()
		raw := d.raw
		d.mu.Unlock()
		eff, _ := raw.Effective() // validated when applied
		out[d.Name] = DirConfig{Config: raw, Effective: eff}
	}
	return out
}

// DirStats is a snapshot of one direction's counters.
type DirStats struct {
	FramesIn        uint64            `json:"frames_in"`
	BytesIn         uint64            `json:"bytes_in"`
	FramesOut       uint64            `json:"frames_out"`
	BytesOut        uint64            `json:"bytes_out"`
	Drops           map[string]uint64 `json:"drops"`
	TxErrors        uint64            `json:"tx_errors"`
	TxRealtime      bool              `json:"tx_realtime"`       // transmit thread under SCHED_FIFO now
	TxSchedSwitches uint64            `json:"tx_sched_switches"` // its moves in and out of SCHED_FIFO (see Options.RTShare)
	Overflow        uint64            `json:"in_flight_overflow"`
	RxTruncated     uint64            `json:"rx_truncated"`
	RxKernelDrops   uint64            `json:"rx_kernel_drops"`
	QueuePackets    int               `json:"queue_packets"`
	QueueBytes      int               `json:"queue_bytes"`
	QueueHWPackets  int               `json:"queue_high_water_packets"`
	QueueHWBytes    int               `json:"queue_high_water_bytes"`
	InFlight        int               `json:"in_flight"`
	LateP50Us       float64           `json:"tx_late_p50_us"`
	LateP99Us       float64           `json:"tx_late_p99_us"`
	LateP999Us      float64           `json:"tx_late_p999_us"`
	LateMaxUs       float64           `json:"tx_late_max_us"`
	GridUs          float64           `json:"departure_grid_us"` // 0: each frame leaves at its own due time (onGrid)
	RateBps         float64           `json:"rate_bps"`
	CeilBps         float64           `json:"ceil_bps"`
	BurstBytes      int               `json:"burst_bytes"`
	CBurstBytes     int               `json:"cburst_bytes"`
	DelayMs         float64           `json:"delay_ms"`
	BER             float64           `json:"ber"`
	Loss            float64           `json:"loss"`
	Up              bool              `json:"up"`
	// The lateness histogram so far and its maximum, for the time series'
	// per-interval lateness (not in the JSON: 2,990 buckets).
	late    *lateCounts
	lateMax time.Duration
}

// Stats is a snapshot of both directions.
type Stats struct {
	TimeS float64             `json:"t_s"`
	IO    string              `json:"io,omitempty"`
	Dirs  map[string]DirStats `json:"directions"`
}

// Snapshot returns the counters now.
func (b *Bridge) Snapshot() Stats {
	now := b.clock()
	st := Stats{TimeS: now.Seconds(), IO: b.opts.IO, Dirs: map[string]DirStats{}}
	for _, d := range b.dirs {
		ds := d.snapshot(now)
		if b.opts.Grid > 0 && d.sleepOnly.Load() {
			ds.GridUs = float64(b.opts.Grid.Microseconds())
		}
		st.Dirs[d.Name] = ds
	}
	return st
}

func (d *Dir) snapshot(now time.Duration) DirStats {
	d.mu.Lock()
	c := d.pl.Counters()
	qp, qb := d.pl.QueueLen(now)
	p := d.pl.Params()
	cond := d.pl.Effective(now)
	d.mu.Unlock()
	s := DirStats{
		FramesIn: c.FramesIn, BytesIn: c.BytesIn,
		FramesOut: d.framesOut.Load(), BytesOut: d.bytesOut.Load(),
		Drops:    map[string]uint64{},
		TxErrors: d.txErrors.Load(), Overflow: d.overflow.Load(),
		TxRealtime: d.txRealtime.Load(), TxSchedSwitches: d.txSwitches.Load(),
		QueuePackets: qp, QueueBytes: qb,
		QueueHWPackets: c.QueueHWPackets, QueueHWBytes: c.QueueHWBytes,
		InFlight: d.dl.len(),
		RateBps:  cond.Rate, CeilBps: max(p.CeilBps, cond.Rate), BurstBytes: p.Burst, CBurstBytes: p.CBurst,
		DelayMs: float64(cond.Delay) / 1e6, BER: cond.BER, Loss: cond.Loss, Up: cond.Up,
	}
	s.late, s.lateMax = d.late.counts(), time.Duration(d.late.max.Load())
	q, mx := s.late.quantiles(s.lateMax, 0.5, 0.99, 0.999), s.lateMax
	s.LateP50Us, s.LateP99Us = float64(q[0].Microseconds()), float64(q[1].Microseconds())
	s.LateP999Us = float64(q[2].Microseconds())
	s.LateMaxUs = float64(mx.Microseconds())
	for c2 := link.DropQueue; int(c2) < link.NumCauses; c2++ {
		s.Drops[c2.String()] = c.Drops[c2]
	}
	if kd, ok := d.in.(kernelDropper); ok {
		s.RxKernelDrops = kd.KernelDrops()
		s.RxTruncated = kd.Truncated()
	}
	return s
}
