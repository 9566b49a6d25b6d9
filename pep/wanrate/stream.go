package wanrate

import (
	"errors"
	"io"
	"math"
	"net"
	"net/netip"
	"sync"
	"time"
)

// seg is one data frame's worth of a stream, kept until the peer has it.
// Segments are cut once and never re-cut, so a retransmission carries the
// same offset and length and the receiver can key them by offset.
type seg struct {
	off    uint64
	data   []byte
	fin    bool
	sent   time.Time
	sends  int
	sacked bool
	lost   bool // waiting in the retransmission queue
	done   bool // acknowledged cumulatively and dropped
	copies int  // extra copies of this retransmission still to send
	spare  bool // an idle-time copy of the latest transmission went out
}

// maxCopies bounds the extra copies of a retransmission. A repair costs a
// round trip, a lost repair two more, and applications with their own
// window over TCP (SSH's channel window: scp, sftp, rsync; about 2 MB in
// OpenSSH) stall while data waits behind a hole at the receiving pepd. So
// the n-th retransmission of a frame goes out n times (up to
// 1+maxCopies): at 11 % frame loss that costs about 1.5 % of the link
// (p^2) and makes a third round trip of repair ten times rarer. Sending
// the first repair twice as well was measured: it costs p, 11 %, and scp
// lost more to that than it gained (5.36 against 5.88 Mbit/s).
const maxCopies = 2

// end is the offset after the segment; a FIN takes one offset of its own
// so that its acknowledgement is visible.
func (g *seg) end() uint64 {
	e := g.off + uint64(len(g.data))
	if g.fin {
		e++
	}
	return e
}

// Stream is one split connection's transit through the tunnel.
type Stream struct {
	t        *Tunnel
	k        key
	Src, Dst netip.AddrPort
	cond     *sync.Cond    // on t.mu: space to send, data to deliver, reset
	done     chan struct{} // closed when the stream ended (finished or reset)
	ended    bool
	created  time.Time

	opening     bool // OPEN not yet answered
	lastOpen    time.Time
	established bool // this side reached its end host (peer-opened streams)
	conn        *net.TCPConn
	reset       bool
	reason      string
	resetting   bool // RST sent, waiting for its acknowledgement
	rstSent     time.Time
	rstTries    int

	lastProgress   time.Time
	wasOutstanding bool

	// gate, when set, decides how much of the LAN socket lanToWan may
	// read (the access-node buffer's policy, package access).
	gate func(max int, closed <-chan struct{}) int

	snd sndState
	rcv struct {
		nxt      uint64            // next offset expected in order
		ooo      map[uint64][]byte // out of order, by offset
		have     ranges            // what ooo covers, for SACK blocks
		ready    [][]byte          // in order, not yet written to the LAN
		held     int               // bytes in ooo and ready
		consumed uint64            // written to the LAN: the window's base
		finOff   uint64
		finKnown bool
		finReady bool // the FIN is next in order
		done     bool // FIN delivered (CloseWrite done)
		dirty    bool // a status is owed
		urgent   bool // a new hole: say so at once
		lastSt   time.Time
		advLimit uint64
		lastTS   int64
		tsAt     time.Time
		bytes    int64 // written to the LAN
	}
}

// sndState is a stream's sending half.
type sndState struct {
	segs   []*seg // from the first unacknowledged, ascending offsets
	next   int    // index of the first never-sent segment
	lostQ  []*seg
	dupQ   []*seg // retransmissions with copies still to send
	recent []*seg // transmitted within about a round trip (spare copies)
	una    uint64 // everything below was delivered
	end    uint64 // offset after the last byte read from the LAN
	sacked int64  // bytes of segs the peer holds out of order (SACKed)
	limit  uint64 // the peer's window: no data at or beyond it
	fin    bool   // FIN segment created
	finAck bool
	rack   time.Time // latest send time of a frame known delivered (the statuses' TSEcr)
	heard  time.Time // the peer's last status
	probe  time.Time // last window probe
	bytes  int64     // read from the LAN
}

// Refuse tells the peer its end host could not be reached.
func (s *Stream) Refuse() {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	s.resetLocked("connect_failed", true)
}

func (s *Stream) sendableLocked() bool {
	if s.reset {
		return false
	}
	if len(s.snd.lostQ) > 0 || len(s.snd.dupQ) > 0 {
		return true
	}
	if s.snd.next < len(s.snd.segs) {
		g := s.snd.segs[s.snd.next]
		return g.fin || g.off+uint64(len(g.data)) <= s.snd.limit
	}
	return false
}

// nextSegLocked picks the stream's next frame: a retransmission, a copy of
// one (dup true), or new data inside the peer's window.
func (s *Stream) nextSegLocked() (g *seg, dup bool) {
	if s.reset {
		return nil, false
	}
	for len(s.snd.lostQ) > 0 {
		g := s.snd.lostQ[0]
		s.snd.lostQ = s.snd.lostQ[1:]
		if g.lost && !g.done && !g.sacked {
			if g.copies = min(g.sends-1, maxCopies); g.copies > 0 {
				s.snd.dupQ = append(s.snd.dupQ, g)
			}
			return g, false
		}
	}
	for len(s.snd.dupQ) > 0 {
		g := s.snd.dupQ[0]
		s.snd.dupQ = s.snd.dupQ[1:]
		if g.copies > 0 && !g.lost && !g.done && !g.sacked {
			if g.copies--; g.copies > 0 {
				s.snd.dupQ = append(s.snd.dupQ, g)
			}
			return g, true
		}
	}
	if s.snd.next < len(s.snd.segs) {
		g := s.snd.segs[s.snd.next]
		if g.fin || g.off+uint64(len(g.data)) <= s.snd.limit {
			s.snd.next++
			return g, false
		}
	}
	return nil, false
}

// spareSegLocked picks a frame still in flight for a spare copy, sent
// only when the link would otherwise idle (nothing new or lost to send:
// an application waiting on its own window, the end of a transfer, the
// small frames of the reverse direction): a repair first (its loss would
// hold everything behind it another round trip), else the newest frame
// (a lost tail is found only by a timeout). The copy costs no capacity
// that anything else could have used. take marks the frame copied.
func (s *Stream) spareSegLocked(now time.Time, inFlight time.Duration, take bool) *seg {
	sn := &s.snd
	if s.reset {
		return nil
	}
	sn.pruneRecent(now, inFlight)
	usable := func(g *seg) bool { return !g.spare && !g.sacked && !g.lost && !g.done }
	pick := func(g *seg) *seg {
		if take {
			g.spare = true
		}
		return g
	}
	for _, g := range sn.recent {
		if g.sends > 1 && usable(g) {
			return pick(g)
		}
	}
	for i := len(sn.recent) - 1; i >= 0; i-- {
		if g := sn.recent[i]; usable(g) {
			return pick(g)
		}
	}
	return nil
}

// pruneRecent forgets transmissions older than inFlight.
func (sn *sndState) pruneRecent(now time.Time, inFlight time.Duration) {
	k := 0
	for k < len(sn.recent) && (now.Sub(sn.recent[k].sent) > inFlight || sn.recent[k].done) {
		k++
	}
	sn.recent = sn.recent[k:]
}

func (s *Stream) queueOpenLocked(now time.Time) {
	s.lastOpen = now
	s.t.queueLocked(&Frame{Type: TOpen, Stream: s.k.id, Flags: FlagInit, Src: s.Src, Dst: s.Dst})
}

// resetLocked aborts the stream: the LAN connection gets a reset, and the
// peer an RST (repeated until acknowledged) when toPeer.
func (s *Stream) resetLocked(reason string, toPeer bool) {
	if s.reset {
		return
	}
	s.reset, s.reason = true, reason
	if s.conn != nil {
		s.conn.SetLinger(0)
		s.conn.Close()
	}
	s.snd.segs, s.snd.lostQ, s.snd.dupQ, s.snd.recent, s.rcv.ooo, s.rcv.ready = nil, nil, nil, nil, nil, nil
	s.snd.next, s.snd.sacked = 0, 0
	s.finishLocked()
	if toPeer && s.t.peer.up {
		s.resetting = true
		s.sendResetLocked(time.Now())
		return
	}
	s.t.removeLocked(s, true)
}

func (s *Stream) sendResetLocked(now time.Time) {
	s.rstSent = now
	s.rstTries++
	s.t.st.ResetsSent++
	s.t.queueLocked(&Frame{Type: TReset, Stream: s.k.id, Flags: initFlag(s.k)})
}

func (s *Stream) onDataLocked(f *Frame, now time.Time) {
	if s.reset {
		return
	}
	r := &s.rcv
	r.dirty = true
	r.lastTS, r.tsAt = f.TSVal, now
	off, p := f.Offset, f.Payload
	end := off + uint64(len(p))
	if f.Flags&FlagFin != 0 && !r.finKnown {
		r.finOff, r.finKnown = end, true
	}
	s.t.st.DataReceived += int64(len(p))
	switch {
	case len(p) == 0:
	case end <= r.nxt || r.have.contains(off, end):
		s.t.st.DataDuplicate += int64(len(p))
	case end > r.consumed+uint64(s.t.cfg.Window):
		// Beyond the window we offered: the sender broke the contract
		// or the window shrank with a restart; it will resend.
	case off > r.nxt:
		if len(r.have.r) == 0 || off > r.have.r[len(r.have.r)-1].End {
			r.urgent = true // a new hole opened: ask for it now
		}
		r.ooo[off] = append([]byte(nil), p...)
		r.have.add(off, end)
		r.held += len(p)
	default:
		if off < r.nxt {
			p = p[r.nxt-off:]
		}
		r.ready = append(r.ready, append([]byte(nil), p...))
		r.held += len(p)
		r.nxt = end
		for {
			q, ok := r.ooo[r.nxt]
			if !ok {
				break
			}
			delete(r.ooo, r.nxt)
			r.ready = append(r.ready, q)
			r.nxt += uint64(len(q))
		}
		r.have.trimBelow(r.nxt)
		s.lastProgress = now
		s.cond.Broadcast()
	}
	if r.finKnown && !r.finReady && r.nxt == r.finOff {
		r.finReady = true
		r.nxt++
		s.cond.Broadcast()
	}
	if r.urgent {
		s.sendStatusLocked(now, 0, 0)
	}
}

// sendStatusLocked queues the receiver's state. flags may add FlagProbe
// (the link was silent: see onStatusLocked); echo, when not 0, is the
// TSVal of the peer's probe this status answers.
func (s *Stream) sendStatusLocked(now time.Time, flags uint8, echo int64) {
	r := &s.rcv
	r.dirty, r.urgent, r.lastSt = false, false, now
	r.advLimit = r.consumed + uint64(s.t.cfg.Window)
	f := &Frame{Type: TStatus, Stream: s.k.id, Flags: initFlag(s.k) | flags, Ack: r.nxt, Limit: r.advLimit,
		SACK: r.have.blocks(MaxSACK)}
	switch {
	case echo != 0:
		f.TSEcr = echo
	case !r.tsAt.IsZero():
		f.TSEcr, f.EcrDelay = r.lastTS, int64(now.Sub(r.tsAt))
	}
	s.t.st.StatusSent++
	s.t.queueLocked(f)
}

func (s *Stream) onStatusLocked(f *Frame, now time.Time) {
	if s.reset {
		return
	}
	s.opening = false // the peer has the stream
	t := s.t
	if f.TSEcr != 0 {
		t.rttSampleLocked(time.Duration(t.now()-f.TSEcr-f.EcrDelay), now)
	}
	sn := &s.snd
	sn.heard = now
	if f.Limit > sn.limit {
		sn.limit = f.Limit
	}
	wire := func(g *seg) float64 { return float64(len(g.data)+DataOverhead+t.link.Overhead()) * 8 }
	// Cumulative acknowledgement.
	k := 0
	for k < len(sn.segs) && sn.segs[k].end() <= f.Ack {
		g := sn.segs[k]
		if !g.sacked && g.sends > 0 {
			t.ctl.resolved += wire(g)
		}
		if g.sacked {
			sn.sacked -= int64(len(g.data))
		}
		g.done = true
		if g.fin {
			sn.finAck = true
		}
		k++
	}
	if k > 0 {
		sn.segs = sn.segs[k:]
		sn.next = max(sn.next-k, 0)
		sn.una = f.Ack
		s.lastProgress = now
		s.cond.Broadcast()
	}
	// Selective acknowledgements: both lists ascend. A full list may
	// leave out ranges above its last block; a shorter one is all the
	// receiver holds.
	covered := uint64(math.MaxUint64)
	if n := len(f.SACK); n == MaxSACK {
		covered = f.SACK[n-1].End
	}
	b := 0
	for _, g := range sn.segs[:sn.next] {
		if g.off >= covered {
			break
		}
		for b < len(f.SACK) && f.SACK[b].End <= g.off {
			b++
		}
		if b < len(f.SACK) && f.SACK[b].Start <= g.off && g.end() <= f.SACK[b].End && !g.sacked {
			g.sacked, g.lost = true, false
			sn.sacked += int64(len(g.data))
			t.ctl.resolved += wire(g)
		}
	}
	// Loss: on this link frames arrive in the order they left, so a frame
	// sent before one that arrived, and itself missing from what the
	// receiver reported, is lost (RACK). The status echoes the send time
	// (TSVal) of the last frame that arrived, whichever transmission of
	// a resent frame it was, so a lost repair is found one round trip
	// after it left, not an RTO later. Never a reason to slow down.
	if f.TSEcr != 0 {
		at := time.Duration(f.TSEcr)
		if f.Flags&FlagProbe != 0 {
			// A status from a silent link (a probe's answer, or the
			// receiver's own report while probing): the peer had seen
			// nothing newer for EcrDelay when it wrote this, so what was
			// sent before TSEcr+EcrDelay is lost too: the tail of an
			// outage. A probe's answer holds nothing back (EcrDelay 0,
			// exact); a report trims a margin for queueing.
			at += time.Duration(f.EcrDelay) - min(time.Duration(f.EcrDelay)/2, 4*t.rttvar+statusEvery)
		}
		if at := t.epoch.Add(at); at.After(sn.rack) {
			sn.rack = at
		}
	}
	for _, g := range sn.segs[:sn.next] {
		if g.off >= covered {
			break
		}
		if !g.sacked && !g.lost && g.sent.Before(sn.rack) {
			g.lost = true
			sn.lostQ = append(sn.lostQ, g)
			t.ctl.resolved += wire(g)
		}
	}
	if sn.finAck {
		s.maybeDoneLocked()
	}
	if s.sendableLocked() {
		t.sendCond.Signal()
	}
}

// tickLocked runs the stream's timers.
func (s *Stream) tickLocked(now time.Time, rto time.Duration) {
	t := s.t
	if s.resetting {
		if now.Sub(s.rstSent) >= rto {
			if s.rstTries >= 8 {
				s.resetting = false
				t.removeLocked(s, true)
				return
			}
			s.sendResetLocked(now)
		}
		return
	}
	if s.reset {
		return
	}
	if s.opening && now.Sub(s.lastOpen) >= rto {
		s.queueOpenLocked(now)
	}
	sn := &s.snd
	stalled := t.stall.on
	// Timeout: a frame with no news after an RTO (a lost tail, or a
	// status that never came) is sent again. Not while the link is
	// stalled (the probes' answers say what to resend), and counted from
	// the stall's end for frames sent before it. Nor while statuses keep
	// coming: a frame they do not cover yet is still on its way (a
	// queue grew on a link that got slower; every one of those frames
	// resent doubles the queue), and one that is lost is found by the
	// statuses (RACK) as soon as a later frame arrives.
	statuses := now.Sub(sn.heard) < rto-t.srtt
	for _, g := range sn.segs[:sn.next] {
		if stalled || statuses {
			break
		}
		if !g.sacked && !g.lost && now.Sub(g.sent) >= rto && now.Sub(t.stall.ended) >= rto {
			g.lost = true
			sn.lostQ = append(sn.lostQ, g)
			t.st.RTOMarks++
		}
	}
	// Window probe: data waits behind a closed window and nothing is in
	// flight to draw a status that would open it.
	if sn.next < len(sn.segs) && sn.next == 0 && !sn.segs[0].fin &&
		sn.segs[0].off+uint64(len(sn.segs[0].data)) > sn.limit && now.Sub(sn.probe) >= rto {
		sn.probe = now
		t.queueLocked(&Frame{Type: TData, Stream: s.k.id, Flags: initFlag(s.k), Offset: sn.una, TSVal: t.now()})
	}
	r := &s.rcv
	// A window update once the LAN took a quarter window since the last
	// advertisement, so a sender blocked on the window resumes.
	if r.consumed+uint64(t.cfg.Window) >= r.advLimit+uint64(t.cfg.Window/4) {
		r.dirty = true
	}
	if r.dirty && now.Sub(r.lastSt) >= statusEvery {
		s.sendStatusLocked(now, 0, 0)
	}
	outstanding := len(sn.segs) > 0 || (r.finKnown && !r.finReady) || len(r.have.r) > 0
	if !s.wasOutstanding {
		// The stall clock starts when something becomes outstanding: an
		// FTP control connection idles for minutes, then sends a reply.
		s.lastProgress = now
	}
	s.wasOutstanding = outstanding
	if outstanding && !stalled && now.Sub(s.lastProgress) > max(stallLimit, 20*rto) {
		s.resetLocked("stalled", true)
	}
}

func (s *Stream) maybeDoneLocked() {
	if s.snd.finAck && s.rcv.done && !s.reset {
		if s.rcv.dirty {
			// The peer's FIN is acknowledged now, not after its timeout.
			s.sendStatusLocked(time.Now(), 0, 0)
		}
		s.t.removeLocked(s, false)
	}
}

// finishLocked wakes everyone waiting on the stream, once.
func (s *Stream) finishLocked() {
	if !s.ended {
		s.ended = true
		close(s.done)
	}
	s.cond.Broadcast()
}

// Relay moves bytes between conn (this pepd's LAN leg) and the stream
// until both directions have ended with a FIN or either side reset. It
// closes conn and returns why it ended and the bytes moved LAN->WAN and
// WAN->LAN.
func (s *Stream) Relay(conn *net.TCPConn) (reason string, lanToWan, wanToLan int64) {
	t := s.t
	t.mu.Lock()
	if s.reset {
		t.mu.Unlock()
		conn.SetLinger(0)
		conn.Close()
		return s.reason, 0, 0
	}
	s.conn = conn
	if !s.k.mine && !s.established {
		s.established = true
		t.queueLocked(&Frame{Type: TOpenAck, Stream: s.k.id})
	}
	t.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.lanToWan(conn)
	}()
	s.wanToLan(conn)
	wg.Wait()
	<-s.done
	conn.Close()
	t.mu.Lock()
	defer t.mu.Unlock()
	reason = s.reason
	if reason == "" {
		reason = "closed"
	}
	return reason, s.snd.bytes, s.rcv.bytes
}

// SetGate makes the LAN->WAN direction ask allow how many of max bytes
// it may read from the LAN socket (0 once closed is closed). Call before
// Relay.
func (s *Stream) SetGate(allow func(max int, closed <-chan struct{}) int) {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	s.gate = allow
}

// Progress returns the sending half's cumulative acknowledgement (bytes
// the peer has delivered) and what it holds: read from the LAN and not
// yet acknowledged, cumulatively or selectively (a SACKed frame is in the
// peer's hands, as a selective-repeat ARQ would clear it; counting it
// would stop the LAN leg for a round trip after every repaired loss).
func (s *Stream) Progress() (acked uint64, held int64) {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	return s.snd.una, int64(s.snd.end-s.snd.una) - s.snd.sacked
}

// Bytes returns the bytes moved so far LAN->WAN and WAN->LAN.
func (s *Stream) Bytes() (lanToWan, wanToLan int64) {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	return s.snd.bytes, s.rcv.bytes
}

// lanToWan reads the LAN leg into segments while the send buffer (one
// window) has room: a full buffer stops reading, so the LAN sender's TCP
// window closes instead of data piling up here.
func (s *Stream) lanToWan(conn *net.TCPConn) {
	t := s.t
	mss := t.cfg.FrameBytes - DataOverhead
	buf := make([]byte, 64<<10)
	for {
		t.mu.Lock()
		// Read when a useful amount fits, not a few bytes at a time.
		for !s.reset && t.cfg.Window-int(s.snd.end-s.snd.una) < min(t.cfg.Window/4, 16*mss) {
			s.cond.Wait()
		}
		if s.reset {
			t.mu.Unlock()
			return
		}
		room := min(len(buf), t.cfg.Window-int(s.snd.end-s.snd.una))
		gate := s.gate
		t.mu.Unlock()
		if gate != nil {
			if room = gate(room, s.done); room == 0 {
				return // the stream ended while the gate held the read
			}
		}
		n, err := conn.Read(buf[:room])
		t.mu.Lock()
		if s.reset {
			t.mu.Unlock()
			return
		}
		for p := buf[:n]; len(p) > 0; {
			c := min(len(p), mss)
			s.snd.segs = append(s.snd.segs, &seg{off: s.snd.end, data: append([]byte(nil), p[:c]...)})
			s.snd.end += uint64(c)
			s.snd.bytes += int64(c)
			p = p[c:]
		}
		switch {
		case err == nil:
		case errors.Is(err, io.EOF):
			s.snd.segs = append(s.snd.segs, &seg{off: s.snd.end, fin: true})
			s.snd.fin = true
			t.sendCond.Signal()
			t.mu.Unlock()
			return
		default:
			s.resetLocked("reset_by_lan", true)
			t.mu.Unlock()
			return
		}
		if n > 0 {
			t.sendCond.Signal()
		}
		t.mu.Unlock()
	}
}

// wanToLan writes what arrived in order to the LAN leg, then its FIN.
func (s *Stream) wanToLan(conn *net.TCPConn) {
	t := s.t
	t.mu.Lock()
	defer t.mu.Unlock()
	for {
		r := &s.rcv
		for !s.reset && len(r.ready) == 0 && !r.finReady {
			s.cond.Wait()
		}
		if s.reset {
			return
		}
		if len(r.ready) > 0 {
			bufs := net.Buffers(append([][]byte(nil), r.ready...))
			t.mu.Unlock()
			n, err := bufs.WriteTo(conn)
			t.mu.Lock()
			if s.reset {
				return
			}
			for left := n; left > 0; {
				c := int64(len(r.ready[0]))
				if c > left {
					r.ready[0] = r.ready[0][left:]
					c = left
				} else {
					r.ready = r.ready[1:]
				}
				left -= c
				r.held -= int(c)
				r.consumed += uint64(c)
				r.bytes += c
			}
			if err != nil {
				s.resetLocked("reset_by_lan", true)
				return
			}
			continue
		}
		// Only the FIN is left.
		t.mu.Unlock()
		err := conn.CloseWrite()
		t.mu.Lock()
		if s.reset {
			return
		}
		if err != nil {
			s.resetLocked("reset_by_lan", true)
			return
		}
		r.done = true
		r.dirty = true
		s.maybeDoneLocked()
		return
	}
}
