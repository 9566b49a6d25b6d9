// Package stats defines pepd's statistics files: stats.json, a snapshot
// rewritten atomically every interval and on exit, and conns.jsonl, one
// JSON object per finished connection.
package stats

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// Snapshot is the content of stats.json. The first fields are the ones
// the PEP adapter contract requires of every PEP.
type Snapshot struct {
	Name              string `json:"name"`
	ConnectionsSplit  int64  `json:"connections_split"`
	ConnectionsActive int64  `json:"connections_active"`
	BytesLanToWan     int64  `json:"bytes_lan_to_wan"`
	BytesWanToLan     int64  `json:"bytes_wan_to_lan"`
	Splitting         bool   `json:"splitting"`

	Role                   string            `json:"role"`
	PID                    int               `json:"pid"`
	Running                bool              `json:"running"`
	Listening              bool              `json:"listening"`
	Updated                string            `json:"updated"`
	UptimeS                float64           `json:"uptime_s"`
	ConnectionsAccepted    int64             `json:"connections_accepted"`
	ConnectionsFailed      int64             `json:"connections_connect_failed"`
	ConnectionsRefused     int64             `json:"connections_refused_overflow"`
	OverflowPauses         int64             `json:"overflow_pauses"`
	ResetsPropagated       int64             `json:"resets_propagated"`
	TimeoutsIdle           int64             `json:"timeouts_idle"`
	TimeoutsHalfClose      int64             `json:"timeouts_half_close"`
	AbortedAtShutdown      int64             `json:"aborted_at_shutdown"`
	WanBufferBytes         int               `json:"wan_buffer_bytes"`
	LanBufferBytes         int               `json:"lan_buffer_bytes"`
	ListenPorts            []int             `json:"listen_ports"`
	Options                map[string]string `json:"options"`
	ConnectionsHighWater   int64             `json:"connections_high_water"`
	PipeBytesPerDirection  int               `json:"pipe_bytes_per_direction"`
	PipesInUse             int               `json:"pipes_in_use"`
	PipesUndersized        int64             `json:"pipes_undersized"`
	OpenFileLimit          uint64            `json:"open_file_limit"`
	ConnectionLogPath      string            `json:"connection_log,omitempty"`
	ConnectionLogDropped   int64             `json:"connection_log_errors"`
	ConnectionsOverCeiling int64             `json:"connections_over_max"`
	Workers                int               `json:"workers"`               // processes sharing the listeners
	WorkerPIDs             []int             `json:"worker_pids,omitempty"` // when Workers > 1
	Error                  string            `json:"error,omitempty"`       // why a multi-worker pepd stopped on its own

	// The access-node buffer and outage detection (package access).
	BufferPackets        int     `json:"buffer_packets"`          // B (0: unbounded)
	BufferLimitBytes     int64   `json:"buffer_limit_bytes"`      // B in bytes, per connection
	AckReserve           float64 `json:"ack_reserve"`             // K (0: off)
	BufferBytes          int64   `json:"buffer_bytes"`            // held now, all connections
	BufferHighWaterBytes int64   `json:"buffer_high_water_bytes"` // most one connection held
	// The WAN side (relay pipe and WAN send queue, or the rate leg's
	// unacknowledged data): pepd reads the LAN socket only while it holds
	// less than BufferWanCapBytes (B less the LAN socket's share), so its
	// high water stays within that; the rest of B is the kernel's.
	BufferWanHighWaterBytes int64   `json:"buffer_wan_high_water_bytes"`
	BufferWanCapBytes       int64   `json:"buffer_wan_cap_bytes"`
	ConnectionsReserving    int64   `json:"connections_reserving"` // holding ACKs now
	ConnectionsWanDown      int64   `json:"connections_wan_down"`  // WAN leg in a detected outage now
	OutagesDetected         int64   `json:"outages_detected"`      // WAN-leg stalls detected
	OutagesRecovered        int64   `json:"outages_recovered"`     // and seen to end
	LastDetectLatencyS      float64 `json:"last_detect_latency_s"` // last ACK progress -> detection, latest outage
	LastStallS              float64 `json:"last_stall_s"`          // last ACK progress -> first progress after, latest recovered outage
	AccessFileErrors        int64   `json:"access_file_errors"`    // outages.jsonl / buffer.jsonl writes that failed
	// WanRate is the rate-based WAN leg's state and counters (wan=rate),
	// a wanrate.Stats.
	WanRate any `json:"wan_rate,omitempty"`
}

// Sum adds the counters of the workers' snapshots; listening is true if
// any worker listens (new connections are split as long as one does).
// Identity fields (name, pid, options, ...) are left to the caller.
// connections_high_water becomes the sum of the workers' peaks: an upper
// bound on the simultaneous peak, since the workers peak at different times.
func Sum(parts []Snapshot) Snapshot {
	var t Snapshot
	for _, p := range parts {
		t.ConnectionsSplit += p.ConnectionsSplit
		t.ConnectionsActive += p.ConnectionsActive
		t.BytesLanToWan += p.BytesLanToWan
		t.BytesWanToLan += p.BytesWanToLan
		t.Listening = t.Listening || p.Listening
		t.ConnectionsAccepted += p.ConnectionsAccepted
		t.ConnectionsFailed += p.ConnectionsFailed
		t.ConnectionsRefused += p.ConnectionsRefused
		t.OverflowPauses += p.OverflowPauses
		t.ResetsPropagated += p.ResetsPropagated
		t.TimeoutsIdle += p.TimeoutsIdle
		t.TimeoutsHalfClose += p.TimeoutsHalfClose
		t.AbortedAtShutdown += p.AbortedAtShutdown
		t.ConnectionsHighWater += p.ConnectionsHighWater
		t.PipesInUse += p.PipesInUse
		t.PipesUndersized += p.PipesUndersized
		t.ConnectionLogDropped += p.ConnectionLogDropped
		// The workers share one configuration of the buffer.
		t.BufferPackets, t.BufferLimitBytes, t.AckReserve = max(t.BufferPackets, p.BufferPackets), max(t.BufferLimitBytes, p.BufferLimitBytes), max(t.AckReserve, p.AckReserve)
		t.BufferWanCapBytes = max(t.BufferWanCapBytes, p.BufferWanCapBytes)
		t.BufferBytes += p.BufferBytes
		t.BufferHighWaterBytes = max(t.BufferHighWaterBytes, p.BufferHighWaterBytes)
		t.BufferWanHighWaterBytes = max(t.BufferWanHighWaterBytes, p.BufferWanHighWaterBytes)
		t.ConnectionsReserving += p.ConnectionsReserving
		t.ConnectionsWanDown += p.ConnectionsWanDown
		t.OutagesDetected += p.OutagesDetected
		t.OutagesRecovered += p.OutagesRecovered
		t.LastDetectLatencyS = max(t.LastDetectLatencyS, p.LastDetectLatencyS)
		t.LastStallS = max(t.LastStallS, p.LastStallS)
		t.AccessFileErrors += p.AccessFileErrors
		t.ConnectionsOverCeiling += p.ConnectionsOverCeiling
	}
	return t
}

// Read loads a stats file.
func Read(path string) (Snapshot, error) {
	var s Snapshot
	b, err := os.ReadFile(path)
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("decode %s: %w", path, err)
	}
	return s, nil
}

// Record is one line of conns.jsonl.
type Record struct {
	ID            uint64  `json:"id"`
	Side          string  `json:"syn_from"` // "lan" or "wan": the PEP port the client's SYN arrived on
	Client        string  `json:"client"`
	Server        string  `json:"server"`
	Upstream      string  `json:"upstream_local,omitempty"`
	Start         string  `json:"start"`
	DurationS     float64 `json:"duration_s"`
	BytesLanToWan int64   `json:"bytes_lan_to_wan"`
	BytesWanToLan int64   `json:"bytes_wan_to_lan"`
	Result        string  `json:"result"`
	Error         string  `json:"error,omitempty"`
}

// WriteAtomic writes v as JSON to path via a temporary file and rename,
// so readers never see a half-written file.
func WriteAtomic(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".stats-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, werr := tmp.Write(append(b, '\n'))
	cerr := tmp.Close()
	if werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), path)
	}
	if werr != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", path, werr)
	}
	return nil
}

// ConnLog appends Records as JSON lines through a buffer that is flushed
// by Flush (pepd calls it every stats interval) and Close. Every write to
// the file holds whole lines, so several processes can append to one
// file (O_APPEND) without tearing records.
type ConnLog struct {
	mu sync.Mutex
	f  *os.File
	w  *bufio.Writer
}

// OpenConnLog opens path for appending.
func OpenConnLog(path string) (*ConnLog, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open connection log: %w", err)
	}
	return &ConnLog{f: f, w: bufio.NewWriterSize(f, 64<<10)}, nil
}

// Add appends one record.
func (l *ConnLog) Add(r Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(b) > l.w.Available() && l.w.Buffered() > 0 {
		// bufio would split the line across two writes.
		if err := l.w.Flush(); err != nil {
			return err
		}
	}
	_, err = l.w.Write(b)
	return err
}

// Flush pushes buffered records to the file.
func (l *ConnLog) Flush() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Flush()
}

// Close flushes and closes the file.
func (l *ConnLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	err := l.w.Flush()
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	return err
}
