package server

import (
	"context"
	"net"
	"time"

	"satbed/pep/stats"
	"satbed/pep/tproxy"
	"satbed/pep/wanrate"
)

// The rate-based WAN leg (wan=rate): a connection whose SYN came from the
// LAN port crosses to the peer pepd in a wanrate stream instead of a TCP
// connection; the peer dials the server from the client's address. With
// no peer on the link, connections take the TCP WAN leg as before.

// peerGrace is how long after start a connection waits for the peer's
// first HELLO (the two pepds start independently, one round trip apart)
// before it falls back to TCP. Later, a missing peer costs nothing.
const peerGrace = 3 * time.Second

// rateStream is a connection carried by the tunnel.
type rateStream struct {
	st   *wanrate.Stream
	side *side
}

// startTunnel opens the WAN port link and the tunnel, if configured.
func (s *Server) startTunnel() error {
	if s.cfg.WanRate == nil {
		return nil
	}
	link, err := wanrate.OpenEther(s.cfg.WanIf)
	if err != nil {
		return err
	}
	cfg := *s.cfg.WanRate
	cfg.Accept = s.acceptStream
	cfg.Log = s.cfg.Log
	s.tunnel = wanrate.New(link, cfg)
	s.streams = make(map[uint64]*rateStream)
	return nil
}

// stopTunnel resets what the tunnel still carries and closes it.
func (s *Server) stopTunnel() {
	if s.tunnel != nil {
		s.tunnel.Close()
	}
}

// serveRate carries an accepted LAN connection through the tunnel. It
// returns false, having done nothing, when there is no peer: the caller
// then takes the TCP WAN leg.
func (s *Server) serveRate(c *net.TCPConn, sd *side, client, orig *net.TCPAddr, start time.Time, rec stats.Record) bool {
	if s.tunnel == nil || sd.name != "lan" {
		return false
	}
	if !s.tunnel.WaitPeer(time.Until(s.start.Add(peerGrace + 2*s.cfg.WanRate.RTT))) {
		return false
	}
	st, err := s.tunnel.Open(client.AddrPort(), orig.AddrPort())
	if err != nil {
		return false
	}
	rec.Upstream = "wanrate"
	s.split.Add(1)
	// The access node's buffer B and ACK reservation on the data this
	// pepd sends into the satellite link.
	stop := s.attachAccessRate(c, st)
	defer stop()
	s.relayStream(c, st, sd, start, rec)
	return true
}

// acceptStream serves a stream the peer opened: dial the server from the
// client's address on the LAN side, then relay.
func (s *Server) acceptStream(st *wanrate.Stream) {
	sd := s.sides[1] // the SYN came from the WAN side, as it would with TCP
	start := time.Now()
	s.accepted.Add(1)
	n := s.active.Add(1)
	defer s.active.Add(-1)
	for hw := s.highWater.Load(); n > hw && !s.highWater.CompareAndSwap(hw, n); hw = s.highWater.Load() {
	}
	client, server := net.TCPAddrFromAddrPort(st.Src), net.TCPAddrFromAddrPort(st.Dst)
	rec := stats.Record{Side: sd.name, Client: client.String(), Server: server.String(),
		Start: start.UTC().Format(time.RFC3339Nano), Upstream: "wanrate"}
	dctx, cancel := context.WithTimeout(s.abortCtx, s.cfg.Opts.ConnectTimeout)
	up, err := tproxy.Dial(dctx, client, server, sd.upstream)
	cancel()
	if err == nil {
		err = tproxy.ApplyPost(up, sd.upstream)
		if err != nil {
			up.SetLinger(0)
			up.Close()
		}
	}
	if err != nil {
		st.Refuse()
		s.failed.Add(1)
		rec.Result, rec.Error, rec.DurationS = "connect_failed", err.Error(), time.Since(start).Seconds()
		s.record(rec)
		return
	}
	s.split.Add(1)
	s.relayStream(up, st, sd, start, rec)
}

func (s *Server) relayStream(c *net.TCPConn, st *wanrate.Stream, sd *side, start time.Time, rec stats.Record) {
	s.mu.Lock()
	s.nextID++
	id := s.nextID
	s.streams[id] = &rateStream{st: st, side: sd}
	s.mu.Unlock()
	reason, l2w, w2l := st.Relay(c)
	s.mu.Lock()
	delete(s.streams, id)
	s.mu.Unlock()
	s.closedLanToWan.Add(l2w)
	s.closedWanToLan.Add(w2l)
	switch reason {
	case "reset_by_lan", "reset_by_peer":
		s.resets.Add(1)
	case "shutdown":
		s.shutAborts.Add(1)
	}
	rec.ID, rec.Result = id, reason
	rec.BytesLanToWan, rec.BytesWanToLan = l2w, w2l
	rec.DurationS = time.Since(start).Seconds()
	s.record(rec)
}

// rateBytes adds the live streams' byte counts (caller holds s.mu).
func (s *Server) rateBytesLocked() (l2w, w2l int64) {
	for _, r := range s.streams {
		a, b := r.st.Bytes()
		l2w += a
		w2l += b
	}
	return l2w, w2l
}

// rateStats is the tunnel's section of stats.json (nil without one).
func (s *Server) rateStats() *wanrate.Stats {
	if s.tunnel == nil {
		return nil
	}
	st := s.tunnel.Snapshot()
	return &st
}
