// Package server is pepd's core: it accepts TPROXY-redirected
// connections on two transparent listeners (one for SYNs that arrived on
// the PEP's LAN port, one for SYNs from its WAN port), dials the original
// destination from the client's address, and relays between the legs.
package server

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"satbed/pep/access"
	"satbed/pep/nfqueue"
	"satbed/pep/options"
	"satbed/pep/relay"
	"satbed/pep/stats"
	"satbed/pep/tproxy"
	"satbed/pep/tune"
	"satbed/pep/wanrate"
)

// Files pepd keeps in its state directory.
const (
	StatsFile = "stats.json"
	ConnsFile = "conns.jsonl"
	ReadyFile = "pepd.ready"
)

// Config is everything a Server needs.
type Config struct {
	Name     string
	Role     string
	Opts     options.Options
	WAN, LAN tune.Leg // options of WAN-facing and LAN-facing sockets
	StateDir string
	Log      *log.Logger
	// OpenFileLimit is RLIMIT_NOFILE as pepd runs with (reported only).
	OpenFileLimit uint64
	// Workers is how many pepd processes share the listening ports
	// (SO_REUSEPORT when > 1); Worker is this one's index, 0-based.
	// Connection ids are Worker+1, Worker+1+Workers, ... so they stay
	// unique in the shared connection log.
	Workers, Worker int
	// ConnLogPath is the connection log (default StateDir/conns.jsonl);
	// workers append to one file.
	ConnLogPath string
	// WanRate, when set (wan=rate), carries connections from the LAN port
	// to the peer pepd over the rate-based leg on interface WanIf.
	WanRate *wanrate.Config
	WanIf   string
}

// side describes one listener: which PEP port its SYNs came from, and
// hence which leg faces the WAN.
type side struct {
	name     string // "lan" or "wan": where the client's SYN arrived
	port     int
	accepted tune.Leg // options for the accepted (client-facing) socket
	upstream tune.Leg // options for the upstream socket

	mu      sync.Mutex
	ln      *net.TCPListener
	pausing atomic.Bool // set when the server is full: take the queue, then close
}

// Server is one pepd instance.
type Server struct {
	cfg   Config
	pool  *relay.PipePool
	sides [2]*side
	start time.Time

	// abortCtx is cancelled when draining is over: it stops pending
	// upstream dials.
	abortCtx    context.Context
	abortCancel context.CancelFunc

	mu     sync.Mutex
	conns  map[uint64]*entry
	nextID uint64

	active                                          atomic.Int64
	highWater                                       atomic.Int64
	accepted, split, failed, refused, pauses, overs atomic.Int64
	resets, idleTO, halfTO, shutAborts              atomic.Int64
	closedLanToWan, closedWanToLan                  atomic.Int64
	logErrors                                       atomic.Int64

	connLog *stats.ConnLog
	running atomic.Bool
	access  accessState

	// End-to-end handshake mode (handshake=end-to-end): the client's SYN
	// waits in queue until the upstream connect has an answer; held maps
	// (client, server) to the upstream leg being dialled or ready for the
	// listener to pair with the client's connection.
	queue  *nfqueue.Conn
	heldMu sync.Mutex
	held   map[flowKey]*heldLeg

	// wan=rate (wanrate.go): the tunnel and the connections it carries
	// (under mu, ids shared with conns).
	tunnel  *wanrate.Tunnel
	streams map[uint64]*rateStream
}

type flowKey struct{ client, server netip.AddrPort }

type heldLeg struct {
	up    *net.TCPConn // nil while dialling, and after serve took it
	ready time.Time    // when up was connected (and the client's SYN let through)
	taken time.Time    // when serve paired it with the client's connection
}

// takenGrace is how long a flow whose SYN was let through is remembered,
// so a retransmission of the client's SYN still in flight (or a late
// duplicate) goes on to the listener, which answers it on the existing
// connection, instead of starting a second upstream connect: on a lossy
// path that spurious connect reached the server as a second connection.
const takenGrace = 30 * time.Second

// RefuseMark is the packet mark a held SYN leaves the queue with when the
// server refused the upstream connect: the interception rules then route
// it instead of diverting it, and the forward chain answers it with a
// TCP reset in the server's name (pep/adapters/lib/intercept.sh).
const RefuseMark = 8

// Marks the bridge rules give TCP from each PEP port (intercept.sh).
const wanPortMark = 4

type entry struct {
	pair *relay.Pair
	side *side
	acc  *access.Conn // nil unless the access-node buffer or outage detection is on
}

// New validates the configuration and prepares a server.
func New(cfg Config) (*Server, error) {
	if cfg.Log == nil {
		cfg.Log = log.New(os.Stderr, "pepd: ", log.LstdFlags)
	}
	if cfg.Workers < 1 {
		cfg.Workers = 1
	}
	if cfg.Worker < 0 || cfg.Worker >= cfg.Workers {
		return nil, fmt.Errorf("worker %d of %d: index out of range", cfg.Worker, cfg.Workers)
	}
	if cfg.ConnLogPath == "" {
		cfg.ConnLogPath = filepath.Join(cfg.StateDir, ConnsFile)
	}
	o := cfg.Opts
	s := &Server{
		cfg:   cfg,
		pool:  relay.NewPipePool(o.PipeBytes, 32),
		conns: make(map[uint64]*entry),
	}
	s.sides[0] = &side{name: "lan", port: o.Port, accepted: cfg.LAN, upstream: cfg.WAN}
	s.sides[1] = &side{name: "wan", port: o.Port + 1, accepted: cfg.WAN, upstream: cfg.LAN}
	s.abortCtx, s.abortCancel = context.WithCancel(context.Background())
	return s, nil
}

// Run listens, serves until ctx is cancelled, then drains (bounded by
// DrainTimeout), resets what is left and writes final statistics.
func (s *Server) Run(ctx context.Context) error {
	defer s.abortCancel()
	defer s.pool.Close()
	defer s.closeAccessFiles()
	s.start = time.Now()
	if err := os.MkdirAll(s.cfg.StateDir, 0o755); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	for _, sd := range s.sides {
		ln, err := tproxy.Listen(ctx, sd.port, sd.accepted, s.cfg.Workers > 1)
		if err != nil {
			s.closeListeners()
			return err
		}
		sd.ln = ln
	}
	if err := s.startTunnel(); err != nil {
		s.closeListeners()
		return err
	}
	if s.cfg.Opts.ConnLog {
		l, err := stats.OpenConnLog(s.cfg.ConnLogPath)
		if err != nil {
			s.closeListeners()
			return err
		}
		s.connLog = l
		defer l.Close()
	}
	var qwg sync.WaitGroup
	if s.cfg.Opts.Handshake == options.HandshakeEndToEnd {
		// The queue number is the LAN listener's port: unique per pepd in
		// a namespace, and what the adapter's rule uses.
		q, err := nfqueue.Open(uint16(s.cfg.Opts.Port))
		if err != nil {
			s.closeListeners()
			return err
		}
		s.queue = q
		s.held = make(map[flowKey]*heldLeg)
		qwg.Add(1)
		go func() {
			defer qwg.Done()
			s.queueLoop(ctx)
		}()
		defer func() {
			q.Shutdown()
			qwg.Wait()
			q.Close()
			s.heldMu.Lock()
			for k, h := range s.held {
				if h.up != nil {
					h.up.SetLinger(0)
					h.up.Close()
				}
				delete(s.held, k)
			}
			s.heldMu.Unlock()
		}()
	}
	s.running.Store(true)
	if err := s.writeStats(); err != nil {
		s.closeListeners()
		return err
	}
	ready := filepath.Join(s.cfg.StateDir, ReadyFile)
	if err := os.WriteFile(ready, fmt.Appendf(nil, "%d\n", os.Getpid()), 0o644); err != nil {
		s.closeListeners()
		return fmt.Errorf("ready file: %w", err)
	}
	defer os.Remove(ready)
	s.cfg.Log.Printf("listening: SYNs from LAN port on :%d, from WAN port on :%d; WAN leg %+v; LAN leg %+v",
		s.sides[0].port, s.sides[1].port, s.cfg.WAN, s.cfg.LAN)

	var wg sync.WaitGroup
	for _, sd := range s.sides {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.acceptLoop(ctx, sd)
		}()
	}
	bgCtx, bgCancel := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	bg.Add(1)
	go func() {
		defer bg.Done()
		s.housekeeping(bgCtx)
	}()

	<-ctx.Done()
	s.closeListeners()
	wg.Wait()
	s.drain()
	bgCancel()
	bg.Wait()
	s.running.Store(false)
	return s.writeStats()
}

func (s *Server) closeListeners() {
	for _, sd := range s.sides {
		sd.mu.Lock()
		if sd.ln != nil {
			sd.ln.Close()
			sd.ln = nil
		}
		sd.mu.Unlock()
	}
}

// drain waits for active connections to finish on their own, then resets
// the rest so no end host keeps a connection to a vanished relay.
func (s *Server) drain() {
	deadline := time.Now().Add(s.cfg.Opts.DrainTimeout)
	for s.active.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := s.active.Load(); n > 0 {
		s.cfg.Log.Printf("drain timeout: resetting %d connections", n)
	}
	s.abortCancel()
	s.mu.Lock()
	for _, e := range s.conns {
		e.pair.Abort("shutdown", nil)
	}
	s.mu.Unlock()
	s.stopTunnel()
	for end := time.Now().Add(5 * time.Second); s.active.Load() > 0 && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
}

func (s *Server) listener(sd *side) *net.TCPListener {
	sd.mu.Lock()
	defer sd.mu.Unlock()
	return sd.ln
}

func (s *Server) acceptLoop(ctx context.Context, sd *side) {
	o := s.cfg.Opts
	for {
		ln := s.listener(sd)
		if ln == nil {
			return
		}
		c, err := ln.AcceptTCP()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			if sd.pausing.Load() && errors.Is(err, os.ErrDeadlineExceeded) {
				s.takeQueued(ln, sd)
				if !s.pause(ctx, sd) {
					return
				}
				sd.pausing.Store(false)
				continue
			}
			// Out of descriptors or memory: back off instead of spinning;
			// the kernel keeps the queued connections meanwhile.
			s.cfg.Log.Printf("accept on %s listener: %v", sd.name, err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		s.accepted.Add(1)
		over := s.active.Load() >= int64(o.MaxConns)
		if over && o.Overflow == options.OverflowRefuse {
			s.refused.Add(1)
			c.SetLinger(0)
			c.Close()
			s.record(stats.Record{Side: sd.name, Client: addr(c.RemoteAddr()), Server: addr(c.LocalAddr()),
				Start: time.Now().UTC().Format(time.RFC3339Nano), Result: "refused_overflow"})
			continue
		}
		if over {
			// Connections that queued while another listener filled up.
			s.overs.Add(1)
		}
		n := s.active.Add(1)
		for hw := s.highWater.Load(); n > hw && !s.highWater.CompareAndSwap(hw, n); hw = s.highWater.Load() {
		}
		go s.serve(c, sd)
		if n >= int64(o.MaxConns) && o.Overflow == options.OverflowPassthrough {
			s.pauseListeners()
		}
	}
}

// pauseListeners makes both accept loops stop listening, so the kernel
// no longer diverts new SYNs (TPROXY finds no socket and the packets are
// forwarded unsplit). The loops first take what is already queued:
// closing a listener would reset those clients.
func (s *Server) pauseListeners() {
	for _, sd := range s.sides {
		if !sd.pausing.CompareAndSwap(false, true) {
			continue
		}
		if ln := s.listener(sd); ln != nil {
			ln.SetDeadline(time.Now()) // wakes the accept loop
		}
	}
}

// takeQueued accepts the connections already in ln's queue and closes ln.
// It uses accept4 directly because Go's Accept refuses to run once the
// deadline that woke the loop has passed; the window between the last
// accept and the close is a few microseconds.
func (s *Server) takeQueued(ln *net.TCPListener, sd *side) {
	var fds []int
	if rc, err := ln.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) {
			for {
				nfd, _, err := unix.Accept4(int(fd), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
				if err != nil {
					return
				}
				fds = append(fds, nfd)
			}
		})
	}
	sd.mu.Lock()
	if sd.ln == ln {
		ln.Close()
		sd.ln = nil
	}
	sd.mu.Unlock()
	for _, fd := range fds {
		f := os.NewFile(uintptr(fd), "accepted")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			s.cfg.Log.Printf("queued connection on %s listener: %v", sd.name, err)
			continue
		}
		s.accepted.Add(1)
		s.overs.Add(1)
		s.active.Add(1)
		go s.serve(c.(*net.TCPConn), sd)
	}
}

// pause closes sd's listener until the active count falls to 90% of the
// limit, then reopens it. It returns false if ctx ended meanwhile.
func (s *Server) pause(ctx context.Context, sd *side) bool {
	s.pauses.Add(1)
	sd.mu.Lock()
	if sd.ln != nil {
		sd.ln.Close()
		sd.ln = nil
	}
	sd.mu.Unlock()
	resume := int64(s.cfg.Opts.MaxConns) * 9 / 10
	if resume >= int64(s.cfg.Opts.MaxConns) {
		resume = int64(s.cfg.Opts.MaxConns) - 1
	}
	s.cfg.Log.Printf("%s listener paused at %d connections (passthrough); resuming below %d", sd.name, s.active.Load(), resume+1)
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
		if s.active.Load() > resume {
			continue
		}
		ln, err := tproxy.Listen(ctx, sd.port, sd.accepted, s.cfg.Workers > 1)
		if err != nil {
			s.cfg.Log.Printf("reopen %s listener: %v", sd.name, err)
			continue
		}
		sd.mu.Lock()
		if ctx.Err() != nil {
			sd.mu.Unlock()
			ln.Close()
			return false
		}
		sd.ln = ln
		sd.mu.Unlock()
		s.cfg.Log.Printf("%s listener resumed", sd.name)
		return true
	}
}

func addr(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}

// serve splits one accepted connection: the accepted socket's local
// address is the original destination (TPROXY keeps it), and the
// upstream leg is dialled from the client's address.
func (s *Server) serve(c *net.TCPConn, sd *side) {
	defer s.active.Add(-1)
	start := time.Now()
	client, _ := c.RemoteAddr().(*net.TCPAddr)
	orig, _ := c.LocalAddr().(*net.TCPAddr)
	rec := stats.Record{Side: sd.name, Client: addr(client), Server: addr(orig), Start: start.UTC().Format(time.RFC3339Nano)}
	fail := func(result string, err error) {
		s.failed.Add(1)
		c.SetLinger(0) // the client gets a reset at once, never a hung connection
		c.Close()
		rec.Result = result
		rec.Error = err.Error()
		rec.DurationS = time.Since(start).Seconds()
		s.record(rec)
	}
	if client == nil || orig == nil {
		fail("connect_failed", errors.New("accepted socket without TCP addresses"))
		return
	}
	if err := tproxy.ApplyPost(c, sd.accepted); err != nil {
		fail("connect_failed", fmt.Errorf("accepted socket options: %w", err))
		return
	}
	if s.serveRate(c, sd, client, orig, start, rec) {
		return
	}
	up := s.takeHeld(client, orig)
	if up == nil {
		// Local handshake (or a SYN that bypassed the queue): the
		// client is connected already; now reach the server.
		dctx, cancel := context.WithTimeout(s.abortCtx, s.cfg.Opts.ConnectTimeout)
		var err error
		up, err = tproxy.Dial(dctx, client, orig, sd.upstream)
		cancel()
		if err != nil {
			fail("connect_failed", err)
			return
		}
	}
	if err := tproxy.ApplyPost(up, sd.upstream); err != nil {
		up.SetLinger(0)
		up.Close()
		fail("connect_failed", fmt.Errorf("upstream socket options: %w", err))
		return
	}
	rec.Upstream = addr(up.LocalAddr())
	s.split.Add(1)

	e := &entry{pair: relay.NewPair(c, up, s.pool), side: sd}
	s.mu.Lock()
	s.nextID++
	id := (s.nextID-1)*uint64(s.cfg.Workers) + uint64(s.cfg.Worker) + 1
	s.conns[id] = e
	s.mu.Unlock()
	if s.abortCtx.Err() != nil {
		// Shutdown began while dialling: drain no longer aborts us.
		e.pair.Abort("shutdown", nil)
	}
	stopAccess := s.attachAccess(id, e, c, up)

	reason, rerr := e.pair.Run()
	stopAccess()

	s.mu.Lock()
	delete(s.conns, id)
	s.mu.Unlock()
	a2b, b2a := e.pair.Bytes()
	l2w, w2l := directional(sd, a2b, b2a)
	s.closedLanToWan.Add(l2w)
	s.closedWanToLan.Add(w2l)
	switch reason {
	case relay.ReasonResetA, relay.ReasonResetB:
		s.resets.Add(1)
	case "idle_timeout":
		s.idleTO.Add(1)
	case "half_close_timeout":
		s.halfTO.Add(1)
	case "shutdown":
		s.shutAborts.Add(1)
	}
	rec.ID = id
	rec.Result = reason
	if rerr != nil && !errors.Is(rerr, syscall.ECONNRESET) {
		rec.Error = rerr.Error()
	}
	rec.BytesLanToWan, rec.BytesWanToLan = l2w, w2l
	rec.DurationS = time.Since(start).Seconds()
	s.record(rec)
}

// queueLoop takes the SYNs the interception rules queue (handshake
// end-to-end) and starts an upstream connect for each new flow.
func (s *Server) queueLoop(ctx context.Context) {
	for {
		p, err := s.queue.Receive()
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				s.cfg.Log.Printf("SYN queue: %v", err)
			}
			return
		}
		seg, err := nfqueue.ParseTCP(p.Payload)
		if err != nil || !seg.SYN || seg.ACK || ctx.Err() != nil {
			// Not a client's SYN (the rule queues nothing else), or pepd
			// is draining: its listeners are closed, so the SYN passes
			// unsplit, as in the local mode.
			s.verdict(p.ID, nfqueue.Accept, false, 0)
			continue
		}
		sd := s.sides[0]
		if p.Mark&wanPortMark != 0 {
			sd = s.sides[1]
		}
		k := flowKey{seg.Src, seg.Dst}
		s.heldMu.Lock()
		h, dup := s.held[k]
		if !dup {
			s.held[k] = &heldLeg{}
		}
		s.heldMu.Unlock()
		if dup {
			if h.up == nil && h.taken.IsZero() {
				// The client's retransmitted SYN while the server has not
				// answered yet: the first one is still held.
				s.verdict(p.ID, nfqueue.Drop, false, 0)
			} else {
				// Connected already: the listener answers the duplicate.
				s.verdict(p.ID, nfqueue.Accept, false, 0)
			}
			continue
		}
		go s.connectHeld(p, k, sd)
	}
}

func (s *Server) verdict(id, v uint32, setMark bool, mark uint32) {
	if err := s.queue.Verdict(id, v, setMark, mark); err != nil {
		s.cfg.Log.Printf("SYN queue verdict: %v", err)
	}
}

// connectHeld dials the server for a held SYN. Connected: the SYN goes on
// to the listener, whose serve pairs it with this leg. Refused: the SYN
// leaves marked for a reset, so the client is refused by the server's
// answer one end-to-end RTT after its SYN, and nothing is split. No
// answer: the SYN is dropped, as the path would have lost it.
func (s *Server) connectHeld(p nfqueue.Packet, k flowKey, sd *side) {
	start := time.Now()
	client, server := net.TCPAddrFromAddrPort(k.client), net.TCPAddrFromAddrPort(k.server)
	dctx, cancel := context.WithTimeout(s.abortCtx, s.cfg.Opts.ConnectTimeout)
	up, err := tproxy.Dial(dctx, client, server, sd.upstream)
	cancel()
	if err == nil {
		s.heldMu.Lock()
		s.held[k].up, s.held[k].ready = up, time.Now()
		s.heldMu.Unlock()
		s.verdict(p.ID, nfqueue.Accept, false, 0)
		return
	}
	s.heldMu.Lock()
	delete(s.held, k)
	s.heldMu.Unlock()
	s.failed.Add(1)
	rec := stats.Record{Side: sd.name, Client: client.String(), Server: server.String(),
		Start: start.UTC().Format(time.RFC3339Nano), Error: err.Error(), DurationS: time.Since(start).Seconds()}
	if errors.Is(err, syscall.ECONNREFUSED) {
		rec.Result = "refused_upstream"
		s.verdict(p.ID, nfqueue.Accept, true, p.Mark|RefuseMark)
	} else {
		rec.Result = "connect_failed"
		s.verdict(p.ID, nfqueue.Drop, false, 0)
	}
	s.record(rec)
}

// takeHeld returns the upstream leg connected for this client's held SYN,
// or nil.
func (s *Server) takeHeld(client, orig *net.TCPAddr) *net.TCPConn {
	if s.queue == nil {
		return nil
	}
	k := flowKey{client.AddrPort(), orig.AddrPort()}
	k.client = netip.AddrPortFrom(k.client.Addr().Unmap(), k.client.Port())
	k.server = netip.AddrPortFrom(k.server.Addr().Unmap(), k.server.Port())
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	h := s.held[k]
	if h == nil || h.up == nil {
		return nil
	}
	up := h.up
	h.up, h.taken = nil, time.Now()
	return up
}

// expireHeld closes upstream legs whose client connection never reached
// the listener (its SYN was let through but lost, e.g. the listener was
// full), so they do not hold the server's connection open.
func (s *Server) expireHeld(now time.Time) {
	if s.queue == nil {
		return
	}
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	for k, h := range s.held {
		switch {
		case h.up != nil && now.Sub(h.ready) > s.cfg.Opts.ConnectTimeout:
			h.up.SetLinger(0)
			h.up.Close()
			delete(s.held, k)
		case !h.taken.IsZero() && now.Sub(h.taken) > takenGrace:
			delete(s.held, k)
		}
	}
}

// directional maps client->upstream / upstream->client byte counts to
// LAN->WAN / WAN->LAN for the side the SYN came from.
func directional(sd *side, a2b, b2a int64) (lanToWan, wanToLan int64) {
	if sd.name == "lan" {
		return a2b, b2a
	}
	return b2a, a2b
}

func (s *Server) record(r stats.Record) {
	if s.connLog == nil {
		return
	}
	if err := s.connLog.Add(r); err != nil {
		s.logErrors.Add(1)
	}
}

// housekeeping enforces timeouts and refreshes the statistics.
func (s *Server) housekeeping(ctx context.Context) {
	t := time.NewTicker(s.cfg.Opts.StatsInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.enforceTimeouts(time.Now())
		s.expireHeld(time.Now())
		if s.connLog != nil {
			if err := s.connLog.Flush(); err != nil {
				s.logErrors.Add(1)
			}
		}
		if err := s.writeStats(); err != nil {
			s.cfg.Log.Print(err)
		}
	}
}

func (s *Server) enforceTimeouts(now time.Time) {
	o := s.cfg.Opts
	if o.IdleTimeout == 0 && o.HalfCloseTimeout == 0 {
		return
	}
	var victims []*entry
	var reasons []string
	s.mu.Lock()
	for _, e := range s.conns {
		last := e.pair.LastActive()
		if o.IdleTimeout > 0 && now.Sub(last) > o.IdleTimeout {
			victims, reasons = append(victims, e), append(reasons, "idle_timeout")
			continue
		}
		if hc, ok := e.pair.HalfClosed(); ok && o.HalfCloseTimeout > 0 {
			if hc.After(last) {
				last = hc
			}
			if now.Sub(last) > o.HalfCloseTimeout {
				victims, reasons = append(victims, e), append(reasons, "half_close_timeout")
			}
		}
	}
	s.mu.Unlock()
	for i, e := range victims {
		e.pair.Abort(reasons[i], nil)
	}
}

// Snapshot returns the current statistics.
func (s *Server) Snapshot() stats.Snapshot {
	l2w, w2l := s.closedLanToWan.Load(), s.closedWanToLan.Load()
	s.mu.Lock()
	for _, e := range s.conns {
		a2b, b2a := e.pair.Bytes()
		x, y := directional(e.side, a2b, b2a)
		l2w += x
		w2l += y
	}
	x, y := s.rateBytesLocked()
	l2w += x
	w2l += y
	s.mu.Unlock()
	listening := true
	var ports []int
	for _, sd := range s.sides {
		ports = append(ports, sd.port)
		if s.listener(sd) == nil {
			listening = false
		}
	}
	snap := stats.Snapshot{
		Name:                   s.cfg.Name,
		ConnectionsSplit:       s.split.Load(),
		ConnectionsActive:      s.active.Load(),
		BytesLanToWan:          l2w,
		BytesWanToLan:          w2l,
		Splitting:              true,
		Role:                   s.cfg.Role,
		PID:                    os.Getpid(),
		Running:                s.running.Load(),
		Listening:              listening && s.running.Load(),
		Updated:                time.Now().UTC().Format(time.RFC3339Nano),
		UptimeS:                time.Since(s.start).Seconds(),
		ConnectionsAccepted:    s.accepted.Load(),
		ConnectionsFailed:      s.failed.Load(),
		ConnectionsRefused:     s.refused.Load(),
		OverflowPauses:         s.pauses.Load(),
		ResetsPropagated:       s.resets.Load(),
		TimeoutsIdle:           s.idleTO.Load(),
		TimeoutsHalfClose:      s.halfTO.Load(),
		AbortedAtShutdown:      s.shutAborts.Load(),
		WanBufferBytes:         s.cfg.WAN.Buf,
		LanBufferBytes:         s.cfg.LAN.Buf,
		ListenPorts:            ports,
		Options:                s.cfg.Opts.Map(),
		ConnectionsHighWater:   s.highWater.Load(),
		PipeBytesPerDirection:  s.cfg.Opts.PipeBytes,
		PipesInUse:             s.pool.InUse(),
		PipesUndersized:        s.pool.Undersized(),
		OpenFileLimit:          s.cfg.OpenFileLimit,
		ConnectionLogDropped:   s.logErrors.Load(),
		ConnectionsOverCeiling: s.overs.Load(),
		Workers:                s.cfg.Workers,
		WanRate:                s.rateStats(),
	}
	if s.connLog != nil {
		snap.ConnectionLogPath = s.cfg.ConnLogPath
	}
	s.accessStats(&snap)
	return snap
}

func (s *Server) writeStats() error {
	return stats.WriteAtomic(filepath.Join(s.cfg.StateDir, StatsFile), s.Snapshot())
}
