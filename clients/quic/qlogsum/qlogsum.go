// Package qlogsum reduces a quic-go qlog (JSON-SEQ: records separated by
// the ASCII record separator 0x1e) to the figures a transfer is judged by:
// handshake time, first and last stream byte, goodput, and a summary of
// the congestion window and RTT series.
package qlogsum

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
)

// MaxRecord bounds one record; quic-go's largest (a packet with many ACK
// ranges) are a few kB.
const MaxRecord = 1 << 20

// Summary of one connection's qlog, seen from its vantage point. Times are
// milliseconds since the trace's reference time (quic-go: when the
// connection was created), -1 where the event never occurred.
type Summary struct {
	Vantage   string  `json:"vantage"` // "client" or "server"
	Records   int     `json:"records"`
	Malformed int     `json:"malformed"` // records that were not a JSON event (a trace cut short)
	LastMS    float64 `json:"last_ms"`

	HandshakeMS float64 `json:"handshake_ms"` // quic:connection_state_updated handshake_complete

	// Payload on bidirectional client-initiated streams (ids 0, 4, 8 ...):
	// the file, and HTTP/3's request streams; HTTP/3 control and QPACK
	// streams are unidirectional and not counted.
	FirstByteMS       float64 `json:"first_byte_ms"` // first such STREAM frame received with data
	LastByteMS        float64 `json:"last_byte_ms"`  // last one
	StreamBytesRecv   int64   `json:"stream_bytes_received"`
	StreamBytesSent   int64   `json:"stream_bytes_sent"`
	GoodputBPS        float64 `json:"goodput_bps"`                  // received payload / last byte time
	GoodputAfterFirst float64 `json:"goodput_after_first_byte_bps"` // received payload / (last - first)

	PacketsSent     int `json:"packets_sent"`
	PacketsReceived int `json:"packets_received"`
	PacketsLost     int `json:"packets_lost"`

	// recovery:metrics_updated series: the congestion window is the
	// sender's, so it means something in the qlog of the end that sends.
	MetricsUpdates int     `json:"metrics_updates"`
	MaxCwnd        int64   `json:"max_cwnd_bytes"`
	LastCwnd       int64   `json:"last_cwnd_bytes"`
	MinRTTMS       float64 `json:"min_rtt_ms"`
	MeanRTTMS      float64 `json:"mean_rtt_ms"` // mean of latest_rtt samples
	MaxRTTMS       float64 `json:"max_rtt_ms"`
	RTTSamples     int     `json:"rtt_samples"`
	LastSRTTMS     float64 `json:"last_smoothed_rtt_ms"`
}

type record struct {
	Time  *float64        `json:"time"`
	Name  string          `json:"name"`
	Data  json.RawMessage `json:"data"`
	Trace *struct {
		VantagePoint struct {
			Type string `json:"type"`
		} `json:"vantage_point"`
	} `json:"trace"`
}

type packetData struct {
	Frames []struct {
		FrameType string `json:"frame_type"`
		StreamID  int64  `json:"stream_id"`
		Offset    int64  `json:"offset"`
		Length    int64  `json:"length"`
	} `json:"frames"`
}

type metricsData struct {
	MinRTT      *float64 `json:"min_rtt"`
	SmoothedRTT *float64 `json:"smoothed_rtt"`
	LatestRTT   *float64 `json:"latest_rtt"`
	Cwnd        *int64   `json:"congestion_window"`
}

type stateData struct {
	New string `json:"new"`
}

// Read summarises a qlog stream. Records that do not parse are counted,
// not fatal (the last one of a killed process is cut short); an error is
// returned only when the input cannot be read or holds no trace header.
func Read(r io.Reader) (Summary, error) {
	s := Summary{HandshakeMS: -1, FirstByteMS: -1, LastByteMS: -1, MinRTTMS: -1}
	recv := map[int64]int64{} // stream id -> highest end offset received
	sent := map[int64]int64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), MaxRecord)
	sc.Split(splitRS)
	header := false
	for sc.Scan() {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var rec record
		if err := json.Unmarshal(b, &rec); err != nil {
			s.Malformed++
			continue
		}
		s.Records++
		if rec.Trace != nil {
			header = true
			s.Vantage = rec.Trace.VantagePoint.Type
			continue
		}
		if rec.Time == nil || math.IsNaN(*rec.Time) || math.IsInf(*rec.Time, 0) {
			s.Malformed++
			continue
		}
		t := *rec.Time
		s.LastMS = math.Max(s.LastMS, t)
		switch rec.Name {
		case "transport:packet_sent", "transport:packet_received":
			var p packetData
			if json.Unmarshal(rec.Data, &p) != nil {
				s.Malformed++
				continue
			}
			received := rec.Name == "transport:packet_received"
			ends := sent
			if received {
				s.PacketsReceived++
				ends = recv
			} else {
				s.PacketsSent++
			}
			for _, f := range p.Frames {
				if f.FrameType != "stream" || f.StreamID < 0 || f.StreamID%4 != 0 || f.Length <= 0 || f.Offset < 0 {
					continue
				}
				end := f.Offset + f.Length
				if end < f.Offset { // overflow: not a real frame
					continue
				}
				ends[f.StreamID] = max(ends[f.StreamID], end)
				if received {
					if s.FirstByteMS < 0 || t < s.FirstByteMS {
						s.FirstByteMS = t
					}
					s.LastByteMS = math.Max(s.LastByteMS, t)
				}
			}
		case "recovery:packet_lost":
			s.PacketsLost++
		case "quic:connection_state_updated":
			var st stateData
			if json.Unmarshal(rec.Data, &st) == nil && st.New == "handshake_complete" && s.HandshakeMS < 0 {
				s.HandshakeMS = t
			}
		case "recovery:metrics_updated":
			var m metricsData
			if json.Unmarshal(rec.Data, &m) != nil {
				s.Malformed++
				continue
			}
			s.MetricsUpdates++
			if m.Cwnd != nil && *m.Cwnd >= 0 {
				s.MaxCwnd = max(s.MaxCwnd, *m.Cwnd)
				s.LastCwnd = *m.Cwnd
			}
			if ok(m.MinRTT) && (s.MinRTTMS < 0 || *m.MinRTT < s.MinRTTMS) {
				s.MinRTTMS = *m.MinRTT
			}
			if ok(m.LatestRTT) {
				s.RTTSamples++
				// A running mean cannot overflow where a sum of samples could.
				s.MeanRTTMS += (*m.LatestRTT - s.MeanRTTMS) / float64(s.RTTSamples)
				s.MaxRTTMS = math.Max(s.MaxRTTMS, *m.LatestRTT)
				if s.MinRTTMS < 0 || *m.LatestRTT < s.MinRTTMS {
					s.MinRTTMS = *m.LatestRTT
				}
			}
			if ok(m.SmoothedRTT) {
				s.LastSRTTMS = *m.SmoothedRTT
			}
		}
	}
	if err := sc.Err(); err != nil {
		return s, fmt.Errorf("qlog: %w", err)
	}
	if !header {
		return s, errors.New("qlog: no trace header")
	}
	s.StreamBytesRecv = total(recv)
	s.StreamBytesSent = total(sent)
	if s.LastByteMS > 0 {
		s.GoodputBPS = float64(s.StreamBytesRecv) * 8 / (s.LastByteMS / 1000)
	}
	if s.LastByteMS > s.FirstByteMS && s.FirstByteMS >= 0 {
		s.GoodputAfterFirst = float64(s.StreamBytesRecv) * 8 / ((s.LastByteMS - s.FirstByteMS) / 1000)
	}
	return s, nil
}

// ok is a usable RTT: present, finite, not negative.
func ok(v *float64) bool {
	return v != nil && !math.IsNaN(*v) && !math.IsInf(*v, 0) && *v >= 0
}

func total(ends map[int64]int64) int64 {
	var n int64
	for _, e := range ends {
		if n+e < n {
			return math.MaxInt64
		}
		n += e
	}
	return n
}

// splitRS splits JSON-SEQ (RFC 7464) input at record separators; text
// before the first separator is a record too (a lone JSON object parses).
func splitRS(data []byte, atEOF bool) (int, []byte, error) {
	start := 0
	for start < len(data) && data[start] == 0x1e {
		start++
	}
	if i := bytes.IndexByte(data[start:], 0x1e); i >= 0 {
		return start + i, data[start : start+i], nil
	}
	if atEOF {
		if start < len(data) {
			return len(data), data[start:], nil
		}
		return len(data), nil, nil
	}
	return start, nil, nil
}
