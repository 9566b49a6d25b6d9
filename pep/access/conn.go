package access

import (
	"math"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

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
	Sample func(Sample)
	Outage func(o Outage, started bool)
}

// Conn applies a Config to one split connection. lan faces the source
// (its window is what pepd clamps), wan faces the satellite link;
// pipe reports the bytes the relay holds in its pipe for LAN->WAN.
type Conn struct {
	cfg   Config
	lan   syscall.RawConn
	wan   syscall.RawConn
	pipe  func() int64
	hooks Hooks

	budget    atomic.Int64 // bytes the relay may still read from the LAN socket before the next tick
	inflight  atomic.Int64 // last grant: maybe not yet out of the LAN queue into the pipe (the relay asks again only after writing it)
	high      atomic.Int64 // highest occupancy seen, bytes
	occupancy atomic.Int64
	reserving atomic.Bool
	down      atomic.Bool

	mu         sync.Mutex // guards the fields below (the monitor and the relay's gate both resize)
	det        DetectorState
	prev       Decision // with LanAllow reduced by reads since
	buf        int64    // LAN receive buffer (sk_rcvbuf) as last set, bytes
	clamp      int      // TCP_WINDOW_CLAMP as last set
	lastCredit int64    // the credit of the previous tick
	ratio      float64  // payload bytes per byte of receive-buffer memory, LAN socket
}

// NewConn prepares the policy for one connection; Run drives it.
func NewConn(cfg Config, lan, wan syscall.RawConn, pipe func() int64, hooks Hooks) *Conn {
	c := &Conn{cfg: cfg, lan: lan, wan: wan, pipe: pipe, hooks: hooks, ratio: 0.5}
	if cfg.Enabled() {
		// Before the first tick the source may send B. An explicit
		// receive buffer also turns autotuning off, which would otherwise
		// resize the buffer under pepd (tcp_rcv_space_adjust).
		c.budget.Store(cfg.Limit())
		c.prev = Decision{LanAllow: cfg.Limit(), Credit: cfg.Limit(), Read: true}
		c.mu.Lock()
		c.resize(0, cfg.Limit())
		c.mu.Unlock()
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
func (c *Conn) step(now time.Time) (Sample, bool) {
	inq, err := ioctlInt(c.lan, unix.SIOCINQ)
	if err != nil {
		return Sample{}, false
	}
	outq, err := ioctlInt(c.wan, unix.SIOCOUTQ)
	if err != nil {
		return Sample{}, false
	}
	var info *unix.TCPInfo
	if cerr := c.wan.Control(func(fd uintptr) {
		info, err = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); cerr != nil || err != nil {
		return Sample{}, false
	}
	wanSide := outq + c.pipe()
	occ := inq + wanSide
	c.occupancy.Store(occ)
	if occ > c.high.Load() {
		c.high.Store(occ)
	}
	var d Decision
	if c.cfg.Enabled() {
		c.mu.Lock()
		d = c.cfg.Decide(inq, wanSide, c.prev)
		c.prev = d
		rmem := c.learnRatio(inq)
		c.resize(rmem, d.Credit)
		c.mu.Unlock()
		c.reserving.Store(d.Reserving)
		// A grant the relay is still reading shows in neither queue
		// reliably: count it against the budget (at worst twice).
		fl := c.inflight.Load()
		switch {
		case !d.Read:
			c.budget.Store(0)
		case d.Reserving:
			c.budget.Store(int64(math.Ceil(c.cfg.Reserve*float64(c.cfg.Limit()))) - wanSide - fl)
		default:
			c.budget.Store(c.cfg.Limit() - wanSide - fl)
		}
	}
	srtt := time.Duration(info.Rtt) * time.Microsecond
	c.mu.Lock()
	o, started, ended := c.det.Observe(info.Bytes_acked, outq, now, c.cfg.StallAfter(srtt))
	c.down.Store(c.det.Down())
	c.mu.Unlock()
	if (started || ended) && c.hooks.Outage != nil {
		c.hooks.Outage(o, started)
	}
	return Sample{Time: now, Inq: inq, WanSide: wanSide, Reserving: d.Reserving, Down: c.down.Load()}, true
}

// The window: the kernel offers the receive buffer's free space as
// window, converted from buffer memory to payload bytes by the socket's
// scaling ratio (learnt from the segments received: about 0.6 for
// 1500-byte frames without offloads, 0.5 before any data). pepd sets the
// buffer (SO_RCVBUFFORCE) to the memory in use plus the credit, so the
// free space is the credit, and zero when there is none. TCP_WINDOW_CLAMP
// cannot do this: the kernel raises a clamp to its floor (about one
// segment) and offers that again with every ACK, so the source trickles
// on, and autotuning resets the clamp.

// learnRatio measures payload per byte of receive memory from the queue
// when it is long enough to average; returns the memory in use.
func (c *Conn) learnRatio(inq int64) (rmem int64) {
	var mem [9]uint32 // SK_MEMINFO_*: rmem_alloc first
	c.lan.Control(func(fd uintptr) {
		l := uint32(len(mem) * 4)
		if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, fd, unix.SOL_SOCKET, unix.SO_MEMINFO,
			uintptr(unsafe.Pointer(&mem[0])), uintptr(unsafe.Pointer(&l)), 0); e == 0 {
			rmem = int64(mem[0])
		}
	})
	if inq >= 16<<10 && rmem > 0 {
		c.ratio = min(max(float64(inq)/float64(rmem), 0.25), 1)
	}
	return rmem
}

// resize sets the LAN receive buffer to rmem plus credit's worth of
// memory. The kernel never retracts a window it has advertised; if the
// buffer is set below what that window needs, it makes room by
// collapsing its queue (tcp_prune_queue), which the per-read accounting
// keeps rare. Caller holds c.mu.
func (c *Conn) resize(rmem, credit int64) {
	// The clamp bounds the window in payload bytes, exactly, whenever the
	// credit is above the kernel's floor for it; the buffer below closes
	// the window when the credit is smaller, and is otherwise sized with
	// room to spare (the ratio errs low) so the clamp is what binds.
	clamp := int(min(max(credit, 1), 1<<30))
	if clamp != c.clamp {
		c.clamp = clamp
		c.lan.Control(func(fd uintptr) {
			unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_WINDOW_CLAMP, clamp)
		})
	}
	// Room for the larger of this credit and the last: data the source
	// sends within a window offered before this tick may still be on its
	// way, and a segment arriving to a full buffer is dropped (the source
	// would retransmit it and halve its window).
	room := max(credit, c.lastCredit)
	c.lastCredit = credit
	buf := rmem + int64(float64(room)/c.ratio)
	if d := buf - c.buf; d > -2048 && d < 2048 && c.buf != 0 {
		return
	}
	c.setBuf(buf)
}

func (c *Conn) setBuf(buf int64) {
	buf = min(max(buf, 4096), 1<<31-2)
	c.buf = buf
	c.lan.Control(func(fd uintptr) {
		unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, int(buf/2)) // the kernel doubles it
	})
}

// Allow is the relay's gate for the LAN->WAN direction: it returns how
// many of max bytes may be read from the LAN socket now, waiting (one tick
// at a time) while the policy says not to read; 0 once closed is closed.
// It grants only what is already queued, and shrinks the receive buffer by
// its memory first, so the read that follows frees no memory the kernel
// could offer the source as new window.
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
		n := min(int64(max), b, inq)
		c.budget.Add(-n)
		c.inflight.Store(n)
		c.mu.Lock()
		c.prev.LanAllow -= n
		// At least one byte of memory per payload byte is freed by the
		// read: shrinking by n never takes room a segment still on its
		// way needs (by n/ratio could, when the ratio is underestimated).
		c.setBuf(c.buf - n)
		c.mu.Unlock()
		return int(n)
	}
}

// Occupancy is the last measured buffer content in bytes; High the most
// seen; Reserving and Down the current states.
func (c *Conn) Occupancy() int64 { return c.occupancy.Load() }
func (c *Conn) High() int64      { return c.high.Load() }
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
