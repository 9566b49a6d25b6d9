package trafficgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// PayloadLen is the size of the shared buffer senders write from.
const PayloadLen = 64 << 10

// errPeerClosed: the other end closed before the flow's size was reached.
var errPeerClosed = errors.New("peer closed")

// longAgo is a deadline in the past: setting it wakes any blocked I/O.
func longAgo() time.Time { return time.Unix(1, 0) }

// NewPayload returns seeded random bytes to send (random, so no link or
// tool can compress them). Senders share it read-only.
func NewPayload(seed uint64) []byte {
	var key [32]byte
	for i := range 8 {
		key[i] = byte(seed >> (8 * i))
	}
	b := make([]byte, PayloadLen)
	_, _ = rand.NewChaCha8(key).Read(b)
	return b
}

// buffers lends receive buffers, so a connection holds one only while it
// reads; each Server and each client run owns its own.
type buffers struct{ pool sync.Pool }

func newBuffers() *buffers {
	return &buffers{pool: sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}}
}

// Server answers flow requests: it sends for downloads and sinks uploads,
// and records one FlowRecord per flow (side "server").
type Server struct {
	Records       *Recorder
	Payload       []byte
	HeaderTimeout time.Duration // how long a connection may take to send its header
	Log           *log.Logger   // nil: quiet
}

// Serve accepts until ctx is cancelled, then stops every flow (recording
// it as stopped) and returns once all are recorded.
func (s *Server) Serve(ctx context.Context, ln *net.TCPListener) error {
	if len(s.Payload) == 0 {
		return errors.New("serve: no payload")
	}
	if s.HeaderTimeout <= 0 {
		s.HeaderTimeout = 30 * time.Second
	}
	unhook := context.AfterFunc(ctx, func() { ln.Close() })
	defer unhook()
	bufs := newBuffers()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.AcceptTCP()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || isTemporaryAccept(err) {
				// Out of descriptors or similar: back off rather than spin.
				s.logf("accept: %v", err)
				time.Sleep(20 * time.Millisecond)
				continue
			}
			return fmt.Errorf("accept: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.handle(ctx, c, bufs)
		}()
	}
}

func (s *Server) logf(format string, args ...any) {
	if s.Log != nil {
		s.Log.Printf(format, args...)
	}
}

func (s *Server) handle(ctx context.Context, c *net.TCPConn, bufs *buffers) {
	defer c.Close()
	start := time.Now()
	unhook := context.AfterFunc(ctx, func() { _ = c.SetDeadline(longAgo()) })
	defer unhook()
	hdr := make([]byte, HeaderLen)
	_ = c.SetReadDeadline(start.Add(s.HeaderTimeout))
	if _, err := io.ReadFull(c, hdr); err != nil {
		if ctx.Err() == nil {
			s.logf("%v: no request header: %v", c.RemoteAddr(), err)
		}
		return
	}
	// Cancellation between the two deadline calls must still stop the flow.
	_ = c.SetReadDeadline(time.Time{})
	if ctx.Err() != nil {
		_ = c.SetDeadline(longAgo())
	}
	req, err := ParseRequest(hdr)
	if err != nil {
		s.logf("%v: %v", c.RemoteAddr(), err)
		return
	}
	rec := &FlowRecord{
		Side: "server", Client: req.Client, Flow: req.Flow, Kind: kindOf(req.Size),
		Direction: req.Direction.String(), Local: c.LocalAddr().String(), Remote: c.RemoteAddr().String(),
		Size: req.Size, Sender: req.Direction == Download,
	}
	var ioErr error
	if req.Direction == Download {
		var written uint64
		written, ioErr = writeN(c, s.Payload, req.Size)
		if ioErr == nil {
			// Wait for the client's close: then every byte is acknowledged
			// and TCP_INFO's retransmission count is final.
			if ioErr = c.CloseWrite(); ioErr == nil {
				_, ioErr = io.Copy(io.Discard, c)
			}
		}
		rec.addTCPInfo(c, 0, written)
	} else {
		rec.Bytes, ioErr = bufs.readN(c, req.Size, nil)
		if ioErr == nil {
			_, ioErr = c.Write(MarshalReply(rec.Bytes))
		}
		if ioErr == nil && req.Size > 0 {
			// The receipt is out; the client closes next.
			_, ioErr = io.Copy(io.Discard, c)
		}
		rec.addTCPInfo(c, 0, 0)
	}
	switch {
	case ioErr == nil && req.Size > 0 && rec.Bytes == req.Size:
		rec.Status = Completed
	case ctx.Err() != nil || ioErr == nil || isReset(ioErr) || errors.Is(ioErr, errPeerClosed):
		// Our stop, or the client ended the flow (its run stopped, or a long flow's end).
		rec.Status = Stopped
	default:
		rec.Status, rec.Error = Aborted, ioErr.Error()
	}
	rec.finish(start, time.Now())
	s.Records.Flow(rec)
}

func kindOf(size uint64) string {
	if size == 0 {
		return "long"
	}
	return "finite"
}

// writeN writes n bytes from payload, repeated (n == 0: until an error).
func writeN(c net.Conn, payload []byte, n uint64) (uint64, error) {
	var written uint64
	for n == 0 || written < n {
		chunk := payload
		if n > 0 && n-written < uint64(len(chunk)) {
			chunk = chunk[:n-written]
		}
		k, err := c.Write(chunk)
		written += uint64(k)
		if err != nil {
			return written, err
		}
	}
	return written, nil
}

// readN reads n bytes (n == 0: until EOF) and counts them; lastData, if
// not nil, is set to the time the last bytes arrived. A finite flow ends at
// its last byte, not at the peer's FIN: a FIN queued behind a full
// congestion window leaves a round trip later, which would show as a
// round trip of idle time between a flow and its replacement.
func (bs *buffers) readN(c net.Conn, n uint64, lastData *time.Time) (uint64, error) {
	bp := bs.pool.Get().(*[]byte)
	defer bs.pool.Put(bp)
	buf := *bp
	var got uint64
	for n == 0 || got < n {
		chunk := buf
		if n > 0 && n-got < uint64(len(chunk)) {
			chunk = chunk[:n-got]
		}
		k, err := c.Read(chunk)
		if k > 0 {
			got += uint64(k)
			if lastData != nil {
				*lastData = time.Now()
			}
		}
		if err == io.EOF && n == 0 {
			return got, nil
		}
		if err == io.EOF {
			return got, fmt.Errorf("%w after %d of %d bytes", errPeerClosed, got, n)
		}
		if err != nil {
			return got, err
		}
	}
	return got, nil
}
