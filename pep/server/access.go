package server

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"satbed/pep/access"
	"satbed/pep/stats"
)

// Files of the access-node buffer (package access), in the state directory.
const (
	OutagesFile = "outages.jsonl" // one line per WAN-leg outage detected and per recovery
	TraceFile   = "buffer.jsonl"  // buffer occupancy samples, with trace_interval
)

// accessState is the server-wide bookkeeping of the access-node buffer.
type accessState struct {
	detected, recovered atomic.Int64
	lastLatencyNs       atomic.Int64 // detection time - last ACK progress, latest outage
	lastDownNs          atomic.Int64 // last ACK progress -> first progress after, latest recovered outage
	highWater           atomic.Int64 // bytes, over all connections and time
	wanHighWater        atomic.Int64 // of the WAN side alone

	rateIDs atomic.Int64

	mu      sync.Mutex
	files   map[string]*os.File
	rate    map[uint64]*access.Conn // wan=rate connections (the relayed ones are in Server.conns)
	fileErr atomic.Int64
}

func (s *Server) accessConfig() access.Config {
	o := s.cfg.Opts
	tick := 5 * time.Millisecond
	if o.BufferPackets == 0 {
		tick = 50 * time.Millisecond // detection only: no window to steer
	}
	return access.Config{Packets: o.BufferPackets, Reserve: o.AckReserve, Tick: tick,
		Stall: o.StallTimeout, TraceInt: o.TraceInterval}
}

// attachAccess puts the access-node policy on a new pair (the direction
// reading the LAN-facing socket) and starts its monitor; the returned
// function stops it once the pair has ended.
func (s *Server) attachAccess(id uint64, e *entry, a, b *net.TCPConn) func() {
	o := s.cfg.Opts
	detect := o.BufferPackets > 0 || o.OutageDetect
	// trace_interval alone measures what the connection holds (the spoofer's
	// buffered bytes over time) without bounding it or watching for outages.
	if !detect && o.TraceInterval == 0 {
		return func() {}
	}
	lan, wan := a, b // SYN from the LAN port: the accepted socket faces the LAN
	if e.side.name == "wan" {
		lan, wan = b, a
	}
	lrc, err1 := lan.SyscallConn()
	wrc, err2 := wan.SyscallConn()
	if err1 != nil || err2 != nil {
		return func() {}
	}
	cfg := s.accessConfig()
	hooks := s.accessHooks(id)
	hooks.Still = e.pair.Still
	ac := access.NewConn(cfg, lrc, access.TCPLeg(wrc, e.pair.Pending), hooks)
	e.acc = ac
	if cfg.Enabled() {
		e.pair.SetGate(ac, e.side.name == "lan")
	}
	return s.runAccess(ac)
}

// rateLeg is what the access-node policy needs of a wan=rate stream
// (*wanrate.Stream): a gate in front of its reads of the LAN socket and
// its sending half's progress.
type rateLeg interface {
	SetGate(allow func(max int, closed <-chan struct{}) int)
	Progress() (acked uint64, held int64)
}

// attachAccessRate puts the access-node policy on a connection the
// wan=rate leg carries: lan is the LAN socket the stream reads, the
// stream's unacknowledged data the WAN side of the buffer. Call before
// the stream relays; the returned function stops the monitor.
func (s *Server) attachAccessRate(lan *net.TCPConn, leg rateLeg) func() {
	o := s.cfg.Opts
	if o.BufferPackets == 0 && !o.OutageDetect {
		return func() {}
	}
	lrc, err := lan.SyscallConn()
	if err != nil {
		return func() {}
	}
	// The stall timer follows the tunnel's smoothed RTT, read every
	// 100 ms (the monitor's tick is 5 ms; only the tick's goroutine calls this).
	var srtt time.Duration
	var srttAt time.Time
	state := func() (access.LegState, error) {
		if now := time.Now(); now.Sub(srttAt) >= 100*time.Millisecond {
			srtt, srttAt = time.Duration(s.tunnel.Snapshot().SRTTms*float64(time.Millisecond)), now
		}
		acked, held := leg.Progress()
		return access.LegState{Acked: acked, Held: held, Outstanding: held, SRTT: srtt, Back: s.tunnel.LinkBack()}, nil
	}
	id := rateIDBase + uint64(s.access.rateIDs.Add(1))
	cfg := s.accessConfig()
	// No relay pipe here (the stream counts what it reads as it reads it,
	// and a grant not yet read stays counted), but the monitor's budget and
	// the stream's grants still take turns.
	var turn sync.Mutex
	hooks := s.accessHooks(id)
	hooks.Still = func(f func()) {
		turn.Lock()
		defer turn.Unlock()
		f()
	}
	ac := access.NewConn(cfg, lrc, state, hooks)
	if cfg.Enabled() {
		leg.SetGate(ac.Allow)
	}
	s.access.mu.Lock()
	if s.access.rate == nil {
		s.access.rate = map[uint64]*access.Conn{}
	}
	s.access.rate[id] = ac
	s.access.mu.Unlock()
	stop := s.runAccess(ac)
	return func() {
		stop()
		s.access.mu.Lock()
		delete(s.access.rate, id)
		s.access.mu.Unlock()
	}
}

// rateIDBase numbers the wan=rate connections in buffer.jsonl and
// outages.jsonl apart from the relayed ones.
const rateIDBase = 1 << 40

// accessHooks write connection id's buffer samples and outages to the
// state directory.
func (s *Server) accessHooks(id uint64) access.Hooks {
	// trace_interval alone: samples, no outages.
	detect := s.cfg.Opts.BufferPackets > 0 || s.cfg.Opts.OutageDetect
	return access.Hooks{
		Sample: func(x access.Sample) {
			s.appendLine(TraceFile, map[string]any{"t": unixSeconds(x.Time), "id": id,
				"occupancy_bytes": x.Inq + x.WanSide, "lan_queue_bytes": x.Inq, "wan_queue_bytes": x.WanSide,
				"reserving": x.Reserving, "wan_down": x.Down})
		},
		Outage: func(out access.Outage, started bool) {
			if !detect {
				return
			}
			rec := map[string]any{"id": id, "last_progress": unixSeconds(out.LastProgress),
				"detected": unixSeconds(out.Detected), "detect_latency_s": out.Detected.Sub(out.LastProgress).Seconds()}
			if started {
				s.access.detected.Add(1)
				s.access.lastLatencyNs.Store(int64(out.Detected.Sub(out.LastProgress)))
				rec["event"] = "down"
			} else {
				s.access.recovered.Add(1)
				s.access.lastDownNs.Store(int64(out.Recovered.Sub(out.LastProgress)))
				rec["event"] = "up"
				rec["recovered"] = unixSeconds(out.Recovered)
				rec["stalled_s"] = out.Recovered.Sub(out.LastProgress).Seconds()
			}
			s.appendLine(OutagesFile, rec)
		},
	}
}

// runAccess drives ac's monitor until the returned function is called.
func (s *Server) runAccess(ac *access.Conn) func() {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		ac.Run(done)
	}()
	return func() {
		close(done)
		<-finished
		if h := ac.High(); h > s.access.highWater.Load() {
			s.access.highWater.Store(h)
		}
		if h := ac.WanHigh(); h > s.access.wanHighWater.Load() {
			s.access.wanHighWater.Store(h)
		}
	}
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// appendLine writes one JSON line with a single write(2) on an O_APPEND
// file, so workers sharing the file never interleave partial lines.
func (s *Server) appendLine(name string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		s.access.fileErr.Add(1)
		return
	}
	s.access.mu.Lock()
	defer s.access.mu.Unlock()
	if s.access.files == nil {
		s.access.files = map[string]*os.File{}
	}
	f := s.access.files[name]
	if f == nil {
		f, err = os.OpenFile(filepath.Join(s.cfg.StateDir, name), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			s.access.fileErr.Add(1)
			return
		}
		s.access.files[name] = f
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		s.access.fileErr.Add(1)
	}
}

// closeAccessFiles is called when the server stops.
func (s *Server) closeAccessFiles() {
	s.access.mu.Lock()
	defer s.access.mu.Unlock()
	for _, f := range s.access.files {
		f.Close()
	}
	s.access.files = nil
}

// accessStats adds the buffer and outage figures to a snapshot.
func (s *Server) accessStats(snap *stats.Snapshot) {
	cfg := s.accessConfig()
	snap.BufferPackets = cfg.Packets
	snap.BufferLimitBytes = cfg.Limit()
	snap.AckReserve = cfg.Reserve
	snap.BufferWanCapBytes = cfg.Decide(0, 0, 0).WanCap
	high, wanHigh := s.access.highWater.Load(), s.access.wanHighWater.Load()
	count := func(ac *access.Conn) {
		snap.BufferBytes += ac.Occupancy()
		high = max(high, ac.High())
		wanHigh = max(wanHigh, ac.WanHigh())
		if ac.Reserving() {
			snap.ConnectionsReserving++
		}
		if ac.Down() && (cfg.Packets > 0 || s.cfg.Opts.OutageDetect) {
			snap.ConnectionsWanDown++
		}
	}
	s.mu.Lock()
	for _, e := range s.conns {
		if e.acc != nil {
			count(e.acc)
		}
	}
	s.mu.Unlock()
	s.access.mu.Lock()
	for _, ac := range s.access.rate {
		count(ac)
	}
	s.access.mu.Unlock()
	snap.BufferHighWaterBytes = high
	snap.BufferWanHighWaterBytes = wanHigh
	snap.OutagesDetected = s.access.detected.Load()
	snap.OutagesRecovered = s.access.recovered.Load()
	snap.LastDetectLatencyS = time.Duration(s.access.lastLatencyNs.Load()).Seconds()
	snap.LastStallS = time.Duration(s.access.lastDownNs.Load()).Seconds()
	snap.AccessFileErrors = s.access.fileErr.Load()
}
