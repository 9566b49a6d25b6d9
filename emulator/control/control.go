// Package control serves satemu's control socket: a unix stream socket
// carrying newline-delimited JSON requests, each answered by one JSON line.
//
//	{"op":"get"}                                   -> {"ok":true,"config":{...}}
//	{"op":"set","dir":"a_to_b","params":{...}}     -> {"ok":true} | {"ok":false,"error":"..."}
//	{"op":"stats"}                                 -> {"ok":true,"stats":{...}}
//	{"op":"clock"}                                 -> {"ok":true,"clock_started_s":12.3}
package control

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
)

// Handler does the work behind the operations.
type Handler interface {
	Config() any
	Set(dir string, params json.RawMessage) error
	Stats() any
	// StartClock starts the outage and profile schedules now; it returns
	// the moment in seconds since the emulator started.
	StartClock() float64
}

// Request is one line from a client.
type Request struct {
	Op     string          `json:"op"`
	Dir    string          `json:"dir,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
}

// Response is one line to a client.
type Response struct {
	OK     bool    `json:"ok"`
	Error  string  `json:"error,omitempty"`
	Config any     `json:"config,omitempty"`
	Stats  any     `json:"stats,omitempty"`
	ClockS float64 `json:"clock_started_s,omitempty"`
}

const maxLine = 1 << 20

// ParseRequest decodes and checks one request line.
func ParseRequest(line []byte) (Request, error) {
	var r Request
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return r, fmt.Errorf("bad request: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return r, errors.New("bad request: trailing data")
	}
	switch r.Op {
	case "get", "stats", "clock":
	case "set":
		if len(r.Params) == 0 || r.Params[0] != '{' {
			return r, errors.New("set: params must be a JSON object")
		}
	default:
		return r, fmt.Errorf("unknown op %q (want get, set, stats or clock)", r.Op)
	}
	return r, nil
}

// Handle answers one request line.
func Handle(h Handler, line []byte) Response {
	r, err := ParseRequest(line)
	if err != nil {
		return Response{Error: err.Error()}
	}
	switch r.Op {
	case "get":
		return Response{OK: true, Config: h.Config()}
	case "stats":
		return Response{OK: true, Stats: h.Stats()}
	case "clock":
		return Response{OK: true, ClockS: h.StartClock()}
	default:
		if err := h.Set(r.Dir, r.Params); err != nil {
			return Response{Error: err.Error()}
		}
		return Response{OK: true}
	}
}

// Server listens on a unix socket path.
type Server struct {
	ln   net.Listener
	path string
	h    Handler
}

// Listen creates the socket (replacing a stale file at path), readable and
// writable by its owner only whatever the umask: whoever can connect can
// reconfigure the link. It is bound under a temporary name, restricted, then
// renamed into place, so it is never reachable with a wider mode.
func Listen(path string, h Handler) (*Server, error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		_ = os.Remove(path)
	}
	tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
	_ = os.Remove(tmp)
	ln, err := net.Listen("unix", tmp)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false) // Serve removes the final name
	if err := os.Chmod(tmp, 0o600); err != nil {
		ln.Close()
		_ = os.Remove(tmp)
		return nil, fmt.Errorf("control socket: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		ln.Close()
		_ = os.Remove(tmp)
		return nil, fmt.Errorf("control socket: %w", err)
	}
	return &Server{ln: ln, path: path, h: h}, nil
}

// Serve accepts clients until ctx ends, then closes and removes the socket.
func (s *Server) Serve(ctx context.Context) {
	var wg sync.WaitGroup
	conns := map[net.Conn]struct{}{}
	var mu sync.Mutex
	go func() {
		<-ctx.Done()
		s.ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
	}()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			break
		}
		mu.Lock()
		conns[c] = struct{}{}
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.serveConn(c)
			mu.Lock()
			delete(conns, c)
			mu.Unlock()
			c.Close()
		}()
	}
	wg.Wait()
	_ = os.Remove(s.path)
}

func (s *Server) serveConn(c net.Conn) {
	sc := bufio.NewScanner(c)
	sc.Buffer(make([]byte, 4096), maxLine)
	enc := json.NewEncoder(c)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		if err := enc.Encode(Handle(s.h, line)); err != nil {
			return
		}
	}
}
