package saratoga

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log"
	"net"
	"os"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Server serves one directory over Saratoga: REQUEST get sends a file,
// REQUEST put receives one. Each transaction runs in its own goroutine;
// all share the listening socket.
type Server struct {
	Root           string
	RateBPS        int64         // pacing rate of each get transfer
	Burst          time.Duration // pacer token-bucket depth; 0 means DefaultBurst
	Descriptor     Descriptor
	AutoDescriptor bool // narrowest descriptor that fits each file
	Checksum       ChecksumType
	Timeout        time.Duration // per-session inactivity timeout
	MTU            int
	Frame          int           // largest UDP payload; 0 means MTU - FrameMargin
	Linger         time.Duration // how long a finished put keeps answering
	MaxSessions    int           // concurrent transactions; 0 means 64
	Log            *log.Logger   // nil discards
	// BeaconTo, if set, receives a BEACON every BeaconEvery (default 10 s).
	BeaconTo    []net.Addr
	BeaconEvery time.Duration

	malformed atomic.Uint64
	sessions  atomic.Uint64
	failed    atomic.Uint64
	beacons   atomic.Uint64
}

// ServerStats are cumulative server counters.
type ServerStats struct {
	Malformed, Sessions, Failed, Beacons uint64
}

// Stats returns the server's counters.
func (s *Server) Stats() ServerStats {
	return ServerStats{Malformed: s.malformed.Load(), Sessions: s.sessions.Load(), Failed: s.failed.Load(),
		Beacons: s.beacons.Load()}
}

type sessionKey struct {
	addr string
	id   uint32
}

type serverSession struct {
	in       chan any
	done     bool
	finished time.Time
	// refusal is the error code a REQUEST was refused with, re-sent if
	// the client repeats the REQUEST because the refusal was lost.
	refusal ErrorCode
}

// recentlyDone is how long a finished transaction id is remembered so a
// REQUEST still in flight does not restart it.
const recentlyDone = time.Minute

func (s *Server) logf(format string, a ...any) {
	if s.Log != nil {
		s.Log.Printf(format, a...)
	}
}

// Serve handles transactions arriving on conn until ctx is cancelled, then
// waits for running transfers to stop. It does not close conn.
func (s *Server) Serve(ctx context.Context, conn net.PacketConn) error {
	if s.MTU == 0 {
		s.MTU = DefaultMTU
	}
	s.Frame = FrameFor(s.MTU, s.Frame)
	if s.Timeout <= 0 {
		s.Timeout = 30 * time.Second
	}
	if s.MaxSessions <= 0 {
		s.MaxSessions = 64
	}
	if s.RateBPS <= 0 {
		return errors.New("server: rate must be positive")
	}
	root, err := os.OpenRoot(s.Root)
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	defer root.Close()

	var (
		mu       sync.Mutex
		sessions = map[sessionKey]*serverSession{}
		wg       sync.WaitGroup
	)
	stop := context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(time.Now()) })
	defer stop()

	if len(s.BeaconTo) > 0 {
		every := s.BeaconEvery
		if every <= 0 {
			every = 10 * time.Second
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			beaconLoop(ctx, conn, s.BeaconTo, every, s.Root)
		}()
	}
	dispatch := func(addr net.Addr, f any) {
		if b, ok := f.(*Beacon); ok {
			s.beacons.Add(1)
			s.logf("beacon from %v: %q, descriptor %d, tx-willing %d, rx-willing %d", addr, b.EID, b.Descriptor.Bits(), b.TxWilling, b.RxWilling)
			return
		}
		key := sessionKey{addr.String(), frameSession(f)}
		mu.Lock()
		sess := sessions[key]
		req, isReq := f.(*Request)
		if sess == nil && isReq {
			now := time.Now()
			active := 0
			for k, v := range sessions {
				if v.done && now.Sub(v.finished) > recentlyDone {
					delete(sessions, k)
				} else if !v.done {
					active++
				}
			}
			if active >= s.MaxSessions {
				// Not remembered: a retry may find a free slot.
				mu.Unlock()
				s.logf("session %08x from %v refused: %d sessions active", req.Session, addr, active)
				refuse(conn, addr, req, ErrCantSend)
				return
			}
			sess = &serverSession{in: make(chan any, 8192)}
			sessions[key] = sess
			mu.Unlock()
			s.sessions.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				rf := func(code ErrorCode) {
					mu.Lock()
					sess.refusal = code
					mu.Unlock()
					refuse(conn, addr, req, code)
				}
				err := s.transaction(ctx, root, conn, addr, req, sess.in, rf)
				if err != nil {
					s.failed.Add(1)
				}
				mu.Lock()
				sess.done, sess.finished = true, time.Now()
				mu.Unlock()
			}()
			return
		}
		var refusal ErrorCode
		if sess != nil {
			refusal = sess.refusal
		}
		mu.Unlock()
		if sess != nil && isReq && refusal != ErrSuccess {
			refuse(conn, addr, req, refusal)
			return
		}
		if sess == nil || sess.done {
			return
		}
		select {
		case sess.in <- f:
		default: // overrun: same as loss
		}
	}
	err = readLoop(conn, &s.malformed, dispatch)
	wg.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("server: %w", err)
}

// refuse answers a REQUEST with an error STATUS.
func refuse(conn net.PacketConn, addr net.Addr, req *Request, code ErrorCode) {
	st := Status{Descriptor: req.Descriptor, Session: req.Session, Error: code, MetadataMissing: true}
	if b, err := st.Append(nil); err == nil {
		_, _ = conn.WriteTo(b, addr)
	}
}

// safeName validates a requested path lexically: it must be relative, use
// '/' separators and contain no '..' element. Symlinks that leave the root
// are caught later by os.Root.
func safeName(p string) (string, bool) {
	if p == "" || strings.HasPrefix(p, "/") || strings.Contains(p, "\\") {
		return "", false
	}
	for _, el := range strings.Split(p, "/") {
		if el == ".." {
			return "", false
		}
	}
	c := path.Clean(p)
	if c == "." {
		return "", false
	}
	return c, true
}

// openErrorCode maps a failure to open a path in the root to a STATUS code.
func openErrorCode(err error) ErrorCode {
	if errors.Is(err, fs.ErrNotExist) {
		return ErrFileNotFound
	}
	return ErrAccessDenied // includes "path escapes from parent" (symlinks)
}

func (s *Server) transaction(ctx context.Context, root *os.Root, conn net.PacketConn, addr net.Addr, req *Request, in <-chan any, rf func(ErrorCode)) error {
	name, ok := safeName(req.Path)
	if !ok {
		s.logf("session %08x from %v: %q refused: path outside root", req.Session, addr, req.Path)
		rf(ErrAccessDenied)
		return fmt.Errorf("path %q outside root", req.Path)
	}
	out := newBatchSender(conn, addr)
	var (
		sum *Summary
		err error
	)
	start := time.Now()
	switch req.Type {
	case ReqGet:
		sum, err = s.serveGet(ctx, root, name, req, out.sendBatch, in, rf)
	case ReqPut:
		sum, err = s.servePut(ctx, root, name, req, out.send, in, rf)
	default:
		rf(ErrBadRequest)
		err = fmt.Errorf("request type %d not supported", req.Type)
	}
	if err != nil {
		s.logf("session %08x from %v: %q: %v", req.Session, addr, req.Path, err)
		return err
	}
	b, _ := json.Marshal(sum)
	s.logf("session %08x from %v done in %v: %s", req.Session, addr, time.Since(start).Round(time.Millisecond), b)
	return nil
}

func (s *Server) serveGet(ctx context.Context, root *os.Root, name string, req *Request, send func([][]byte), in <-chan any, rf func(ErrorCode)) (*Summary, error) {
	f, err := root.Open(name)
	if err != nil {
		rf(openErrorCode(err))
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		rf(ErrUnspecified)
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		rf(ErrBadRequest)
		return nil, fmt.Errorf("%s is not a regular file", name)
	}
	size := uint64(fi.Size())
	desc := s.Descriptor
	if s.AutoDescriptor {
		desc = DescriptorFor(size)
	}
	if size > desc.Max() {
		rf(ErrFileTooBig)
		return nil, fmt.Errorf("%d bytes do not fit a %d-bit descriptor", size, desc.Bits())
	}
	ctime := changeTime(fi)
	meta := &Metadata{Descriptor: desc, ChecksumType: s.Checksum, Session: req.Session,
		Dirent: DirEnt{Descriptor: desc, Size: size, Mtime: since2000(fi.ModTime()), Ctime: since2000(ctime), Path: name}}
	snd, err := newSender(senderConfig{Session: req.Session, Descriptor: desc, RateBPS: s.RateBPS, Burst: s.Burst, Frame: s.Frame, Timeout: s.Timeout,
		LateChecksum: func() ([]byte, error) { return ChecksumOf(f, size, s.Checksum) }},
		f, size, meta, send, in)
	if err != nil {
		rf(ErrUnspecified)
		return nil, err
	}
	start := time.Now()
	st, err := snd.run(ctx)
	if err != nil {
		return nil, err
	}
	sum := &Summary{Op: "serve-get", File: name, Bytes: size, RateBPS: s.RateBPS, Descriptor: desc.Bits(),
		Checksum: s.Checksum.String(), ChecksumOK: true}
	sum.fill(st, time.Since(start))
	return sum, nil
}

func (s *Server) servePut(ctx context.Context, root *os.Root, name string, req *Request, send func([]byte) error, in <-chan any, rf func(ErrorCode)) (*Summary, error) {
	if fi, err := root.Lstat(name); err == nil && !fi.Mode().IsRegular() {
		// Never write through a symlink or over a directory.
		rf(ErrAccessDenied)
		return nil, fmt.Errorf("%s exists and is not a regular file", name)
	}
	dir, base := path.Split(name)
	tmp := fmt.Sprintf("%s.%s.saratoga-%08x.part", dir, base, req.Session)
	f, err := root.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		rf(openErrorCode(err))
		return nil, err
	}
	keep := false
	defer func() {
		f.Close()
		if !keep {
			_ = root.Remove(tmp)
		}
	}()
	desc := req.Descriptor
	// The file is moved into place as soon as it verifies, before the
	// final STATUS tells the client it is done.
	commit := func() error {
		if err := f.Sync(); err != nil {
			return err
		}
		if err := root.Rename(tmp, name); err != nil {
			return fmt.Errorf("rename into place: %w", err)
		}
		keep = true
		return nil
	}
	rcv := newReceiver(receiverConfig{Session: req.Session, Descriptor: desc, Frame: s.Frame, Timeout: s.Timeout, Linger: s.Linger, OnComplete: commit},
		f, send, in)
	// Accept: an empty STATUS tells the client to start sending.
	rcv.sendStatus(nil, ErrSuccess)
	start := time.Now()
	st, meta, err := rcv.run(ctx)
	if err != nil {
		return nil, err
	}
	sum := &Summary{Op: "serve-put", File: name, Bytes: meta.Dirent.Size, Descriptor: meta.Descriptor.Bits(),
		Checksum: meta.ChecksumType.String(), ChecksumOK: rcv.checksumOK}
	sum.fill(st, rcv.completedAt.Sub(start))
	return sum, nil
}
