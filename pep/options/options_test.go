package options

import (
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in      string
		wantErr string
		check   func(Options) bool
	}{
		{in: "", check: func(o Options) bool { return o == Defaults() }},
		{in: "  cc=cubic   buffer_factor=2.5 ", check: func(o Options) bool { return o.CC == "cubic" && o.BufferFactor == 2.5 }},
		{in: "max_conns=20000 overflow=refuse", check: func(o Options) bool { return o.MaxConns == 20000 && o.Overflow == OverflowRefuse }},
		{in: "idle_timeout=90 half_close_timeout=1m30s", check: func(o Options) bool {
			return o.IdleTimeout == 90*time.Second && o.HalfCloseTimeout == 90*time.Second
		}},
		{in: "nodelay=0 quickack=on mss=1400", check: func(o Options) bool { return !o.NoDelay && o.QuickAck && o.MSS == 1400 }},
		{in: "port=6000 wan_buf=4000000", check: func(o Options) bool { return o.Port == 6000 && o.WanBuf == 4000000 }},
		{in: "workers=auto", check: func(o Options) bool { return o.Workers == 0 }},
		{in: "workers=3 max_conns=30000", check: func(o Options) bool { return o.Workers == 3 && o.MaxConns == 30000 }},
		{in: "workers=0", wantErr: "option workers: want auto or an integer in 1..64"},
		{in: "workers=65", wantErr: "option workers"},
		{in: "workers=many", wantErr: "option workers"},
		{in: "handshake=end-to-end", check: func(o Options) bool { return o.Handshake == HandshakeEndToEnd }},
		{in: "", check: func(o Options) bool { return o.Handshake == HandshakeLocal }},
		{in: "handshake=e2e", wantErr: "option handshake: want local or end-to-end"},
		{in: "handshake=end-to-end workers=2", wantErr: "needs workers=1"},
		{in: "handshake=end-to-end workers=auto", wantErr: "needs workers=1"},
		{in: "", check: func(o Options) bool { return o.Wan == WanTCP && o.WanAdapt }},
		{in: "wan=rate wan_adapt=0", check: func(o Options) bool { return o.Wan == WanRate && !o.WanAdapt }},
		{in: "wan=rate wan_rate=8000000 wan_adapt=1 wan_window=4000000", check: func(o Options) bool {
			return o.Wan == WanRate && o.WanRate == 8000000 && o.WanAdapt && o.WanWindow == 4000000
		}},
		{in: "wan=udp", wantErr: "option wan: want tcp or rate"},
		{in: "wan_rate=-1", wantErr: "option wan_rate"},
		{in: "wan=rate", check: func(o Options) bool { return o.WanGiveUp == 60*time.Second }},
		{in: "wan=rate wan_giveup=0", check: func(o Options) bool { return o.WanGiveUp == 0 }},
		{in: "wan=rate wan_giveup=5m", check: func(o Options) bool { return o.WanGiveUp == 5*time.Minute }},
		{in: "wan_giveup=soon", wantErr: "option wan_giveup"},
		{in: "wan=rate wan_frame=800", check: func(o Options) bool { return o.WanFrame == 800 }},
		{in: "wan_frame=100", wantErr: "option wan_frame"},
		{in: "wan=rate workers=2", wantErr: "wan=rate needs workers=1"},
		{in: "wan=rate handshake=end-to-end", wantErr: "wan=rate works with handshake=local only"},
		{in: "bogus=1", wantErr: `unknown option "bogus"`},
		{in: "cc", wantErr: "want key=value"},
		{in: "=x", wantErr: "want key=value"},
		{in: "cc=cubic cc=bbr", wantErr: "given twice"},
		{in: "overflow=drop", wantErr: "option overflow"},
		{in: "buffer_factor=0", wantErr: "option buffer_factor"},
		{in: "buffer_factor=NaN", wantErr: "option buffer_factor"},
		{in: "mss=20", wantErr: "option mss"},
		{in: "port=70000", wantErr: "option port"},
		{in: "connect_timeout=0", wantErr: "option connect_timeout"},
		{in: "idle_timeout=-1s", wantErr: "option idle_timeout"},
		{in: "cc=Cubic!", wantErr: "option cc"},
		{in: "stats_interval=10ms", wantErr: "option stats_interval"},
		{in: "buffer_packets=185 ack_reserve=0.88 wan_rto_max=1s trace_interval=100ms stall_timeout=750ms", check: func(o Options) bool {
			return o.BufferPackets == 185 && o.AckReserve == 0.88 && o.WanRTOMax == time.Second &&
				o.TraceInterval == 100*time.Millisecond && o.StallTimeout == 750*time.Millisecond
		}},
		{in: "outage_detect=1", check: func(o Options) bool { return o.OutageDetect && o.BufferPackets == 0 }},
		{in: "buffer_packets=185 ack_reserve=0.88 wan=rate", check: func(o Options) bool {
			return o.Wan == WanRate && o.BufferPackets == 185 && o.AckReserve == 0.88
		}},
		{in: "ack_reserve=0.5", wantErr: "option ack_reserve: needs buffer_packets"},
		{in: "buffer_packets=100 ack_reserve=1", wantErr: "option ack_reserve: want 0 (off) or a fraction"},
		{in: "buffer_packets=-3", wantErr: "option buffer_packets"},
		{in: "wan_rto_max=500ms", wantErr: "option wan_rto_max: want 0 or 1s..120s"},
		{in: "wan_rto_max=200", wantErr: "option wan_rto_max"},
		{in: "trace_interval=1ms", wantErr: "option trace_interval"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			o, err := Parse(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parse(%q) error = %v, want containing %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.in, err)
			}
			if !tt.check(o) {
				t.Fatalf("Parse(%q) = %+v", tt.in, o)
			}
		})
	}
}

// TestMapRoundTrip checks that the rendered configuration parses back to
// the same options, so recorded stats can be replayed as an option string.
func TestMapRoundTrip(t *testing.T) {
	o, err := Parse("cc=bbr lan_cc=cubic buffer_factor=3 idle_timeout=5s quickack=1 mss=1200 workers=auto")
	if err != nil {
		t.Fatal(err)
	}
	var parts []string
	for k, v := range o.Map() {
		if v == "" {
			continue
		}
		parts = append(parts, k+"="+v)
	}
	back, err := Parse(strings.Join(parts, " "))
	if err != nil {
		t.Fatal(err)
	}
	if back != o {
		t.Fatalf("round trip: %+v != %+v", back, o)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "cc=cubic buffer_factor=2 max_conns=20000 overflow=passthrough",
		"idle_timeout=1.5 mss=1400", "a=b=c", "port=1 port=2", "buffer_factor=1e308"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		o, err := Parse(s)
		if err != nil {
			if strings.ContainsRune(err.Error(), '\n') && !strings.ContainsRune(s, '\n') {
				t.Fatalf("multi-line error for %q: %v", s, err)
			}
			return
		}
		if o.Port < 1 || o.Port > 65534 || o.MaxConns < 1 || o.BufferFactor <= 0 || o.PipeBytes < 4096 ||
			o.ConnectTimeout <= 0 || o.IdleTimeout < 0 || (o.Overflow != OverflowPassthrough && o.Overflow != OverflowRefuse) {
			t.Fatalf("Parse(%q) accepted out-of-range options %+v", s, o)
		}
	})
}
