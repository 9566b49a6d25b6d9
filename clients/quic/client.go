package quic

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	quicgo "github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// ClientConfig configures Get and Put.
type ClientConfig struct {
	Server  string        // host:port
	Mode    string        // ModeQUIC or ModeHTTP3
	Timeout time.Duration // idle timeout; 0 means 30 s
	Qlog    *QlogDir      // nil: no qlog
	KeyLog  io.Writer     // nil: no key log
}

// Summary is what get and put print: times are seconds since the client
// started to dial, so the handshake and the wait for the first byte are
// inside Seconds.
type Summary struct {
	Op                string  `json:"op"`
	Mode              string  `json:"mode"`
	File              string  `json:"file"`
	Bytes             int64   `json:"bytes"`
	Seconds           float64 `json:"seconds"`
	HandshakeSeconds  float64 `json:"handshake_s"`
	FirstByteSeconds  float64 `json:"first_byte_s,omitempty"` // get: the first byte of the file read
	GoodputBPS        float64 `json:"goodput_bps"`
	CongestionControl string  `json:"congestion_control"`
	ALPN              string  `json:"alpn"`
	// SHA256 is the receiver's digest of the file it wrote (get: this
	// client's; put: the server's, from its reply); SentSHA256 is put's own.
	SHA256     string `json:"sha256"`
	SentSHA256 string `json:"sha256_sent,omitempty"`
	// The connection's own counters at the end (quic-go ConnectionStats).
	MinRTTMillis      float64  `json:"min_rtt_ms"`
	SmoothedRTTMillis float64  `json:"smoothed_rtt_ms"`
	CwndBytes         uint64   `json:"cwnd_bytes"`
	PacketsSent       uint64   `json:"packets_sent"`
	PacketsReceived   uint64   `json:"packets_received"`
	PacketsLost       uint64   `json:"packets_lost"`
	Qlogs             []string `json:"qlogs,omitempty"`
}

func (c *ClientConfig) timeout() time.Duration {
	if c.Timeout <= 0 {
		return 30 * time.Second
	}
	return c.Timeout
}

// session is one client connection, timed from its start.
type session struct {
	start     time.Time
	handshake time.Duration
	conn      *quicgo.Conn
	stats     quicgo.ConnectionStats
}

func (s *session) dial(ctx context.Context, addr string, tlsConf *tls.Config, cfg *quicgo.Config) (*quicgo.Conn, error) {
	c, err := quicgo.DialAddr(ctx, addr, tlsConf, cfg)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	// DialAddr returns once the handshake is complete.
	s.handshake = time.Since(s.start)
	s.conn = c
	return c, nil
}

func (s *session) keepStats() {
	if s.conn != nil {
		s.stats = s.conn.ConnectionStats()
	}
}

func (s *session) fill(sum *Summary, cfg ClientConfig) {
	sum.Mode = cfg.Mode
	sum.Seconds = time.Since(s.start).Seconds()
	sum.HandshakeSeconds = s.handshake.Seconds()
	if sum.Seconds > 0 {
		sum.GoodputBPS = float64(sum.Bytes) * 8 / sum.Seconds
	}
	sum.CongestionControl = CongestionControl
	sum.ALPN = alpn(cfg.Mode)
	sum.MinRTTMillis = millis(s.stats.MinRTT)
	sum.SmoothedRTTMillis = millis(s.stats.SmoothedRTT)
	sum.CwndBytes = s.stats.CongestionWindow
	sum.PacketsSent = s.stats.PacketsSent
	sum.PacketsReceived = s.stats.PacketsReceived
	sum.PacketsLost = s.stats.PacketsLost
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Get downloads the server's file name to out and hashes the file it
// wrote. What arrived stays in out when the transfer fails or is stopped,
// as scp and ncftpget leave it: a time-limited run checks it is the
// payload's prefix.
func Get(ctx context.Context, cfg ClientConfig, name, out string) (*Summary, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	if _, err := ParseMode(cfg.Mode); err != nil {
		return nil, err
	}
	s := &session{start: time.Now()}
	sum := &Summary{Op: "get", File: name}
	f, err := os.Create(out)
	if err != nil {
		return nil, fmt.Errorf("get: %w", err)
	}
	w := &firstByteWriter{w: f, start: s.start}
	if cfg.Mode == ModeHTTP3 {
		err = getHTTP3(ctx, cfg, s, name, w)
	} else {
		err = getQUIC(ctx, cfg, s, name, w)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", name, err)
	}
	if sum.SHA256, err = FileSHA256(out); err != nil {
		return nil, fmt.Errorf("get: %w", err)
	}
	sum.Bytes = w.n
	sum.FirstByteSeconds = w.first.Seconds()
	s.fill(sum, cfg)
	return sum, finish(ctx, cfg, sum)
}

// Put uploads the local file as name and takes the server's digest of what
// it wrote from its reply.
func Put(ctx context.Context, cfg ClientConfig, local, name string) (*Summary, error) {
	if name == "" {
		name = filepath.Base(local)
	}
	if err := ValidName(name); err != nil {
		return nil, err
	}
	if _, err := ParseMode(cfg.Mode); err != nil {
		return nil, err
	}
	f, err := os.Open(local)
	if err != nil {
		return nil, fmt.Errorf("put: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("put: %w", err)
	}
	s := &session{start: time.Now()}
	h := sha256.New()
	body := io.TeeReader(f, h)
	var reply Reply
	if cfg.Mode == ModeHTTP3 {
		reply, err = putHTTP3(ctx, cfg, s, name, body, st.Size())
	} else {
		reply, err = putQUIC(ctx, cfg, s, name, body, st.Size())
	}
	if err != nil {
		return nil, fmt.Errorf("put %s: %w", name, err)
	}
	sum := &Summary{Op: "put", File: name, Bytes: reply.Size, SHA256: reply.SHA256,
		SentSHA256: hex.EncodeToString(h.Sum(nil))}
	s.fill(sum, cfg)
	if reply.Size != st.Size() {
		return nil, fmt.Errorf("put %s: server wrote %d of %d bytes", name, reply.Size, st.Size())
	}
	return sum, finish(ctx, cfg, sum)
}

// finish waits (bounded) until this connection's qlog is on disk, so that
// the caller can read it as soon as the command has exited.
func finish(ctx context.Context, cfg ClientConfig, sum *Summary) error {
	if cfg.Qlog == nil {
		return nil
	}
	wait, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := cfg.Qlog.Wait(wait); err != nil {
		return err
	}
	sum.Qlogs = cfg.Qlog.Files()
	return cfg.Qlog.Err()
}

// closeOnCancel closes the connection when ctx ends, which unblocks any
// stream read or write on it; the returned func undoes that.
func closeOnCancel(ctx context.Context, c *quicgo.Conn) func() bool {
	return context.AfterFunc(ctx, func() { _ = c.CloseWithError(1, "cancelled") })
}

func getQUIC(ctx context.Context, cfg ClientConfig, s *session, name string, w io.Writer) error {
	c, err := s.dial(ctx, cfg.Server, clientTLS(cfg.Mode, cfg.KeyLog), quicConfig(cfg.timeout(), cfg.Qlog.Tracer()))
	if err != nil {
		return err
	}
	defer c.CloseWithError(0, "")
	defer closeOnCancel(ctx, c)()
	str, err := c.OpenStreamSync(ctx)
	if err != nil {
		return fmt.Errorf("open stream: %w", err)
	}
	if _, err := io.WriteString(str, Request{Op: "GET", Name: name}.String()); err != nil {
		return fmt.Errorf("request: %w", err)
	}
	if err := str.Close(); err != nil {
		return fmt.Errorf("request: %w", err)
	}
	br := bufio.NewReaderSize(str, 64<<10)
	line, err := readLine(br)
	if err != nil {
		return fmt.Errorf("reply: %w", ctxErr(ctx, err))
	}
	reply, err := ParseReply(line)
	if err != nil {
		return err
	}
	n, err := io.Copy(w, br)
	if err != nil {
		return fmt.Errorf("after %d bytes: %w", n, ctxErr(ctx, err))
	}
	if n != reply.Size {
		return fmt.Errorf("stream ended after %d of %d bytes", n, reply.Size)
	}
	s.keepStats()
	return nil
}

func putQUIC(ctx context.Context, cfg ClientConfig, s *session, name string, body io.Reader, size int64) (Reply, error) {
	c, err := s.dial(ctx, cfg.Server, clientTLS(cfg.Mode, cfg.KeyLog), quicConfig(cfg.timeout(), cfg.Qlog.Tracer()))
	if err != nil {
		return Reply{}, err
	}
	defer c.CloseWithError(0, "")
	defer closeOnCancel(ctx, c)()
	str, err := c.OpenStreamSync(ctx)
	if err != nil {
		return Reply{}, fmt.Errorf("open stream: %w", err)
	}
	if _, err := io.WriteString(str, Request{Op: "PUT", Name: name, Size: size}.String()); err != nil {
		return Reply{}, fmt.Errorf("request: %w", err)
	}
	n, err := io.Copy(str, io.LimitReader(body, size))
	if err == nil && n != size {
		err = fmt.Errorf("local file ended after %d of %d bytes", n, size)
	}
	if err != nil {
		return Reply{}, fmt.Errorf("send: %w", ctxErr(ctx, err))
	}
	if err := str.Close(); err != nil {
		return Reply{}, fmt.Errorf("send: %w", err)
	}
	line, err := readLine(bufio.NewReader(str))
	if err != nil {
		return Reply{}, fmt.Errorf("reply: %w", ctxErr(ctx, err))
	}
	s.keepStats()
	return ParseReply(line)
}

// h3Transport dials through the session, so the handshake is timed and the
// connection's counters can be read before it closes.
func h3Transport(cfg ClientConfig, s *session) *http3.Transport {
	return &http3.Transport{
		TLSClientConfig: clientTLS(cfg.Mode, cfg.KeyLog),
		QUICConfig:      quicConfig(cfg.timeout(), cfg.Qlog.Tracer()),
		Dial:            s.dial,
	}
}

func h3URL(server, name string) string { return "https://" + server + "/" + name }

func getHTTP3(ctx context.Context, cfg ClientConfig, s *session, name string, w io.Writer) error {
	tr := h3Transport(cfg, s)
	defer tr.Close()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h3URL(cfg.Server, name), nil)
	if err != nil {
		return err
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return fmt.Errorf("request: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%w: %s", ErrRemote, resp.Status)
	}
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return fmt.Errorf("after %d bytes: %w", n, ctxErr(ctx, err))
	}
	if resp.ContentLength >= 0 && n != resp.ContentLength {
		return fmt.Errorf("body ended after %d of %d bytes", n, resp.ContentLength)
	}
	s.keepStats()
	return nil
}

func putHTTP3(ctx context.Context, cfg ClientConfig, s *session, name string, body io.Reader, size int64) (Reply, error) {
	tr := h3Transport(cfg, s)
	defer tr.Close()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, h3URL(cfg.Server, name), io.LimitReader(body, size))
	if err != nil {
		return Reply{}, err
	}
	req.ContentLength = size
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return Reply{}, fmt.Errorf("request: %w", ctxErr(ctx, err))
	}
	defer resp.Body.Close()
	line, err := readLine(bufio.NewReader(io.LimitReader(resp.Body, MaxLine+2)))
	if err != nil {
		return Reply{}, fmt.Errorf("reply (%s): %w", resp.Status, err)
	}
	s.keepStats()
	reply, err := ParseReply(line)
	if err == nil && resp.StatusCode != http.StatusCreated {
		err = fmt.Errorf("%w: %s", ErrRemote, resp.Status)
	}
	return reply, err
}

// ctxErr prefers the cancellation over the closed connection it caused.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return errors.Join(ctx.Err(), err)
	}
	return err
}

// firstByteWriter counts what it writes and when the first byte came.
type firstByteWriter struct {
	w     io.Writer
	start time.Time
	first time.Duration
	n     int64
}

func (f *firstByteWriter) Write(p []byte) (int, error) {
	if f.n == 0 && len(p) > 0 {
		f.first = time.Since(f.start)
	}
	n, err := f.w.Write(p)
	f.n += int64(n)
	return n, err
}
