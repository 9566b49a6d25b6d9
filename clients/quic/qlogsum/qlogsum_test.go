package qlogsum

import (
	"math"
	"strings"
	"testing"
)

const rs = "\x1e"

func seq(records ...string) string {
	return rs + strings.Join(records, "\n"+rs) + "\n"
}

const header = `{"qlog_format":"JSON-SEQ","trace":{"vantage_point":{"type":"client"}}}`

func TestRead(t *testing.T) {
	tests := []struct {
		name  string
		input string
		check func(t *testing.T, s Summary)
		err   bool
	}{
		{"a download", seq(header,
			`{"time":1,"name":"transport:packet_sent","data":{"frames":[{"frame_type":"crypto","offset":0,"length":300}]}}`,
			`{"time":600.5,"name":"quic:connection_state_updated","data":{"new":"handshake_complete"}}`,
			`{"time":601,"name":"transport:packet_sent","data":{"frames":[{"frame_type":"stream","stream_id":0,"offset":0,"length":10,"fin":true}]}}`,
			`{"time":1200,"name":"transport:packet_received","data":{"frames":[{"frame_type":"stream","stream_id":0,"offset":0,"length":1000}]}}`,
			`{"time":1200,"name":"transport:packet_received","data":{"frames":[{"frame_type":"stream","stream_id":3,"offset":0,"length":50}]}}`,
			`{"time":1500,"name":"recovery:metrics_updated","data":{"min_rtt":600,"smoothed_rtt":610,"latest_rtt":620,"congestion_window":40960}}`,
			`{"time":1700,"name":"recovery:metrics_updated","data":{"latest_rtt":640,"congestion_window":81920}}`,
			`{"time":1800,"name":"recovery:metrics_updated","data":{"congestion_window":70000}}`,
			`{"time":1900,"name":"recovery:packet_lost","data":{}}`,
			`{"time":2200,"name":"transport:packet_received","data":{"frames":[{"frame_type":"stream","stream_id":0,"offset":500,"length":1500,"fin":true}]}}`,
		), func(t *testing.T, s Summary) {
			if s.Vantage != "client" || s.HandshakeMS != 600.5 || s.FirstByteMS != 1200 || s.LastByteMS != 2200 {
				t.Errorf("times %+v", s)
			}
			// Overlapping frames count once: stream 0 ends at 2000; stream 3 is unidirectional.
			if s.StreamBytesRecv != 2000 || s.StreamBytesSent != 10 {
				t.Errorf("bytes %+v", s)
			}
			if !near(s.GoodputBPS, 2000*8/2.2) || !near(s.GoodputAfterFirst, 2000*8/1.0) {
				t.Errorf("goodput %+v", s)
			}
			if s.MaxCwnd != 81920 || s.LastCwnd != 70000 || s.MinRTTMS != 600 || s.MeanRTTMS != 630 ||
				s.MaxRTTMS != 640 || s.RTTSamples != 2 || s.LastSRTTMS != 610 || s.MetricsUpdates != 3 {
				t.Errorf("metrics %+v", s)
			}
			if s.PacketsSent != 2 || s.PacketsReceived != 3 || s.PacketsLost != 1 || s.LastMS != 2200 {
				t.Errorf("packets %+v", s)
			}
		}, false},
		{"cut short", seq(header,
			`{"time":5,"name":"transport:packet_received","data":{"frames":[{"frame_type":"stream","stream_id":4,"offset":0,"length":7}]}}`,
			`{"time":6,"name":"transport:packet_rec`,
		), func(t *testing.T, s Summary) {
			if s.Malformed != 1 || s.StreamBytesRecv != 7 || s.HandshakeMS != -1 || s.MinRTTMS != -1 {
				t.Errorf("%+v", s)
			}
		}, false},
		{"nothing received", seq(header), func(t *testing.T, s Summary) {
			if s.FirstByteMS != -1 || s.GoodputBPS != 0 || s.GoodputAfterFirst != 0 {
				t.Errorf("%+v", s)
			}
		}, false},
		{"no header", seq(`{"time":1,"name":"x"}`), nil, true},
		{"not a qlog", "hello\n", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Read(strings.NewReader(tt.input))
			if (err != nil) != tt.err {
				t.Fatalf("error %v, want error %v", err, tt.err)
			}
			if tt.check != nil {
				tt.check(t, s)
			}
		})
	}
}

func FuzzRead(f *testing.F) {
	f.Add([]byte(seq(header,
		`{"time":2,"name":"transport:packet_received","data":{"frames":[{"frame_type":"stream","stream_id":0,"offset":0,"length":9}]}}`,
		`{"time":3,"name":"recovery:metrics_updated","data":{"latest_rtt":1.5,"congestion_window":12000}}`)))
	f.Add([]byte(seq(header, `{"time":1e308,"name":"transport:packet_received","data":{"frames":[{"frame_type":"stream","stream_id":0,"offset":9223372036854775800,"length":100}]}}`)))
	f.Add([]byte(rs + rs + "{}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Read(strings.NewReader(string(data)))
		if err != nil {
			return
		}
		if s.StreamBytesRecv < 0 || s.StreamBytesSent < 0 || s.MaxCwnd < 0 || s.LastCwnd > s.MaxCwnd {
			t.Fatalf("negative counts %+v", s)
		}
		if s.FirstByteMS >= 0 && s.LastByteMS < s.FirstByteMS {
			t.Fatalf("last byte before first %+v", s)
		}
		for _, v := range []float64{s.GoodputBPS, s.GoodputAfterFirst, s.MeanRTTMS, s.MinRTTMS, s.MaxRTTMS, s.LastMS} {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("non-finite figure %+v", s)
			}
		}
		if s.GoodputBPS < 0 || s.GoodputAfterFirst < 0 || s.RTTSamples > s.MetricsUpdates {
			t.Fatalf("%+v", s)
		}
		if s.RTTSamples > 0 && (s.MeanRTTMS < s.MinRTTMS*(1-1e-9) || s.MeanRTTMS > s.MaxRTTMS*(1+1e-9)) {
			t.Fatalf("mean RTT outside min..max %+v", s)
		}
	})
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b)) }
