// Package options parses the PEP option string handed to pepd through
// SATBED_PEP_OPTS: space-separated key=value pairs such as
// "cc=cubic buffer_factor=2 max_conns=20000 overflow=passthrough".
package options

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Overflow policies for connections beyond MaxConns.
const (
	OverflowPassthrough = "passthrough"
	OverflowRefuse      = "refuse"
)

// Handshake modes: when the client's connection is completed.
const (
	// HandshakeLocal answers the client's SYN at once (the PEP's own
	// SYN-ACK), before the server has been reached.
	HandshakeLocal = "local"
	// HandshakeEndToEnd holds the client's SYN (NFQUEUE) until the
	// upstream connect succeeded: setup takes the end-to-end time and a
	// refused connection is refused end to end; data is still split.
	HandshakeEndToEnd = "end-to-end"
)

// Options is the complete pepd configuration that can be set from the
// option string. Zero values of the optional knobs mean "leave the kernel
// default alone".
type Options struct {
	Port             int           // TPROXY port for SYNs from the LAN port; Port+1 takes SYNs from the WAN port
	CC               string        // congestion control of WAN-facing sockets ("" = kernel default)
	LanCC            string        // congestion control of LAN-facing sockets ("" = kernel default)
	BufferFactor     float64       // WAN socket buffer = rate x RTT x factor
	WanBuf           int           // explicit WAN socket buffer in bytes, overrides the BDP rule
	LanBuf           int           // explicit LAN socket buffer in bytes (0 = autotuning)
	MaxConns         int           // split connections allowed at once
	Overflow         string        // passthrough or refuse
	NoDelay          bool          // TCP_NODELAY on both legs
	QuickAck         bool          // TCP_QUICKACK on both legs
	MSS              int           // TCP_MAXSEG on WAN-facing sockets (0 = kernel default)
	PipeBytes        int           // splice pipe size: the only data pepd itself holds per active direction
	ConnectTimeout   time.Duration // upstream connect bound; on expiry the client is reset
	IdleTimeout      time.Duration // reset a connection idle this long (0 = never)
	HalfCloseTimeout time.Duration // reset a half-closed connection idle this long (0 = never)
	KeepAlive        time.Duration // TCP keep-alive idle time on both legs (0 = off)
	DrainTimeout     time.Duration // how long SIGTERM waits for connections to finish
	StatsInterval    time.Duration // stats file refresh period
	ConnLog          bool          // write one JSON line per finished connection
	Workers          int           // processes sharing the listeners (SO_REUSEPORT); 0 = auto, as many as the open-file limit needs for MaxConns

	// The access-node buffer (package access, the ACK-reservation study): B packets per
	// connection for LAN->WAN data, ACK reservation above K·B, outage
	// detection on the WAN leg, and a cap on the WAN leg's RTO backoff.
	BufferPackets int           // B (0 = unbounded: the socket buffers as sized above)
	AckReserve    float64       // K in (0,1) (0 = off); needs BufferPackets
	OutageDetect  bool          // watch the WAN leg's ACK progress (on whenever BufferPackets > 0)
	StallTimeout  time.Duration // zero ACK progress this long = outage (0 = 2 x smoothed RTT, at least 200 ms)
	WanRTOMax     time.Duration // TCP_RTO_MAX_MS on WAN sockets (0 = kernel default, 120 s); Linux >= 6.15
	TraceInterval time.Duration // buffer occupancy trace (buffer.jsonl) period (0 = off)
	Handshake     string        // HandshakeLocal or HandshakeEndToEnd
	Wan           string        // WAN leg between two pepds: WanTCP (congestion-controlled, the default) or WanRate (package wanrate)
	WanRate       int64         // wan=rate: rate hint in bit/s (0 = the link's, SATBED_RATE_BPS)
	WanAdapt      bool          // wan=rate: follow the path's rate (on by default; 0 pins the hint)
	WanWindow     int           // wan=rate: per-stream window in bytes (0 = 8 x BDP, at least 1 MiB)
	WanGiveUp     time.Duration // wan=rate: a peer silent this long is gone and its streams reset (0 = never)
	WanFrame      int           // wan=rate: largest data frame in bytes (0 = from the link's BER, at most the MTU)
}

// WAN leg kinds.
const (
	WanTCP  = "tcp"
	WanRate = "rate"
)

// MaxWorkers bounds the workers option: beyond a few dozen processes the
// per-process baseline memory outweighs any descriptor limit reason.
const MaxWorkers = 64

// Defaults returns the options used when a key is not given.
func Defaults() Options {
	return Options{
		Port:             5100,
		BufferFactor:     2,
		MaxConns:         20000,
		Overflow:         OverflowPassthrough,
		NoDelay:          true,
		PipeBytes:        1 << 20,
		ConnectTimeout:   10 * time.Second,
		HalfCloseTimeout: 300 * time.Second,
		KeepAlive:        120 * time.Second,
		DrainTimeout:     10 * time.Second,
		StatsInterval:    time.Second,
		ConnLog:          true,
		Workers:          1,
		Handshake:        HandshakeLocal,
		Wan:              WanTCP,
		WanGiveUp:        60 * time.Second,
		WanAdapt:         true,
	}
}

type setter func(o *Options, v string) error

var keys = map[string]setter{
	"port": func(o *Options, v string) error {
		return intRange(v, 1, 65534, &o.Port)
	},
	"cc":     func(o *Options, v string) error { return ccName(v, &o.CC) },
	"lan_cc": func(o *Options, v string) error { return ccName(v, &o.LanCC) },
	"buffer_factor": func(o *Options, v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(f) || f <= 0 || f > 64 {
			return fmt.Errorf("want a number in (0, 64], got %q", v)
		}
		o.BufferFactor = f
		return nil
	},
	"wan_buf":   func(o *Options, v string) error { return intRange(v, 0, 1<<30, &o.WanBuf) },
	"lan_buf":   func(o *Options, v string) error { return intRange(v, 0, 1<<30, &o.LanBuf) },
	"max_conns": func(o *Options, v string) error { return intRange(v, 1, 1000000, &o.MaxConns) },
	"overflow": func(o *Options, v string) error {
		if v != OverflowPassthrough && v != OverflowRefuse {
			return fmt.Errorf("want %s or %s, got %q", OverflowPassthrough, OverflowRefuse, v)
		}
		o.Overflow = v
		return nil
	},
	"nodelay":  func(o *Options, v string) error { return boolean(v, &o.NoDelay) },
	"quickack": func(o *Options, v string) error { return boolean(v, &o.QuickAck) },
	"mss": func(o *Options, v string) error {
		if err := intRange(v, 0, 65495, &o.MSS); err != nil {
			return err
		}
		if o.MSS != 0 && o.MSS < 88 {
			return fmt.Errorf("want 0 or 88..65495, got %q", v)
		}
		return nil
	},
	"pipe_bytes":         func(o *Options, v string) error { return intRange(v, 4096, 1<<20, &o.PipeBytes) },
	"connect_timeout":    func(o *Options, v string) error { return duration(v, false, &o.ConnectTimeout) },
	"idle_timeout":       func(o *Options, v string) error { return duration(v, true, &o.IdleTimeout) },
	"half_close_timeout": func(o *Options, v string) error { return duration(v, true, &o.HalfCloseTimeout) },
	"keepalive": func(o *Options, v string) error {
		if err := duration(v, true, &o.KeepAlive); err != nil {
			return err
		}
		if o.KeepAlive != 0 && o.KeepAlive < time.Second {
			return fmt.Errorf("want 0 or at least 1s, got %q", v)
		}
		return nil
	},
	"drain_timeout": func(o *Options, v string) error { return duration(v, true, &o.DrainTimeout) },
	"stats_interval": func(o *Options, v string) error {
		if err := duration(v, false, &o.StatsInterval); err != nil {
			return err
		}
		if o.StatsInterval < 100*time.Millisecond {
			return fmt.Errorf("want at least 100ms, got %q", v)
		}
		return nil
	},
	"conn_log":       func(o *Options, v string) error { return boolean(v, &o.ConnLog) },
	"buffer_packets": func(o *Options, v string) error { return intRange(v, 0, 1000000, &o.BufferPackets) },
	"ack_reserve": func(o *Options, v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(f) || f < 0 || f >= 1 {
			return fmt.Errorf("want 0 (off) or a fraction in (0, 1), got %q", v)
		}
		o.AckReserve = f
		return nil
	},
	"outage_detect": func(o *Options, v string) error { return boolean(v, &o.OutageDetect) },
	"stall_timeout": func(o *Options, v string) error { return duration(v, true, &o.StallTimeout) },
	"wan_rto_max": func(o *Options, v string) error {
		if err := duration(v, true, &o.WanRTOMax); err != nil {
			return err
		}
		if o.WanRTOMax != 0 && (o.WanRTOMax < time.Second || o.WanRTOMax > 120*time.Second) {
			return fmt.Errorf("want 0 or 1s..120s (the kernel's range for TCP_RTO_MAX_MS), got %q", v)
		}
		return nil
	},
	"trace_interval": func(o *Options, v string) error {
		if err := duration(v, true, &o.TraceInterval); err != nil {
			return err
		}
		if o.TraceInterval != 0 && o.TraceInterval < 10*time.Millisecond {
			return fmt.Errorf("want 0 or at least 10ms, got %q", v)
		}
		return nil
	},
	"wan": func(o *Options, v string) error {
		if v != WanTCP && v != WanRate {
			return fmt.Errorf("want %s or %s, got %q", WanTCP, WanRate, v)
		}
		o.Wan = v
		return nil
	},
	"wan_rate": func(o *Options, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || n > 100_000_000_000 {
			return fmt.Errorf("want bit/s as an integer in 0..1e11, got %q", v)
		}
		o.WanRate = n
		return nil
	},
	"wan_adapt":  func(o *Options, v string) error { return boolean(v, &o.WanAdapt) },
	"wan_window": func(o *Options, v string) error { return intRange(v, 0, 1<<30, &o.WanWindow) },
	"wan_giveup": func(o *Options, v string) error { return duration(v, true, &o.WanGiveUp) },
	"wan_frame": func(o *Options, v string) error {
		if v == "0" {
			o.WanFrame = 0
			return nil
		}
		return intRange(v, 256, 65535, &o.WanFrame)
	},
	"handshake": func(o *Options, v string) error {
		if v != HandshakeLocal && v != HandshakeEndToEnd {
			return fmt.Errorf("want %s or %s, got %q", HandshakeLocal, HandshakeEndToEnd, v)
		}
		o.Handshake = v
		return nil
	},
	"workers": func(o *Options, v string) error {
		if v == "auto" {
			o.Workers = 0
			return nil
		}
		if err := intRange(v, 1, MaxWorkers, &o.Workers); err != nil {
			return fmt.Errorf("want auto or an integer in 1..%d, got %q", MaxWorkers, v)
		}
		return nil
	},
}

// Keys lists the accepted option names, sorted.
func Keys() []string {
	out := make([]string, 0, len(keys))
	for k := range keys {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Parse reads an option string on top of Defaults. Every error names the
// offending option so it can be shown to the user as one line.
func Parse(s string) (Options, error) {
	o := Defaults()
	seen := map[string]bool{}
	for _, field := range strings.Fields(s) {
		k, v, ok := strings.Cut(field, "=")
		if !ok || k == "" {
			return o, fmt.Errorf("option %q: want key=value", field)
		}
		set, known := keys[k]
		if !known {
			return o, fmt.Errorf("unknown option %q (known: %s)", k, strings.Join(Keys(), " "))
		}
		if seen[k] {
			return o, fmt.Errorf("option %q given twice", k)
		}
		seen[k] = true
		if err := set(&o, v); err != nil {
			return o, fmt.Errorf("option %s: %w", k, err)
		}
	}
	if o.AckReserve > 0 && o.BufferPackets == 0 {
		return o, fmt.Errorf("option ack_reserve: needs buffer_packets (K is a fraction of the buffer of B packets)")
	}
	// One netlink socket owns a queue: worker processes cannot share it.
	if o.Handshake == HandshakeEndToEnd && o.Workers != 1 {
		return o, fmt.Errorf("option handshake=%s needs workers=1 (one process owns the SYN queue)", HandshakeEndToEnd)
	}
	// One tunnel per PEP node: the WAN port's frames cannot be shared out
	// among processes the way SO_REUSEPORT shares SYNs.
	if o.Wan == WanRate && o.Workers != 1 {
		return o, fmt.Errorf("option wan=rate needs workers=1 (one process owns the tunnel)")
	}
	// The tunnel opens its stream once the client is connected; holding
	// the SYN for the far server's answer is not built for it.
	if o.Wan == WanRate && o.Handshake == HandshakeEndToEnd {
		return o, fmt.Errorf("option wan=rate works with handshake=%s only", HandshakeLocal)
	}
	return o, nil
}

// Map renders the options as a flat map for the stats file, so a result
// always records the configuration that produced it.
func (o Options) Map() map[string]string {
	return map[string]string{
		"port":               strconv.Itoa(o.Port),
		"cc":                 o.CC,
		"lan_cc":             o.LanCC,
		"buffer_factor":      strconv.FormatFloat(o.BufferFactor, 'g', -1, 64),
		"wan_buf":            strconv.Itoa(o.WanBuf),
		"lan_buf":            strconv.Itoa(o.LanBuf),
		"max_conns":          strconv.Itoa(o.MaxConns),
		"overflow":           o.Overflow,
		"nodelay":            boolString(o.NoDelay),
		"quickack":           boolString(o.QuickAck),
		"mss":                strconv.Itoa(o.MSS),
		"pipe_bytes":         strconv.Itoa(o.PipeBytes),
		"connect_timeout":    o.ConnectTimeout.String(),
		"idle_timeout":       o.IdleTimeout.String(),
		"half_close_timeout": o.HalfCloseTimeout.String(),
		"keepalive":          o.KeepAlive.String(),
		"drain_timeout":      o.DrainTimeout.String(),
		"stats_interval":     o.StatsInterval.String(),
		"conn_log":           boolString(o.ConnLog),
		"workers":            workersString(o.Workers),
		"buffer_packets":     strconv.Itoa(o.BufferPackets),
		"ack_reserve":        strconv.FormatFloat(o.AckReserve, 'g', -1, 64),
		"outage_detect":      boolString(o.OutageDetect || o.BufferPackets > 0),
		"stall_timeout":      o.StallTimeout.String(),
		"wan_rto_max":        o.WanRTOMax.String(),
		"trace_interval":     o.TraceInterval.String(),
		"handshake":          o.Handshake,
	}
}

func workersString(n int) string {
	if n == 0 {
		return "auto"
	}
	return strconv.Itoa(n)
}

func boolString(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func intRange(v string, lo, hi int, dst *int) error {
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return fmt.Errorf("want an integer in %d..%d, got %q", lo, hi, v)
	}
	*dst = n
	return nil
}

func boolean(v string, dst *bool) error {
	switch v {
	case "1", "true", "yes", "on":
		*dst = true
	case "0", "false", "no", "off":
		*dst = false
	default:
		return fmt.Errorf("want 0 or 1, got %q", v)
	}
	return nil
}

// duration accepts Go durations ("1500ms", "2m") or plain seconds ("30").
func duration(v string, zeroOK bool, dst *time.Duration) error {
	var d time.Duration
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		if math.IsNaN(f) || f < 0 || f > 1e6 {
			return fmt.Errorf("want a duration, got %q", v)
		}
		d = time.Duration(f * float64(time.Second))
	} else {
		d, err = time.ParseDuration(v)
		if err != nil || d < 0 || d > 1e6*time.Second {
			return fmt.Errorf("want a duration such as 30s, got %q", v)
		}
	}
	if d == 0 && !zeroOK {
		return fmt.Errorf("want a positive duration, got %q", v)
	}
	*dst = d
	return nil
}

// ccName checks only the shape of a congestion control name; whether the
// kernel offers it is checked by package tune at startup.
func ccName(v string, dst *string) error {
	if v == "" || len(v) > 15 {
		return fmt.Errorf("want a congestion control name, got %q", v)
	}
	for _, r := range v {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return fmt.Errorf("want a congestion control name, got %q", v)
		}
	}
	*dst = v
	return nil
}
