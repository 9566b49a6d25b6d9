// Package quic moves one file over QUIC (quic-go): either on one raw QUIC
// stream (mode "quic") or as an HTTP/3 GET or PUT (mode "http3"), with a
// qlog per connection and a TLS key log for decrypting captures.
package quic

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"sync"
	"time"

	quicgo "github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/quic-go/qlogwriter"
)

// Port is the default UDP port of the server.
const Port = 4433

// Modes.
const (
	ModeQUIC  = "quic"
	ModeHTTP3 = "http3"
)

// alpnQUIC names the raw-stream protocol in the TLS handshake.
const alpnQUIC = "satquic"

// CongestionControl is what quic-go sends with: v0.65.0 builds its
// cubicSender with reno=true (NewReno growth, beta 0.7, HyStart slow start,
// initial window 32 packets) and offers no setting to change it.
const CongestionControl = "newreno"

// ParseMode checks a -mode value.
func ParseMode(s string) (string, error) {
	if s != ModeQUIC && s != ModeHTTP3 {
		return "", fmt.Errorf("mode %q: want quic or http3", s)
	}
	return s, nil
}

func alpn(mode string) string {
	if mode == ModeHTTP3 {
		return http3.NextProtoH3
	}
	return alpnQUIC
}

// quicConfig is both ends' transport configuration: idle is how long a
// silent peer is waited for, during the handshake as well, since a GEO
// round trip with a lost Initial takes longer than quic-go's 5 s default.
func quicConfig(idle time.Duration, tracer func(context.Context, bool, quicgo.ConnectionID) qlogwriter.Trace) *quicgo.Config {
	return &quicgo.Config{HandshakeIdleTimeout: idle, MaxIdleTimeout: idle, Tracer: tracer}
}

// serverTLS makes a self-signed certificate in memory: nothing to install
// or expire between runs, and the client does not verify it anyway.
func serverTLS(mode string, keyLog io.Writer) (*tls.Config, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, fmt.Errorf("certificate serial: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "satquic"},
		DNSNames:     []string{"satquic"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("self-sign certificate: %w", err)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		NextProtos:   []string{alpn(mode)},
		KeyLogWriter: keyLog,
	}, nil
}

// clientTLS skips verification (the server's certificate is made up at
// start); keyLog, if set, receives the secrets in SSLKEYLOGFILE format.
func clientTLS(mode string, keyLog io.Writer) *tls.Config {
	return &tls.Config{
		InsecureSkipVerify: true, //nolint:gosec // a test bed's throwaway certificate
		ServerName:         "satquic",
		NextProtos:         []string{alpn(mode)},
		KeyLogWriter:       keyLog,
	}
}

// OpenKeyLog opens an SSLKEYLOGFILE-format file for appending (several
// connections of a run share it); "" means no key log.
func OpenKeyLog(path string) (io.WriteCloser, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("key log: %w", err)
	}
	return f, nil
}

// QlogDir writes one qlog (JSON-SEQ, quic-go's format) per connection into
// a directory, named like quic-go's QLOGDIR files, and lets the caller wait
// until each is flushed to disk.
type QlogDir struct {
	Dir string

	wg    sync.WaitGroup
	mu    sync.Mutex
	files []string
	err   error
}

// Tracer is a quic.Config Tracer; nil when no directory is set.
func (q *QlogDir) Tracer() func(context.Context, bool, quicgo.ConnectionID) qlogwriter.Trace {
	if q == nil || q.Dir == "" {
		return nil
	}
	return q.trace
}

func (q *QlogDir) trace(_ context.Context, isClient bool, odcid quicgo.ConnectionID) qlogwriter.Trace {
	label := "server"
	if isClient {
		label = "client"
	}
	path := filepath.Join(q.Dir, fmt.Sprintf("%s_%s.sqlog", odcid, label))
	f, err := os.Create(path)
	q.mu.Lock()
	defer q.mu.Unlock()
	if err != nil {
		// A missing qlog must not fail the transfer; Err reports it.
		q.err = fmt.Errorf("qlog: %w", err)
		return nil
	}
	q.files = append(q.files, path)
	q.wg.Add(1)
	w := &flushCloser{Writer: bufio.NewWriterSize(f, 256<<10), f: f, done: q.wg.Done}
	seq := qlogwriter.NewConnectionFileSeq(w, isClient, odcid)
	go seq.Run()
	return seq
}

// Files are the qlogs started so far.
func (q *QlogDir) Files() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]string(nil), q.files...)
}

// Err is the first failure to create a qlog.
func (q *QlogDir) Err() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.err
}

// Wait returns once every qlog started so far is flushed and closed (quic-go
// closes a trace after its connection ends), or with ctx's error.
func (q *QlogDir) Wait(ctx context.Context) error {
	if q == nil {
		return nil
	}
	done := make(chan struct{})
	go func() {
		q.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("qlog not flushed: %w", ctx.Err())
	}
}

type flushCloser struct {
	*bufio.Writer
	f    *os.File
	done func()
	once sync.Once
}

func (w *flushCloser) Close() error {
	err := w.Flush()
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	w.once.Do(w.done)
	return err
}
