package wanrate

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"log"
	"math"
	"net/netip"
	"sync"
	"time"
)

// Config tunes a Tunnel. Zero values pick the defaults on each field.
type Config struct {
	// RateBPS is the link rate hint in bit/s (the adapter's
	// SATBED_RATE_BPS). With Adapt it is where pacing starts and the
	// most it probes to; 0 starts at 1 Mbit/s and probes without a cap.
	RateBPS int64
	// RTT is the round-trip hint until the first measurement (default 1 s).
	RTT time.Duration
	// Window is each stream's receive window in bytes: the most either
	// pepd holds for one direction of one connection (default 8 x the
	// hinted BDP, at least 1 MiB: with 11 % of frames lost a hole waits one
	// round trip, a lost repair two or more, while the rest keeps coming).
	Window int
	// BER is the link's bit-error rate hint (SATBED_BER). With FrameBytes
	// 0 it sizes the data frames: at 1e-5 a full 1,514-byte frame is lost
	// 11 % of the time, one of about 780 bytes 6 %, which carries more
	// payload per second despite its headers (FrameForBER).
	BER float64
	// FrameBytes is the largest data frame (tunnel header included,
	// Ethernet header not); 0 picks it from BER, at most the link's MTU.
	FrameBytes int
	// Adapt follows the path: pacing drops when queueing delay appears
	// (the link got slower) and probes back up when it is gone.
	Adapt bool
	// Accept is called (in its own goroutine) for each stream the peer
	// opens; it must dial the stream's Dst and call Stream.Relay, or
	// Stream.Refuse.
	Accept func(*Stream)
	Log    *log.Logger
	// PeerTimeout declares the peer gone after this much silence, which
	// resets its streams (default 60 s: a rain fade or a handover lasts
	// seconds to tens of seconds, and the streams survive it; negative:
	// never, the end hosts' own timeouts decide).
	PeerTimeout time.Duration
}

const (
	helloEvery   = time.Second
	tickEvery    = 5 * time.Millisecond
	statusEvery  = 20 * time.Millisecond
	closedLinger = 2 * time.Minute
	minRate      = 64_000
	// stallLimit resets a stream whose peer stopped making progress on it.
	stallLimit = 60 * time.Second
	// probeEvery paces the probes sent while the link is stalled: small
	// HELLOs (66 bytes, 10 kbit/s) instead of data, so the first one
	// after the link returns is answered within a round trip.
	probeEvery = 50 * time.Millisecond
	// defaultPeerTimeout outlasts an outage of tens of seconds.
	defaultPeerTimeout = 60 * time.Second
)

type key struct {
	mine bool // opened by this pepd
	id   uint32
}

type closedEntry struct {
	at    time.Time
	ack   uint64 // the final cumulative offset received, for late FINs
	reset bool
}

// Stats are a tunnel's counters (for stats.json).
type Stats struct {
	PeerUp          bool    `json:"peer_up"`
	PeerInstance    uint32  `json:"peer_instance"`
	RateBPS         int64   `json:"rate_bps"`
	SRTTms          float64 `json:"srtt_ms"`
	MinRTTms        float64 `json:"min_rtt_ms"`
	StreamsOpened   int64   `json:"streams_opened"`
	StreamsAccepted int64   `json:"streams_accepted"`
	StreamsActive   int     `json:"streams_active"`
	FramesSent      int64   `json:"frames_sent"`
	FramesReceived  int64   `json:"frames_received"`
	FramesBad       int64   `json:"frames_bad"`
	DataSent        int64   `json:"data_bytes_sent"`
	DataRetransmit  int64   `json:"data_bytes_retransmitted"`
	DataCopies      int64   `json:"data_bytes_copies"` // extra copies of retransmissions
	DataSpare       int64   `json:"data_bytes_spare"`  // copies sent when the link would have idled
	DataReceived    int64   `json:"data_bytes_received"`
	DataDuplicate   int64   `json:"data_bytes_duplicate"`
	StatusSent      int64   `json:"status_sent"`
	RTOMarks        int64   `json:"rto_marks"`
	RateDecreases   int64   `json:"rate_decreases"`
	ResetsSent      int64   `json:"resets_sent"`
	// Stalls: the link fell silent (an outage); data stopped and probes
	// went out until the peer was heard again.
	Stalled      bool    `json:"stalled"`
	Stalls       int64   `json:"stalls"`
	StallSeconds float64 `json:"stall_seconds"` // total time stalled
	LastStallS   float64 `json:"last_stall_s"`  // from the last frame heard to the first after the stall
	LastDetectS  float64 `json:"last_detect_s"` // from the last frame heard to the stall's detection
	ProbesSent   int64   `json:"probes_sent"`
	PeerTimeoutS float64 `json:"peer_timeout_s"` // give-up time (0: never)
	FrameBytes   int     `json:"frame_bytes"`    // largest data frame
}

// Tunnel is one pepd's end of the rate-based WAN leg.
type Tunnel struct {
	cfg   Config
	link  Link
	inst  uint32
	epoch time.Time

	mu       sync.Mutex
	sendCond *sync.Cond
	closed   bool
	peer     struct {
		up     bool
		inst   uint32
		addr   HWAddr
		heard  time.Time
		lastTS int64 // the peer's last HELLO timestamp and when it came
		tsAt   time.Time
	}
	peerUp    chan struct{} // closed when a peer is first known (or after loss, re-made)
	streams   map[key]*Stream
	order     []*Stream // round-robin order of streams with something to send
	rr        int
	closedSet map[key]closedEntry
	nextID    uint32
	ctrl      [][]byte // encoded control frames waiting for the pacer
	lastHello time.Time

	pace pacer
	// Round trip and rate control.
	srtt, rttvar, minRTT time.Duration
	minRTTAt             time.Time
	ctl                  rateCtl
	cap                  int64 // probing ceiling (0: none)

	// The link's liveness, from what the peer sends. quiet is when this
	// side first sent data that the peer answers since it was last
	// heard; heardData says the last frame heard carried data (a flow
	// towards this side that stops is a stall too).
	stall struct {
		on        bool
		at        time.Time // when detected
		quiet     time.Time
		heardData bool
		lastProbe time.Time
		// ended is when the last stall ended: retransmission timeouts
		// count from then, not from the frames' sends before the outage,
		// which the probe's answer resolves exactly.
		ended time.Time
	}

	st   Stats
	wg   sync.WaitGroup
	stop chan struct{}
}

// New starts a tunnel on link. Close stops it.
func New(link Link, cfg Config) *Tunnel {
	if cfg.RTT <= 0 {
		cfg.RTT = time.Second
	}
	if cfg.Window <= 0 {
		bdp := int(float64(cfg.RateBPS) / 8 * cfg.RTT.Seconds())
		cfg.Window = max(8*bdp, 1<<20)
	}
	if cfg.PeerTimeout == 0 {
		cfg.PeerTimeout = defaultPeerTimeout
	}
	if cfg.FrameBytes <= 0 || cfg.FrameBytes > link.MTU() {
		cfg.FrameBytes = FrameForBER(cfg.BER, link.MTU(), link.Overhead())
	}
	cfg.FrameBytes = max(cfg.FrameBytes, minFrame)
	if cfg.Log == nil {
		cfg.Log = log.New(log.Writer(), "wanrate: ", log.LstdFlags)
	}
	var b [4]byte
	rand.Read(b[:])
	t := &Tunnel{cfg: cfg, link: link, inst: binary.BigEndian.Uint32(b[:]) | 1, epoch: time.Now(),
		streams: map[key]*Stream{}, closedSet: map[key]closedEntry{}, peerUp: make(chan struct{}),
		stop: make(chan struct{})}
	t.sendCond = sync.NewCond(&t.mu)
	rate := cfg.RateBPS
	if rate <= 0 {
		rate = 1_000_000
		t.ctl.startup = true
	} else {
		t.cap = rate
	}
	t.pace = newPacer(rate, link.MTU()+link.Overhead(), time.Now())
	t.srtt, t.rttvar = cfg.RTT, cfg.RTT/2
	t.st.RateBPS = rate
	t.wg.Add(3)
	go t.sendLoop()
	go t.recvLoop()
	go t.tickLoop()
	t.mu.Lock()
	t.queueHelloLocked(time.Now(), 0)
	t.mu.Unlock()
	return t
}

func (t *Tunnel) now() int64 { return int64(time.Since(t.epoch)) }

// Close resets every stream, stops the tunnel and closes the link.
func (t *Tunnel) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	for _, s := range t.streams {
		s.resetLocked("shutdown", true)
	}
	t.mu.Unlock()
	// Give the resets a moment to leave (they are paced like everything).
	for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		t.mu.Lock()
		n := len(t.ctrl)
		t.mu.Unlock()
		if n == 0 {
			break
		}
	}
	t.mu.Lock()
	t.closed = true
	close(t.stop)
	t.sendCond.Broadcast()
	t.mu.Unlock()
	err := t.link.Close()
	t.wg.Wait()
	return err
}

// Snapshot returns the tunnel's counters.
func (t *Tunnel) Snapshot() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.st
	s.PeerUp, s.PeerInstance = t.peer.up, t.peer.inst
	s.RateBPS = int64(t.pace.rate)
	s.SRTTms = float64(t.srtt) / 1e6
	s.MinRTTms = float64(t.minRTT) / 1e6
	s.StreamsActive = len(t.streams)
	s.Stalled = t.stall.on
	s.FrameBytes = t.cfg.FrameBytes
	if t.cfg.PeerTimeout > 0 {
		s.PeerTimeoutS = t.cfg.PeerTimeout.Seconds()
	}
	return s
}

// WaitPeer waits up to d for a peer and reports whether one is up.
func (t *Tunnel) WaitPeer(d time.Duration) bool {
	t.mu.Lock()
	up, ch := t.peer.up, t.peerUp
	t.mu.Unlock()
	if up || d <= 0 {
		return up
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ch:
		return true
	case <-tm.C:
		return false
	case <-t.stop:
		return false
	}
}

// ErrNoPeer is returned by Open when no peer pepd answers.
var ErrNoPeer = errors.New("no peer pepd on the WAN link")

// Open starts a stream to the peer for a connection from src to dst. Data
// may flow at once; the peer resets the stream if it cannot reach dst.
func (t *Tunnel) Open(src, dst netip.AddrPort) (*Stream, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || !t.peer.up {
		return nil, ErrNoPeer
	}
	t.nextID++
	s := t.newStreamLocked(key{true, t.nextID}, src, dst)
	s.opening = true
	s.queueOpenLocked(time.Now())
	t.st.StreamsOpened++
	return s, nil
}

func (t *Tunnel) newStreamLocked(k key, src, dst netip.AddrPort) *Stream {
	s := &Stream{t: t, k: k, Src: src, Dst: dst, done: make(chan struct{}), created: time.Now()}
	s.cond = sync.NewCond(&t.mu)
	s.snd.limit = uint64(t.cfg.Window) // until the peer says otherwise
	s.rcv.ooo = map[uint64][]byte{}
	s.lastProgress = time.Now()
	t.streams[k] = s
	t.order = append(t.order, s)
	return s
}

func (t *Tunnel) removeLocked(s *Stream, reset bool) {
	if _, ok := t.streams[s.k]; !ok {
		return
	}
	delete(t.streams, s.k)
	for i, o := range t.order {
		if o == s {
			t.order = append(t.order[:i], t.order[i+1:]...)
			break
		}
	}
	t.closedSet[s.k] = closedEntry{at: time.Now(), ack: s.rcv.nxt, reset: reset}
	s.finishLocked()
}

// queueLocked encodes a control frame for the sender.
func (t *Tunnel) queueLocked(f *Frame) {
	f.Instance = t.inst
	b, err := Append(nil, f)
	if err != nil {
		t.cfg.Log.Printf("encode frame type %d: %v", f.Type, err)
		return
	}
	t.ctrl = append(t.ctrl, b)
	t.sendCond.Signal()
}

func (t *Tunnel) queueHelloLocked(now time.Time, flags uint8) {
	f := &Frame{Type: THello, Flags: flags, RateBPS: uint64(t.pace.rate), TSVal: t.now(), PeerInstance: t.peer.inst}
	if t.peer.lastTS != 0 {
		f.TSEcr, f.EcrDelay = t.peer.lastTS, int64(now.Sub(t.peer.tsAt))
	}
	t.lastHello = now
	t.queueLocked(f)
}

// sendLoop transmits control frames first, then retransmissions and new
// data of the streams in turn, each when the pacer allows.
func (t *Tunnel) sendLoop() {
	defer t.wg.Done()
	buf := make([]byte, 0, t.link.MTU())
	maxBits := float64(t.link.MTU()+t.link.Overhead()) * 8
	for {
		t.mu.Lock()
		idle := false
		for !t.closed && len(t.ctrl) == 0 && !t.dataPendingLocked() {
			t.sendCond.Wait()
			idle = true
		}
		if idle {
			t.pace.resume(time.Now())
		}
		if t.closed {
			t.mu.Unlock()
			return
		}
		now := time.Now()
		// Control frames (status, HELLO, open, reset) never wait for the
		// pacer: they are few and small, and a status held back behind
		// data would read as queueing delay at the peer, whose rate would
		// then drop, and so on. They are charged, so data makes room.
		if w := t.pace.wait(maxBits, now); w > 0 && len(t.ctrl) == 0 {
			t.ctl.limited = true
			t.mu.Unlock()
			time.Sleep(w)
			continue
		}
		var frame []byte
		var copied bool
		isCtrl := len(t.ctrl) > 0
		if isCtrl {
			frame = t.ctrl[0]
			t.ctrl = t.ctrl[1:]
		} else if frame, copied = t.nextDataLocked(buf[:0], now); frame != nil && t.stall.quiet.IsZero() {
			t.stall.quiet = now
		}
		to := Broadcast
		if t.peer.up {
			to = t.peer.addr
		}
		if frame == nil {
			t.mu.Unlock()
			continue
		}
		bits := float64(len(frame)+t.link.Overhead()) * 8
		t.pace.consume(bits)
		if !isCtrl && !copied {
			// Only what the statuses resolve once each (a first
			// transmission, or a repair of a frame found lost): copies
			// are never counted as delivered, so counting them as sent
			// made the idle-time copies look like a link delivering
			// less than it was given.
			t.ctl.sent += bits
		}
		t.st.FramesSent++
		t.mu.Unlock()
		if err := t.link.Send(frame, to); err != nil {
			t.mu.Lock()
			closed := t.closed
			t.mu.Unlock()
			if closed {
				return
			}
			t.cfg.Log.Printf("send: %v", err)
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func (t *Tunnel) dataPendingLocked() bool {
	if !t.peer.up || t.stall.on {
		return false
	}
	for _, s := range t.order {
		if s.sendableLocked() {
			return true
		}
	}
	if !t.spareOKLocked() {
		return false
	}
	now := time.Now()
	for _, s := range t.order {
		if s.spareSegLocked(now, t.srtt, false) != nil {
			return true
		}
	}
	return false
}

// spareOKLocked says whether spare copies may go out: not while a queue
// stands on the path (self-tuning saw one), where the link is busy with
// frames already sent and a copy only deepens the queue.
func (t *Tunnel) spareOKLocked() bool {
	return !t.ctl.queued && !t.ctl.draining
}

// nextDataLocked encodes the next data frame, round robin over streams;
// copied says it is an extra copy (of a repair, or a spare one).
func (t *Tunnel) nextDataLocked(buf []byte, now time.Time) (frame []byte, copied bool) {
	n := len(t.order)
	for i := range 2 * n {
		s := t.order[(t.rr+i)%n]
		var sg *seg
		var dup, spare bool
		if i < n {
			sg, dup = s.nextSegLocked()
		} else if !t.spareOKLocked() {
			break
		} else if sg = s.spareSegLocked(now, t.srtt, true); sg != nil {
			dup, spare = true, true
		}
		if sg != nil {
			t.rr = (t.rr + i + 1) % n
			switch {
			case spare:
				t.st.DataSpare += int64(len(sg.data))
			case dup:
				t.st.DataCopies += int64(len(sg.data))
			case sg.sends > 0:
				t.st.DataRetransmit += int64(len(sg.data))
			default:
				t.st.DataSent += int64(len(sg.data))
			}
			// sent is the latest transmission, copies included: the
			// frame is lost only when that one is (loss detection takes
			// the time of what arrived from the receiver's echo, never
			// from a resent frame's own record).
			if !dup {
				sg.sends++
				sg.spare = false
				s.snd.pruneRecent(now, t.srtt)
				s.snd.recent = append(s.snd.recent, sg)
			}
			sg.sent = now
			sg.lost = false
			f := Frame{Type: TData, Instance: t.inst, Stream: s.k.id, Offset: sg.off, Payload: sg.data, TSVal: t.now()}
			if s.k.mine {
				f.Flags |= FlagInit
			}
			if sg.fin {
				f.Flags |= FlagFin
			}
			b, err := Append(buf, &f)
			if err != nil {
				t.cfg.Log.Printf("encode data: %v", err)
				return nil, false
			}
			return b, dup
		}
	}
	return nil, false
}

func (t *Tunnel) recvLoop() {
	defer t.wg.Done()
	buf := make([]byte, t.link.MTU()+64)
	var f Frame
	for {
		n, from, err := t.link.Recv(buf)
		if err != nil {
			select {
			case <-t.stop:
				return
			default:
			}
			t.cfg.Log.Printf("receive: %v", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if err := Decode(buf[:n], &f); err != nil {
			t.mu.Lock()
			t.st.FramesBad++
			t.mu.Unlock()
			continue
		}
		t.mu.Lock()
		t.st.FramesReceived++
		t.handleLocked(&f, from, time.Now())
		t.mu.Unlock()
	}
}

func (t *Tunnel) handleLocked(f *Frame, from HWAddr, now time.Time) {
	if t.closed || f.Instance == t.inst {
		return // our own frame looped back, or shutting down
	}
	if f.Type == THello {
		t.helloLocked(f, from, now)
		return
	}
	if !t.peer.up || f.Instance != t.peer.inst {
		return // a peer we have not met (its HELLO will come) or a stale one
	}
	t.heardLocked(now, f.Type == TData)
	k := key{mine: f.Flags&FlagInit == 0, id: f.Stream}
	s := t.streams[k]
	switch f.Type {
	case TOpen:
		if s != nil {
			if s.established {
				t.queueLocked(&Frame{Type: TOpenAck, Stream: k.id})
			}
			return
		}
		if _, old := t.closedSet[k]; old || k.mine {
			return
		}
		s = t.newStreamLocked(k, f.Src, f.Dst)
		t.st.StreamsAccepted++
		if t.cfg.Accept != nil {
			go t.cfg.Accept(s)
		} else {
			s.resetLocked("no_acceptor", true)
		}
	case TOpenAck:
		if s != nil {
			s.opening = false
		}
	case TData:
		if s == nil {
			t.strayDataLocked(k, f)
			return
		}
		s.onDataLocked(f, now)
	case TStatus:
		if s != nil {
			s.onStatusLocked(f, now)
		}
	case TReset:
		t.queueLocked(&Frame{Type: TResetAck, Stream: k.id, Flags: initFlag(k)})
		if s != nil {
			s.resetLocked("reset_by_peer", false)
		}
	case TResetAck:
		if s != nil && s.resetting {
			s.resetting = false
			t.removeLocked(s, true)
		}
	}
}

func initFlag(k key) uint8 {
	if k.mine {
		return FlagInit
	}
	return 0
}

// strayDataLocked answers data of a stream this pepd no longer (or never)
// had: a finished stream's late FIN gets its final status, a reset or
// unknown one a reset. Data of a stream the peer opened whose OPEN has
// not arrived yet is dropped: the peer repeats the OPEN and the data.
func (t *Tunnel) strayDataLocked(k key, f *Frame) {
	c, ok := t.closedSet[k]
	switch {
	case ok && !c.reset:
		t.queueLocked(&Frame{Type: TStatus, Stream: k.id, Flags: initFlag(k), Ack: c.ack, Limit: c.ack})
	case ok || k.mine:
		t.queueLocked(&Frame{Type: TReset, Stream: k.id, Flags: initFlag(k)})
	}
}

func (t *Tunnel) helloLocked(f *Frame, from HWAddr, now time.Time) {
	if t.peer.up && t.peer.inst != f.Instance {
		// The peer restarted: its streams are gone, so are ours.
		t.cfg.Log.Printf("peer restarted (instance %08x -> %08x): resetting %d streams", t.peer.inst, f.Instance, len(t.streams))
		t.peerLostLocked("peer_restarted")
	}
	if !t.peer.up {
		t.peer.up, t.peer.inst, t.peer.addr = true, f.Instance, from
		close(t.peerUp)
		t.cfg.Log.Printf("peer %08x at %x: rate-based WAN leg up (its rate hint %d bit/s)", f.Instance, from[:], f.RateBPS)
	}
	t.heardLocked(now, false)
	t.peer.lastTS, t.peer.tsAt = f.TSVal, now
	if f.TSEcr != 0 {
		t.rttSampleLocked(time.Duration(t.now()-f.TSEcr-f.EcrDelay), now)
	}
	if f.Flags&FlagReply == 0 {
		t.queueHelloLocked(now, FlagReply)
	}
	if f.Flags&(FlagProbe|FlagReply) == FlagProbe {
		// A probe after a stall: the prober learns from these statuses
		// exactly which of its frames the outage took (all it sent
		// before the probe and not listed), not one timeout later.
		for _, s := range t.streams {
			if !s.reset {
				s.sendStatusLocked(now, FlagProbe, f.TSVal)
			}
		}
	}
}

// LinkBack is when the link last came back from a stall (zero: never):
// the first frame heard from the peer after it, at which the outage's
// losses are being resent.
func (t *Tunnel) LinkBack() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stall.ended
}

// heardLocked notes a frame from the peer: the link works, and a stall,
// if any, is over at once. Repair and pacing restart with this frame; a
// probe asks the peer for every stream's status, whose answer marks what
// the outage took for retransmission.
func (t *Tunnel) heardLocked(now time.Time, data bool) {
	last := t.peer.heard
	t.peer.heard = now
	t.stall.quiet, t.stall.heardData = time.Time{}, data
	if !t.stall.on {
		return
	}
	t.stall.on, t.stall.ended = false, now
	gap := now.Sub(last)
	t.st.StallSeconds += now.Sub(t.stall.at).Seconds()
	t.st.LastStallS = gap.Seconds()
	t.cfg.Log.Printf("WAN link back after %.1f s of silence: resuming at %d bit/s", gap.Seconds(), int64(t.pace.rate))
	// Self-tuning's interval began before the silence: its rates average
	// seconds in which nothing was sent or delivered, and the first round
	// trip after it decided on them (scenarios/outage.yaml: "the link
	// passed 1.15 Mbit/s of 1.58 sent" at link-back, pacing 2.18 -> 0.75
	// Mbit/s on a 3 Mbit/s link for the next 40 s). Judge the link afresh.
	c := &t.ctl
	c.start, c.minSample, c.limited, c.resolved, c.sent = now, 0, false, 0, 0
	c.queued, c.prevGot, c.prevSent, c.passed = false, 0, 0, c.passed[:0]
	for _, s := range t.streams {
		s.lastProgress = now
	}
	t.queueHelloLocked(now, FlagProbe)
	t.sendCond.Signal()
}

// stallCheckLocked detects a silent link: data sent and no answer for an
// RTO, or no HELLO for an RTO past the HELLO period. Then no data leaves
// (it would be lost, and resent, for as long as the outage lasts); probes
// do. A flow towards this side that stopped for an RTO draws probes too,
// without holding anything back (it may just have ended): the receiving
// side's probes then reach the sender half a round trip after the link
// returns.
func (t *Tunnel) stallCheckLocked(now time.Time, rto time.Duration) {
	if !t.peer.up {
		return
	}
	silent := now.Sub(t.peer.heard)
	hold := (!t.stall.quiet.IsZero() && now.Sub(t.stall.quiet) > rto) || silent > helloEvery+rto
	if hold && !t.stall.on {
		t.stall.on, t.stall.at = true, now
		t.st.Stalls++
		t.st.LastDetectS = silent.Seconds()
		t.cfg.Log.Printf("WAN link silent for %.2f s: holding data, probing every %v", silent.Seconds(), probeEvery)
	}
	if (hold || t.stall.heardData && silent > rto) && now.Sub(t.stall.lastProbe) >= probeEvery {
		t.stall.lastProbe = now
		t.st.ProbesSent++
		t.queueHelloLocked(now, FlagProbe)
		// With each probe, the state of the streams that were receiving
		// when the link fell silent: the first of these to cross after
		// the link returns tells the sender what the outage took, half
		// a round trip before the answer to its own probe would.
		for _, s := range t.streams {
			if r := &s.rcv; !s.reset && !r.tsAt.IsZero() && now.Sub(r.tsAt) < silent+helloEvery+rto {
				s.sendStatusLocked(now, FlagProbe, 0)
			}
		}
	}
}

func (t *Tunnel) peerLostLocked(reason string) {
	for _, s := range t.streams {
		s.resetLocked(reason, false)
	}
	t.peer.up = false
	t.peer.lastTS = 0
	t.peerUp = make(chan struct{})
	if t.stall.on {
		t.stall.on = false
		t.st.StallSeconds += time.Since(t.stall.at).Seconds()
	}
	t.stall.quiet, t.stall.heardData = time.Time{}, false
}

// tickLoop runs the timers: retransmission timeouts, status and window
// updates, repeated OPENs and resets, HELLOs, peer liveness.
func (t *Tunnel) tickLoop() {
	defer t.wg.Done()
	tk := time.NewTicker(tickEvery)
	defer tk.Stop()
	last := time.Now()
	for {
		select {
		case <-t.stop:
			return
		case <-tk.C:
		}
		now := time.Now()
		// A tick that comes late means this process did not run for a
		// while; the statuses that arrived meanwhile are still unread, so
		// timeouts wait one tick for the receive loop to catch up (a
		// 2-second stall at load 15 otherwise marked every frame in
		// flight lost and resent 11 MB of 100).
		late := now.Sub(last) > 4*tickEvery
		last = now
		t.mu.Lock()
		if now.Sub(t.lastHello) >= helloEvery {
			t.queueHelloLocked(now, 0)
		}
		if t.peer.up && t.cfg.PeerTimeout > 0 && now.Sub(t.peer.heard) > t.cfg.PeerTimeout {
			t.cfg.Log.Printf("peer %08x silent for %v: resetting %d streams, new connections use TCP", t.peer.inst, t.cfg.PeerTimeout, len(t.streams))
			t.peerLostLocked("peer_lost")
		}
		rto := t.rtoLocked()
		if late {
			rto = time.Hour
		} else {
			t.stallCheckLocked(now, rto)
		}
		for _, s := range append([]*Stream(nil), t.order...) {
			s.tickLocked(now, rto)
		}
		for k, c := range t.closedSet {
			if now.Sub(c.at) > closedLinger {
				delete(t.closedSet, k)
			}
		}
		t.rateControlLocked(now)
		if t.dataPendingLocked() {
			t.sendCond.Signal()
		}
		t.mu.Unlock()
	}
}

// minFrame is the smallest data frame FrameForBER picks or Config takes.
const minFrame = 256

// FrameForBER is the data frame size (at most mtu, tunnel header included)
// that carries the most payload per second of link at bit-error rate ber,
// where each frame also costs overhead bytes on the wire and is lost when
// any of its bits is hit: payload/wire x (1-ber)^bits. With no errors that
// is the MTU; at 1e-5 and a 1,500-byte MTU about 780 bytes (3 % more
// payload than full frames).
func FrameForBER(ber float64, mtu, overhead int) int {
	if ber <= 0 || ber >= 1 || mtu <= minFrame {
		return mtu
	}
	best, bestL := 0.0, mtu
	for l := mtu; l >= minFrame; l-- {
		wire := float64(l + overhead)
		v := float64(l-DataOverhead) / wire * math.Exp(8*wire*math.Log1p(-ber))
		if v > best {
			best, bestL = v, l
		}
	}
	return bestL
}

// floorLocked is the lowest pacing rate: a quarter of the hint (a path
// can lose that much of the rate it was configured for and still be
// followed), so a host too busy to send on time, whose delays look like
// queueing, cannot talk the rate down to nothing.
func (t *Tunnel) floorLocked() float64 {
	if t.cap > 0 {
		return max(minRate, float64(t.cap)/4)
	}
	return minRate
}

// rtoLocked is how long a frame may go unanswered before it is resent:
// the smoothed round trip plus its variation plus the status interval
// (the receiver batches its answers).
func (t *Tunnel) rtoLocked() time.Duration {
	return t.srtt + t.srtt/4 + 4*t.rttvar + 2*statusEvery + 2*tickEvery
}

func (t *Tunnel) rttSampleLocked(r time.Duration, now time.Time) {
	if r <= 0 || r > time.Minute {
		return
	}
	if t.minRTT == 0 || r < t.minRTT || now.Sub(t.minRTTAt) > 30*time.Second {
		t.minRTT, t.minRTTAt = r, now
	}
	if t.ctl.minSample == 0 || r < t.ctl.minSample {
		t.ctl.minSample = r
	}
	d := t.srtt - r
	if d < 0 {
		d = -d
	}
	t.rttvar = (3*t.rttvar + d) / 4
	t.srtt = (7*t.srtt + r) / 8
}

// inflightBitsLocked is what was sent and is not known delivered or lost
// (wire bits of data frames).
func (t *Tunnel) inflightBitsLocked() float64 {
	var b float64
	for _, s := range t.order {
		for _, g := range s.snd.segs[:s.snd.next] {
			if !g.sacked && !g.lost {
				b += float64(len(g.data)+DataOverhead+t.link.Overhead()) * 8
			}
		}
	}
	return b
}

// rateCtl is self-tuning's state (rateControlLocked), kept per round trip.
type rateCtl struct {
	start     time.Time
	minSample time.Duration
	limited   bool // the pacer, not data or windows, held the sender back
	queued    bool // the previous interval saw queueing delay
	startup   bool
	// resolved counts the wire bits of data frames whose fate became
	// known in the interval (delivered, or lost after crossing the
	// bottleneck): with a queue standing, the bottleneck's rate.
	resolved float64
	sent     float64 // wire bits of data frames sent in the interval
	// The previous interval's rates (bit/s), so a decision rests on
	// two round trips, not on one a busy host distorted.
	prevGot, prevSent float64
	// What the bottleneck passed in recent intervals with a queue
	// standing (the link busy all along): its rate, less any
	// interval in which this host read the statuses late.
	passed   []rateSample
	btl      float64   // the bottleneck's rate as last estimated (0: not yet)
	draining bool      // pacing below btl until the queue is gone
	drainBy  time.Time // when the queue should be gone
	hold     time.Time // no probing up before this (just drained)
}

type rateSample struct {
	at  time.Time
	bps float64
}

// rateControlLocked follows the path's rate (Adapt), once per round trip.
// Loss never lowers it (on this link loss is corruption). A queue does:
// when the smallest round trip of an interval stands clearly above the
// path's minimum in two intervals in a row, and the bottleneck passed
// clearly less than was sent meanwhile (a busy host that reads statuses
// late delays them, but does not make the link deliver less than it was
// given), the link is slower than the pacer. Intervals that sent under a
// quarter of the pacing rate (a login's few frames, a closed LAN window)
// say nothing of that: their delay is not a queue of ours. The rate the bottleneck
// passed (data frames resolved per second: delivered, or lost after
// crossing it) becomes the estimate; pacing runs a quarter below it
// until the queue is gone, then at it, and probes up by 5 % every three
// round trips after eight quiet ones, at most to the hint.
func (t *Tunnel) rateControlLocked(now time.Time) {
	if !t.cfg.Adapt {
		return
	}
	c := &t.ctl
	if c.start.IsZero() {
		c.start = now
		return
	}
	if now.Sub(c.start) < max(t.srtt, 50*time.Millisecond) || c.minSample == 0 {
		return
	}
	secs := now.Sub(c.start).Seconds()
	got, sent := c.resolved/secs, c.sent/secs
	r := t.pace.rate
	thresh := max(5*time.Millisecond, t.minRTT/10)
	queueing := c.minSample > t.minRTT+thresh
	got2, sent2 := (got+c.prevGot)/2, (sent+c.prevSent)/2
	if queueing {
		// Samples older than a few round trips describe another link.
		keep := c.passed[:0]
		for _, p := range c.passed {
			if now.Sub(p.at) < 6*max(t.srtt, 50*time.Millisecond) {
				keep = append(keep, p)
			}
		}
		c.passed = append(keep, rateSample{now, got})
		if len(c.passed) > 3 {
			c.passed = c.passed[1:]
		}
	}
	queue := c.minSample - t.minRTT
	switch {
	case queueing && (c.queued || queue > t.minRTT/2) && got2 < 0.95*sent2 && sent2 >= r/4:
		// The best of the recent samples: a host stall lowers one,
		// never raises it; below the pacing rate (the link is slower,
		// and a burst of statuses after a stall is no faster link). A
		// deep queue is acted on after one round trip: it doubles its
		// delay in the next when the link halved.
		c.btl = 0
		for _, p := range c.passed {
			c.btl = max(c.btl, p.bps)
		}
		c.btl = min(c.btl, r)
		old := r
		// The queue, from what is in flight now rather than from round
		// trips that left a queue ago: in flight beyond the bottleneck's
		// rate times the path's delay. Drained in about two round trips,
		// pacing at least a quarter and at most half below the bottleneck.
		qbits := max(0, t.inflightBitsLocked()-c.btl*t.minRTT.Seconds())
		r = max(c.btl*max(0.5, min(0.75, 1-qbits/c.btl/(2*t.minRTT.Seconds()))), t.floorLocked())
		t.cfg.Log.Printf("wan rate: queueing %v above the path's %v (%.0f kB queued), the link passed %.2f Mbit/s of %.2f sent: pacing %.2f -> %.2f Mbit/s until it drains",
			queue.Round(time.Millisecond), t.minRTT.Round(time.Millisecond), qbits/8e3, got2/1e6, sent2/1e6, old/1e6, r/1e6)
		c.draining, c.startup = true, false
		c.drainBy = now.Add(time.Duration(qbits/max(c.btl-r, 1)*float64(time.Second)) + 2*t.srtt)
		t.st.RateDecreases++
	case c.draining && queueing && now.After(c.drainBy) && got2 < 1.02*sent2:
		// The drain is over (the link passes no more than is sent) and
		// the delay stays: a longer path, whose delay becomes the minimum.
		t.cfg.Log.Printf("wan rate: the delay stayed %v above the path's %v: a longer path; pacing at %.2f Mbit/s",
			queue.Round(time.Millisecond), t.minRTT.Round(time.Millisecond), c.btl/1e6)
		t.minRTT, t.minRTTAt = c.minSample, now
		c.draining = false
		r = max(c.btl, t.floorLocked())
	case c.draining && (!queueing || t.inflightBitsLocked() <= c.btl*t.minRTT.Seconds()*1.1):
		// The queue is gone: cruise at the estimate a few round trips.
		c.draining = false
		r = max(c.btl, t.floorLocked())
		c.hold = now.Add(8 * max(t.srtt, 50*time.Millisecond))
	case !queueing && !c.draining && c.limited && now.After(c.hold) && (t.cap == 0 || r < float64(t.cap)):
		if c.startup {
			r *= 1.25
		} else {
			// One step, then a round trip and more to see it: a queue
			// shows a round trip after it formed, and steps taken
			// meanwhile would overshoot.
			r *= 1.05
			c.hold = now.Add(3 * max(t.srtt, 50*time.Millisecond))
		}
		if t.cap > 0 {
			r = min(r, float64(t.cap))
		}
	}
	t.pace.setRate(r)
	c.queued = queueing
	c.prevGot, c.prevSent = got, sent
	c.start, c.minSample, c.limited, c.resolved, c.sent = now, 0, false, 0, 0
}
