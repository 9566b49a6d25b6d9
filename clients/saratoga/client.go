package saratoga

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// ClientConfig configures Get and Put.
type ClientConfig struct {
	Server  string        // host:port of the Saratoga server
	RateBPS int64         // pacing rate when this side sends (put)
	Burst   time.Duration // pacer token-bucket depth; 0 means DefaultBurst
	Timeout time.Duration // inactivity timeout
	MTU     int           // 0 means DefaultMTU
	Frame   int           // largest UDP payload; 0 means MTU - FrameMargin
	// Checksum is the METADATA checksum a put sends (get uses the server's).
	Checksum ChecksumType
	// Descriptor fixes the put descriptor width; AutoDescriptor picks the
	// narrowest that fits the file.
	Descriptor     Descriptor
	AutoDescriptor bool
	// Linger is how long a get keeps answering the server after completion
	// in case its final STATUS frames were lost.
	Linger time.Duration
	// RequestRetry is how long the client waits for an answer before it
	// sends its REQUEST again (a lost REQUEST costs this much); 0 means 1 s,
	// about two GEO round trips.
	RequestRetry time.Duration
	// Conn, if set, is used instead of a fresh UDP socket (tests wrap it to
	// inject loss). The client sets a read deadline on it when done.
	Conn net.PacketConn
}

func (c *ClientConfig) defaults() {
	if c.MTU == 0 {
		c.MTU = DefaultMTU
	}
	c.Frame = FrameFor(c.MTU, c.Frame)
	if c.Timeout <= 0 {
		c.Timeout = 30 * time.Second
	}
	if c.RequestRetry <= 0 {
		c.RequestRetry = time.Second
	}
	if c.RateBPS <= 0 {
		c.RateBPS = 8_000_000
	}
}

// clientConn is one client session's socket plus its reader goroutine.
type clientConn struct {
	conn net.PacketConn
	own  bool
	out  *batchSender
	in   chan any
	bad  atomic.Uint64
	wg   sync.WaitGroup
}

func dialClient(cfg *ClientConfig, session uint32) (*clientConn, error) {
	peer, err := net.ResolveUDPAddr("udp", cfg.Server)
	if err != nil {
		return nil, fmt.Errorf("resolve server %q: %w", cfg.Server, err)
	}
	c := &clientConn{conn: cfg.Conn, in: make(chan any, 8192)}
	if c.conn == nil {
		network := "udp4"
		if peer.IP.To4() == nil {
			network = "udp6"
		}
		if c.conn, err = ListenUDP(network, ":0"); err != nil {
			return nil, fmt.Errorf("open UDP socket: %w", err)
		}
		c.own = true
		// Room for a burst of frames while the receiver writes to disk.
		SetSocketBuffers(c.conn, 4<<20)
	}
	c.out = newBatchSender(c.conn, peer)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		_ = readLoop(c.conn, &c.bad, func(_ net.Addr, f any) {
			// Frames are matched on the transaction id, not the source
			// address, so a multi-homed server still works.
			if frameSession(f) != session {
				return
			}
			select {
			case c.in <- f:
			default: // receiver overrun: same as loss
			}
		})
	}()
	return c, nil
}

func (c *clientConn) send(b []byte) error { return c.out.send(b) }

// beacon announces this client to the server ahead of its REQUEST; it is
// advisory, so a failure to send it is ignored.
func (c *clientConn) beacon() {
	if b, err := localBeacon("").Append(nil); err == nil {
		_ = c.send(b)
	}
}

func (c *clientConn) close() {
	if c.own {
		c.conn.Close()
	} else {
		_ = c.conn.SetReadDeadline(time.Now())
	}
	c.wg.Wait()
}

func frameSession(f any) uint32 {
	switch v := f.(type) {
	case *Request:
		return v.Session
	case *Metadata:
		return v.Session
	case *Data:
		return v.Session
	case *Status:
		return v.Session
	}
	return 0
}

// describe turns a peer error code into a clear message.
func describe(op, name string, err error) error {
	var re *RemoteError
	if errors.As(err, &re) {
		return fmt.Errorf("%s %q: server refused: %w", op, name, err)
	}
	return fmt.Errorf("%s %q: %w", op, name, err)
}

// Get fetches name from the server into out (written as out.part and
// renamed once the checksum verifies).
func Get(ctx context.Context, cfg ClientConfig, name, out string) (*Summary, error) {
	cfg.defaults()
	session := newSessionID()
	req, err := (&Request{Descriptor: D64, Type: ReqGet, Session: session, Path: name,
		TxWilling: WillingYes, RxWilling: WillingYes}).Append(nil)
	if err != nil {
		return nil, describe("get", name, err)
	}
	tmp := out + ".part"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, describe("get", name, err)
	}
	cc, err := dialClient(&cfg, session)
	if err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, describe("get", name, err)
	}
	cc.beacon()
	start := time.Now()
	rcv := newReceiver(receiverConfig{
		Session: session, Descriptor: D64, Frame: cfg.Frame, Timeout: cfg.Timeout,
		Linger: cfg.Linger,
		Retry:  func() error { return cc.send(req) }, RetryEvery: cfg.RequestRetry,
	}, f, cc.send, cc.in)
	_, _, rcvErr := rcv.run(ctx)
	// Completion time excludes the linger period.
	elapsed := rcv.completedAt.Sub(start)
	cc.close()
	if cerr := f.Close(); rcvErr == nil && cerr != nil {
		rcvErr = cerr
	}
	if rcvErr != nil {
		os.Remove(tmp)
		return nil, describe("get", name, rcvErr)
	}
	if err := os.Rename(tmp, out); err != nil {
		os.Remove(tmp)
		return nil, describe("get", name, err)
	}
	s := &Summary{Op: "get", File: name, Bytes: rcv.meta.Dirent.Size, Descriptor: rcv.meta.Descriptor.Bits(),
		Checksum: rcv.meta.ChecksumType.String(), ChecksumOK: rcv.checksumOK}
	s.fill(rcv.stats, elapsed)
	s.MalformedFrames = cc.bad.Load()
	return s, nil
}

// Put sends the local file to the server, stored there as remote.
func Put(ctx context.Context, cfg ClientConfig, local, remote string) (*Summary, error) {
	cfg.defaults()
	if remote == "" {
		remote = filepath.Base(local)
	}
	f, err := os.Open(local)
	if err != nil {
		return nil, describe("put", remote, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, describe("put", remote, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, describe("put", remote, fmt.Errorf("%s is not a regular file", local))
	}
	size := uint64(fi.Size())
	desc := cfg.Descriptor
	if cfg.AutoDescriptor {
		desc = DescriptorFor(size)
	}
	sum, err := ChecksumOf(f, size, cfg.Checksum)
	if err != nil {
		return nil, describe("put", remote, err)
	}
	session := newSessionID()
	meta := &Metadata{Descriptor: desc, ChecksumType: cfg.Checksum, Checksum: sum, Session: session,
		Dirent: DirEnt{Descriptor: desc, Size: size, Mtime: since2000(fi.ModTime()), Ctime: since2000(fi.ModTime()), Path: remote}}
	req, err := (&Request{Descriptor: desc, Type: ReqPut, Session: session, Path: remote,
		TxWilling: WillingYes, RxWilling: WillingYes}).Append(nil)
	if err != nil {
		return nil, describe("put", remote, err)
	}
	cc, err := dialClient(&cfg, session)
	if err != nil {
		return nil, describe("put", remote, err)
	}
	defer cc.close()
	cc.beacon()
	start := time.Now()
	if err := awaitAcceptance(ctx, cc, req, cfg.Timeout, cfg.RequestRetry); err != nil {
		return nil, describe("put", remote, err)
	}
	snd, err := newSender(senderConfig{Session: session, Descriptor: desc, RateBPS: cfg.RateBPS, Burst: cfg.Burst, Frame: cfg.Frame, Timeout: cfg.Timeout},
		f, size, meta, cc.out.sendBatch, cc.in)
	if err != nil {
		return nil, describe("put", remote, err)
	}
	st, err := snd.run(ctx)
	if err != nil {
		return nil, describe("put", remote, err)
	}
	s := &Summary{Op: "put", File: remote, Bytes: size, RateBPS: cfg.RateBPS, Descriptor: desc.Bits(),
		Checksum: cfg.Checksum.String(), ChecksumOK: true}
	s.fill(st, time.Since(start))
	s.MalformedFrames = cc.bad.Load()
	return s, nil
}

// awaitAcceptance sends a put REQUEST until the server answers with a
// STATUS: success lets the transfer start, an error code ends it.
func awaitAcceptance(ctx context.Context, cc *clientConn, req []byte, timeout, every time.Duration) error {
	deadline := time.Now().Add(timeout)
	retry := time.NewTicker(every)
	defer retry.Stop()
	if err := cc.send(req); err != nil {
		return fmt.Errorf("send request: %w", err)
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case f := <-cc.in:
			if st, ok := f.(*Status); ok {
				if st.Error != ErrSuccess {
					return &RemoteError{Code: st.Error}
				}
				return nil
			}
		case now := <-retry.C:
			if now.After(deadline) {
				return fmt.Errorf("no response from server within %v: %w", timeout, ErrTimeout)
			}
			if err := cc.send(req); err != nil {
				return fmt.Errorf("send request: %w", err)
			}
		}
	}
}
