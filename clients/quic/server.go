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
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	quicgo "github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// Server serves the files of Root and stores what is put there.
type Server struct {
	Root    string
	Mode    string        // ModeQUIC or ModeHTTP3
	Timeout time.Duration // idle timeout of a connection
	Qlog    *QlogDir      // nil: no qlogs
	KeyLog  io.Writer     // nil: no key log
	Log     *log.Logger   // nil: silent
}

// Serve answers on conn until ctx is cancelled, then waits (bounded) for
// the connections' qlogs to reach the disk.
func (s *Server) Serve(ctx context.Context, conn net.PacketConn) error {
	if _, err := ParseMode(s.Mode); err != nil {
		return err
	}
	tlsConf, err := serverTLS(s.Mode, s.KeyLog)
	if err != nil {
		return err
	}
	cfg := quicConfig(s.timeout(), s.Qlog.Tracer())
	var serveErr error
	if s.Mode == ModeHTTP3 {
		serveErr = s.serveHTTP3(ctx, conn, tlsConf, cfg)
	} else {
		serveErr = s.serveQUIC(ctx, conn, tlsConf, cfg)
	}
	flush, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Qlog.Wait(flush); err != nil {
		s.logf("%v", err)
	}
	return serveErr
}

func (s *Server) timeout() time.Duration {
	if s.Timeout <= 0 {
		return 30 * time.Second
	}
	return s.Timeout
}

func (s *Server) logf(format string, args ...any) {
	if s.Log != nil {
		s.Log.Printf(format, args...)
	}
}

func (s *Server) serveQUIC(ctx context.Context, conn net.PacketConn, tlsConf *tls.Config, cfg *quicgo.Config) error {
	tr := &quicgo.Transport{Conn: conn}
	ln, err := tr.Listen(tlsConf, cfg)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	var wg sync.WaitGroup
	defer func() {
		// Closing the transport closes every connection, which ends their
		// handlers and their qlogs.
		tr.Close()
		wg.Wait()
	}()
	for {
		c, err := ln.Accept(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("accept: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.handleConn(ctx, c)
		}()
	}
}

func (s *Server) handleConn(ctx context.Context, c *quicgo.Conn) {
	for {
		str, err := c.AcceptStream(ctx)
		if err != nil {
			return // the client closed the connection, or shutdown
		}
		start := time.Now()
		msg, err := s.handleStream(str)
		if err != nil {
			// The ERR line, where one could be sent, is on its way: the
			// stream ends with a FIN, not a reset that could discard it.
			s.logf("%v: %v", c.RemoteAddr(), err)
			continue
		}
		st := c.ConnectionStats()
		s.logf("%v: %s in %.3f s (srtt %.1f ms, cwnd %d B, %d packets lost)", c.RemoteAddr(), msg,
			time.Since(start).Seconds(), float64(st.SmoothedRTT)/float64(time.Millisecond), st.CongestionWindow, st.PacketsLost)
	}
}

// handleStream serves one request; a refused one is answered with ERR.
func (s *Server) handleStream(str *quicgo.Stream) (string, error) {
	defer str.Close()
	br := bufio.NewReaderSize(str, 64<<10)
	line, err := readLine(br)
	if err != nil {
		return "", fmt.Errorf("request: %w", err)
	}
	req, err := ParseRequest(line)
	if err != nil {
		_, _ = io.WriteString(str, ErrLine(err))
		return "", err
	}
	if req.Op == "GET" {
		f, size, err := s.open(req.Name)
		if err != nil {
			_, _ = io.WriteString(str, ErrLine(err))
			return "", fmt.Errorf("GET %s: %w", req.Name, err)
		}
		defer f.Close()
		if _, err := io.WriteString(str, OKLine(size, "")); err != nil {
			return "", fmt.Errorf("GET %s: %w", req.Name, err)
		}
		n, err := io.Copy(str, f)
		if err != nil {
			return "", fmt.Errorf("GET %s: %w", req.Name, err)
		}
		return fmt.Sprintf("sent %s, %d bytes", req.Name, n), nil
	}
	n, digest, err := s.receiveFile(io.LimitReader(br, req.Size), req.Name)
	if err == nil && n != req.Size {
		err = fmt.Errorf("stream ended after %d of %d bytes", n, req.Size)
	}
	if err != nil {
		_, _ = io.WriteString(str, ErrLine(err))
		// Stop the sender: the rest of its file has nowhere to go.
		str.CancelRead(1)
		return "", fmt.Errorf("PUT %s: %w", req.Name, err)
	}
	if _, err := io.WriteString(str, OKLine(n, digest)); err != nil {
		return "", fmt.Errorf("PUT %s: reply: %w", req.Name, err)
	}
	return fmt.Sprintf("received %s, %d bytes, sha256 %s", req.Name, n, digest), nil
}

// open opens a served file and says its size.
func (s *Server) open(name string) (*os.File, int64, error) {
	f, err := os.Open(filepath.Join(s.Root, name))
	if err != nil {
		return nil, 0, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, 0, fmt.Errorf("%s: not a regular file", name)
	}
	return f, st.Size(), nil
}

// receiveFile writes r to a temporary copy beside the target, closes it,
// hashes what it wrote and renames it into place.
func (s *Server) receiveFile(r io.Reader, name string) (int64, string, error) {
	tmp, err := os.CreateTemp(s.Root, "."+name+".*")
	if err != nil {
		return 0, "", err
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	n, err := io.Copy(tmp, r)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return n, "", err
	}
	digest, err := FileSHA256(tmp.Name())
	if err != nil {
		return n, "", err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return n, "", err
	}
	if err := os.Rename(tmp.Name(), filepath.Join(s.Root, name)); err != nil {
		return n, "", err
	}
	return n, digest, nil
}

func (s *Server) serveHTTP3(ctx context.Context, conn net.PacketConn, tlsConf *tls.Config, cfg *quicgo.Config) error {
	srv := &http3.Server{TLSConfig: tlsConf, QUICConfig: cfg, Handler: http.HandlerFunc(s.serveHTTP)}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(conn) }()
	select {
	case err := <-done:
		return fmt.Errorf("http3: %w", err)
	case <-ctx.Done():
		_ = srv.Close()
		<-done
		return nil
	}
}

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/")
	if err := ValidName(name); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	start := time.Now()
	switch r.Method {
	case http.MethodGet:
		f, size, err := s.open(name)
		if err != nil {
			s.logf("%s: GET %s: %v", r.RemoteAddr, name, err)
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		defer f.Close()
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		w.Header().Set("Content-Type", "application/octet-stream")
		w.WriteHeader(http.StatusOK)
		n, err := io.Copy(w, f)
		if err != nil {
			s.logf("%s: GET %s: %v", r.RemoteAddr, name, err)
			return
		}
		s.logf("%s: sent %s, %d bytes in %.3f s", r.RemoteAddr, name, n, time.Since(start).Seconds())
	case http.MethodPut:
		n, digest, err := s.receiveFile(r.Body, name)
		if err == nil && r.ContentLength >= 0 && n != r.ContentLength {
			err = fmt.Errorf("body ended after %d of %d bytes", n, r.ContentLength)
		}
		if err != nil {
			s.logf("%s: PUT %s: %v", r.RemoteAddr, name, err)
			http.Error(w, ErrLine(err), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, OKLine(n, digest))
		s.logf("%s: received %s, %d bytes, sha256 %s in %.3f s", r.RemoteAddr, name, n, digest, time.Since(start).Seconds())
	default:
		w.Header().Set("Allow", "GET, PUT")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

// readLine reads up to and including '\n', at most MaxLine bytes.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		b, err := br.ReadSlice('\n')
		line = append(line, b...)
		if len(line) > MaxLine+1 {
			return nil, fmt.Errorf("line longer than %d bytes", MaxLine)
		}
		if err == nil {
			return line, nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
}

// FileSHA256 is the hex SHA-256 of a file's contents.
func FileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
