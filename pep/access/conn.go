package access

import (
	"errors"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Sample is one measurement of a connection's buffer, for the trace.
type Sample struct {
	Time      time.Time
	Inq       int64 // LAN socket receive queue
	WanSide   int64 // relay pipe + WAN socket send queue
	Reserving bool
	Down      bool // WAN leg in a detected outage
}

// Hooks receive a connection's events; any may be nil.
type Hooks struct {
	// Still runs f while the relay moves no bytes between the LAN socket,
	// its pipe and the WAN side (relay.Pair.Still). Each tick measures and
	// sets the budget under it, and Allow takes a grant under it, so a
	// sample counts each byte once and no grant outlives the budget it was
	// taken from; nil runs f as it comes.
	Still  func(f func())
	Sample func(Sample)
	Outage func(o Outage, started bool)
}

// LegState is the satellite side of a connection as the policy sees it.
type LegState struct {
	Acked       uint64        // bytes the far end has acknowledged so far
	Held        int64         // bytes taken from the LAN socket and not yet acknowledged
	Outstanding int64         // of those, what the leg waits to see acknowledged (0: idle)
	SRTT        time.Duration // the leg's smoothed round trip (0: unknown)
	// Back is when the leg last came back from an outage it detected
	// itself (zero: never, or the leg cannot tell): the wan=rate tunnel
	// hears its peer's probe half a round trip before any data it resends
	// can be acknowledged.
	Back time.Time
}

// Leg reports the satellite side's state; an error means it is gone.
type Leg func() (LegState, error)

// TCPLeg is the TCP WAN socket wan behind a relay whose pipe holds pipe()
// bytes read from the LAN and not yet written to wan.
func TCPLeg(wan syscall.RawConn, pipe func() int64) Leg {
	return func() (LegState, error) {
		outq, err := ioctlInt(wan, unix.SIOCOUTQ)
		if err != nil {
			return LegState{}, err
		}
		var info *unix.TCPInfo
		if cerr := wan.Control(func(fd uintptr) {
			info, err = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		}); cerr != nil || err != nil {
			return LegState{}, errors.Join(cerr, err)
		}
		return LegState{Acked: info.Bytes_acked, Held: outq + pipe(), Outstanding: outq,
			SRTT: time.Duration(info.Rtt) * time.Microsecond}, nil
	}
}

// Conn applies a Config to one split connection. lan faces the source
// (the socket whose reads pepd gates), leg is the satellite side (a TCP
// socket behind the relay, or a wan=rate stream).
type Conn struct {
	cfg   Config
	lan   syscall.RawConn
	leg   Leg
	hooks Hooks

	budget    atomic.Int64 // bytes the relay may still read from the LAN socket before the next tick
	inflight  atomic.Int64 // last grant: maybe not yet out of the LAN queue into the pipe (the relay asks again only after writing it)
	high      atomic.Int64 // highest occupancy seen, bytes
	wanHigh   atomic.Int64 // highest WAN side seen, bytes
	occupancy atomic.Int64
	reserving atomic.Bool
	down      atomic.Bool

	mu  sync.Mutex // guards det
	det DetectorState

	// Only step's goroutine: when the leg last came back from an outage
	// and its round trip then (see Config.ReserveAt).
	backAt   time.Time
	backRTT  time.Duration
	lastBack time.Time
	stepped  bool
}

// NewConn prepares the policy for one connection; Run drives it.
func NewConn(cfg Config, lan syscall.RawConn, leg Leg, hooks Hooks) *Conn {
	c := &Conn{cfg: cfg, lan: lan, leg: leg, hooks: hooks}
	if cfg.Enabled() {
		// The LAN share of B as a fixed receive buffer: the window the
		// kernel offers is its free space. An explicit size also turns
		// autotuning off, which would grow it. The kernel counts memory,
		// not payload: about 0.75 payload bytes per byte for 1500-byte
		// frames without offloads (it doubles the value given).
		c.budget.Store(cfg.Limit() - cfg.LanShare())
		buf := int(float64(cfg.LanShare()) / 0.75)
		lan.Control(func(fd uintptr) {
			unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, (buf+1)/2)
		})
	}
	return c
}

// Run measures and applies the policy every tick until done is closed.
func (c *Conn) Run(done <-chan struct{}) {
	tick := c.cfg.Tick
	if tick <= 0 {
		tick = 5 * time.Millisecond
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	var lastTrace time.Time
	for {
		select {
		case <-done:
			return
		case now := <-t.C:
			s, ok := c.step(now)
			if ok && c.hooks.Sample != nil && c.cfg.TraceInt > 0 && now.Sub(lastTrace) >= c.cfg.TraceInt {
				lastTrace = now
				c.hooks.Sample(s)
			}
		}
	}
}

// step takes one sample and applies the decision; false when the sockets
// are gone.
func (c *Conn) step(now time.Time) (s Sample, ok bool) {
	var o Outage
	var started, ended bool
	// Measured and decided while the relay neither moves bytes nor takes a
	// grant: a budget computed from a measurement the relay has moved on
	// from lets the WAN side pass its cap.
	c.still(func() { s, o, started, ended, ok = c.measureAndDecide(now) })
	if ok && (started || ended) && c.hooks.Outage != nil {
		c.hooks.Outage(o, started)
	}
	return s, ok
}

// still runs f while the relay moves no bytes (Hooks.Still).
func (c *Conn) still(f func()) {
	if c.hooks.Still != nil {
		c.hooks.Still(f)
	} else {
		f()
	}
}

func (c *Conn) measureAndDecide(now time.Time) (Sample, Outage, bool, bool, bool) {
	inq, err := ioctlInt(c.lan, unix.SIOCINQ)
	if err != nil {
		return Sample{}, Outage{}, false, false, false
	}
	ls, err := c.leg()
	if err != nil {
		return Sample{}, Outage{}, false, false, false
	}
	wanSide := ls.Held
	occ := inq + wanSide
	c.occupancy.Store(occ)
	if occ > c.high.Load() {
		c.high.Store(occ)
	}
	if wanSide > c.wanHigh.Load() {
		c.wanHigh.Store(wanSide)
	}
	c.mu.Lock()
	o, started, ended := c.det.Observe(ls.Acked, ls.Outstanding, now, c.cfg.StallAfter(ls.SRTT))
	c.down.Store(c.det.Down())
	c.mu.Unlock()
	// The leg is back: release what the reservation holds at once, not
	// when the resent data's acknowledgements have drained the buffer
	// below K·B a satellite round trip later.
	// (A link-back before this connection's first step is not its own.)
	if ended || (c.stepped && ls.Back.After(c.lastBack)) {
		c.backAt, c.backRTT = now, max(ls.SRTT, 200*time.Millisecond)
	}
	c.lastBack, c.stepped = ls.Back, true
	var d Decision
	if c.cfg.Enabled() {
		d = c.cfg.Decide(inq, wanSide, c.cfg.ReserveAt(now.Sub(c.backAt), c.backRTT, !c.backAt.IsZero()))
		c.reserving.Store(d.Reserving)
		if d.Read {
			// A grant the relay is still reading shows in neither queue
			// reliably: count it against the budget (at worst twice).
			c.budget.Store(d.WanCap - wanSide - c.inflight.Load())
		} else {
			c.budget.Store(0)
		}
	}
	return Sample{Time: now, Inq: inq, WanSide: wanSide, Reserving: d.Reserving, Down: c.down.Load()}, o, started, ended, true
}

// Allow is the relay's gate for the LAN->WAN direction: it returns how
// many of max bytes may be read from the LAN socket now, waiting (one tick
// at a time) while the policy says not to read; 0 once closed is closed.
// It grants only what is already queued, so the read that follows frees
// no more window for the source than the policy allows.
func (c *Conn) Allow(max int, closed <-chan struct{}) int {
	tick := c.cfg.Tick
	if tick <= 0 {
		tick = 5 * time.Millisecond
	}
	c.inflight.Store(0) // the previous grant has been read and written
	for {
		select {
		case <-closed:
			return 0
		default:
		}
		b := c.budget.Load()
		if b <= 0 {
			select {
			case <-closed:
				return 0
			case <-time.After(tick):
			}
			continue
		}
		inq, err := ioctlInt(c.lan, unix.SIOCINQ)
		if err != nil {
			return max // let the read report the error
		}
		if inq == 0 {
			// Nothing queued: wait for data (or EOF, or an error, which
			// the read must see) at most a tick, then look again.
			var ready bool
			c.lan.Control(func(fd uintptr) {
				p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN | unix.POLLRDHUP}}
				n, _ := unix.Poll(p, int(tick/time.Millisecond))
				ready = n > 0
			})
			if !ready {
				continue
			}
			if inq, err = ioctlInt(c.lan, unix.SIOCINQ); err != nil || inq == 0 {
				return max // EOF or error: the read reports it
			}
		}
		// The budget as it is now, not as it was before the wait: a tick
		// may have lowered it meanwhile.
		var n int64
		c.still(func() {
			if n = min(int64(max), c.budget.Load(), inq); n > 0 {
				c.budget.Add(-n)
				c.inflight.Store(n)
			}
		})
		if n > 0 {
			return int(n)
		}
	}
}

// Occupancy is the last measured buffer content in bytes; High the most
// seen; Reserving and Down the current states.
func (c *Conn) Occupancy() int64 { return c.occupancy.Load() }
func (c *Conn) High() int64      { return c.high.Load() }
func (c *Conn) WanHigh() int64   { return c.wanHigh.Load() }
func (c *Conn) Reserving() bool  { return c.reserving.Load() }
func (c *Conn) Down() bool       { return c.down.Load() }

func ioctlInt(rc syscall.RawConn, req uint) (int64, error) {
	var v int
	var ierr error
	if err := rc.Control(func(fd uintptr) { v, ierr = unix.IoctlGetInt(int(fd), req) }); err != nil {
		return 0, err
	}
	return int64(v), ierr
}
