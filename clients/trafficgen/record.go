package trafficgen

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Flow statuses.
const (
	Completed = "completed" // every byte delivered and confirmed
	Stopped   = "stopped"   // cut by the end of the run (a long-lived flow always is)
	Aborted   = "aborted"   // failed: refused, reset, timed out
)

// FlowRecord is one line of the records file. Times are Unix seconds.
// Bytes are delivered bytes as the recording side saw them: received for a
// receiver, acknowledged (TCP_INFO bytes_acked) for a sender.
type FlowRecord struct {
	Record      string  `json:"record"` // "flow"
	Side        string  `json:"side"`   // "client" or "server"
	Client      uint32  `json:"client"`
	Tag         string  `json:"tag,omitempty"`
	Flow        uint64  `json:"flow"`
	Kind        string  `json:"kind"` // "finite" or "long"
	Direction   string  `json:"direction"`
	Local       string  `json:"local,omitempty"`
	Remote      string  `json:"remote,omitempty"`
	Size        uint64  `json:"size"` // requested; 0 for a long-lived flow
	Start       float64 `json:"start"`
	End         float64 `json:"end"`
	DurationS   float64 `json:"duration_s"`
	ConnectMs   float64 `json:"connect_ms,omitempty"`
	Bytes       uint64  `json:"bytes"`
	GoodputBps  float64 `json:"goodput_bps"`
	Status      string  `json:"status"`
	Completed   bool    `json:"completed"`
	Error       string  `json:"error,omitempty"`
	Sender      bool    `json:"sender"`                  // this side sent the flow's data
	Retrans     *uint32 `json:"retransmissions"`         // sender side only: TCP_INFO total_retrans
	RetransByte *uint64 `json:"retrans_bytes,omitempty"` // sender side only: TCP_INFO bytes_retrans
	RTTMs       float64 `json:"rtt_ms,omitempty"`        // smoothed RTT at the end (sender side is meaningful)
	MinRTTMs    float64 `json:"min_rtt_ms,omitempty"`
}

// Summary closes a records file.
type Summary struct {
	Record       string            `json:"record"` // "summary"
	Side         string            `json:"side"`
	Client       uint32            `json:"client"`
	Tag          string            `json:"tag,omitempty"`
	Config       map[string]any    `json:"config"`
	Start        float64           `json:"start"`
	End          float64           `json:"end"`
	Flows        int               `json:"flows"`
	ByStatus     map[string]int    `json:"by_status"`
	Bytes        uint64            `json:"bytes"`
	Skipped      int               `json:"skipped_arrivals"` // Poisson arrivals dropped at the active-flow cap
	MaxActive    int               `json:"max_active"`
	CPUUserS     float64           `json:"cpu_user_s"`
	CPUSystemS   float64           `json:"cpu_system_s"`
	CPUShare     float64           `json:"cpu_share"` // (user + system) / wall time, in cores
	ErrorsSample map[string]string `json:"errors_sample,omitempty"`
}

// Recorder writes records as JSON lines, one write per line, safe for
// concurrent flows, and keeps the tallies the summary needs.
type Recorder struct {
	mu        sync.Mutex
	w         io.Writer
	err       error
	flows     int
	byStatus  map[string]int
	bytes     uint64
	errSample map[string]string
}

// NewRecorder writes to w (nil: records are only tallied).
func NewRecorder(w io.Writer) *Recorder {
	return &Recorder{w: w, byStatus: map[string]int{}, errSample: map[string]string{}}
}

// Flow writes one flow record.
func (r *Recorder) Flow(rec *FlowRecord) {
	rec.Record = "flow"
	line, err := json.Marshal(rec)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.flows++
	r.byStatus[rec.Status]++
	r.bytes += rec.Bytes
	if rec.Error != "" && len(r.errSample) < 8 {
		r.errSample[rec.Status+": "+firstWords(rec.Error)] = rec.Error
	}
	r.write(line, err)
}

// Summary fills the tallies and writes the summary line; it returns it too.
func (r *Recorder) Summary(s *Summary) *Summary {
	s.Record = "summary"
	s.End = now()
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) == nil {
		s.CPUUserS = tvSeconds(ru.Utime)
		s.CPUSystemS = tvSeconds(ru.Stime)
		if wall := s.End - s.Start; wall > 0 {
			s.CPUShare = round3((s.CPUUserS + s.CPUSystemS) / wall)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	s.Flows, s.Bytes = r.flows, r.bytes
	s.ByStatus = map[string]int{}
	for k, v := range r.byStatus {
		s.ByStatus[k] = v
	}
	if len(r.errSample) > 0 {
		s.ErrorsSample = map[string]string{}
		for k, v := range r.errSample {
			s.ErrorsSample[k] = v
		}
	}
	line, err := json.Marshal(s)
	r.write(line, err)
	return s
}

// Err is the first write error, if any.
func (r *Recorder) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

func (r *Recorder) write(line []byte, err error) {
	if r.w == nil || r.err != nil {
		return
	}
	if err != nil {
		r.err = fmt.Errorf("encode record: %w", err)
		return
	}
	if _, err := r.w.Write(append(line, '\n')); err != nil {
		r.err = fmt.Errorf("write record: %w", err)
	}
}

func firstWords(s string) string {
	if len(s) > 40 {
		return s[:40]
	}
	return s
}

func now() float64 { return float64(time.Now().UnixNano()) / 1e9 }

func tvSeconds(tv unix.Timeval) float64 { return float64(tv.Sec) + float64(tv.Usec)/1e6 }

func round3(x float64) float64 { return float64(int64(x*1000+0.5)) / 1000 }

// finish fills the derived fields of a record.
func (rec *FlowRecord) finish(start, end time.Time) {
	rec.Start = float64(start.UnixNano()) / 1e9
	rec.End = float64(end.UnixNano()) / 1e9
	d := end.Sub(start).Seconds()
	rec.DurationS = round3(d)
	if d > 0 {
		rec.GoodputBps = float64(int64(float64(rec.Bytes) * 8 / d))
	}
	rec.Completed = rec.Status == Completed
}

// tcpInfo reads the socket's TCP_INFO.
func tcpInfo(c *net.TCPConn) (*unix.TCPInfo, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("tcp_info: %w", err)
	}
	var info *unix.TCPInfo
	var gerr error
	if err := raw.Control(func(fd uintptr) {
		info, gerr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil {
		return nil, fmt.Errorf("tcp_info: %w", err)
	}
	if gerr != nil {
		return nil, fmt.Errorf("tcp_info: %w", gerr)
	}
	return info, nil
}

// addTCPInfo records what TCP_INFO says about the flow. As the sender it
// counts as delivered the payload the receiver acknowledged: bytes_acked
// less the overhead this side sent before the payload (and the FIN's one
// sequence number), at most what was written.
func (rec *FlowRecord) addTCPInfo(c *net.TCPConn, overhead, written uint64) {
	info, err := tcpInfo(c)
	if err != nil {
		return
	}
	rec.RTTMs = float64(info.Rtt) / 1000
	rec.MinRTTMs = float64(info.Min_rtt) / 1000
	if rec.Sender {
		retrans, rbytes := info.Total_retrans, info.Bytes_retrans
		rec.Retrans, rec.RetransByte = &retrans, &rbytes
		acked := uint64(0)
		if info.Bytes_acked > overhead {
			acked = info.Bytes_acked - overhead
		}
		rec.Bytes = min(acked, written)
	}
}

// isReset reports a connection the peer reset or closed under us.
func isReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
