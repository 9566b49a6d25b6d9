// Command satquic moves one file over QUIC (quic-go): on one raw QUIC
// stream (-mode quic) or as an HTTP/3 GET or PUT (-mode http3).
//
//	satquic serve -root DIR [-listen :4433] [-mode quic|http3] [-qlog-dir DIR] [-keylog PATH] [-timeout DUR] [-q]
//	satquic get -server HOST:PORT -file NAME -out PATH [-mode quic|http3] [-qlog-dir DIR] [-keylog PATH] [-timeout DUR]
//	satquic put -server HOST:PORT -file LOCALPATH [-name REMOTE] [-mode quic|http3] [-qlog-dir DIR] [-keylog PATH] [-timeout DUR]
//	satquic qlog FILE...
//
// get and put print one JSON summary line on stdout on success; on failure
// they print one error line on stderr and exit 1 (2 for bad usage). qlog
// prints one JSON line per file: the file's summary (handshake, first
// byte, goodput, congestion window and RTT).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"satbed/clients/quic"
	"satbed/clients/quic/qlogsum"
	"satbed/internal/cli"
)

func main() {
	cli.Exit("satquic", run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = "usage: satquic serve|get|put|qlog [flags] (satquic CMD -h for flags)"

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) < 1 {
		return cli.UsageError{Err: errors.New(usage)}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], stderr)
	case "get", "put":
		return transfer(ctx, args[0], args[1:], stdout, stderr)
	case "qlog":
		return summarize(args[1:], stdout)
	}
	return cli.UsageError{Err: fmt.Errorf("unknown command %q; %s", args[0], usage)}
}

// common are the flags both ends share.
type common struct {
	mode, qlogDir, keyLog string
	timeout               time.Duration
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.mode, "mode", quic.ModeQUIC, "quic (one QUIC stream) or http3")
	fs.StringVar(&c.qlogDir, "qlog-dir", "", "write a qlog per connection into this directory")
	fs.StringVar(&c.keyLog, "keylog", "", "append TLS secrets to this file (SSLKEYLOGFILE format)")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "idle timeout (handshake and connection)")
}

func (c *common) check() error {
	if _, err := quic.ParseMode(c.mode); err != nil {
		return cli.UsageError{Err: fmt.Errorf("-%w", err)}
	}
	if c.timeout <= 0 {
		return cli.UsageError{Err: fmt.Errorf("-timeout %v: want a positive duration", c.timeout)}
	}
	if c.qlogDir != "" {
		if err := os.MkdirAll(c.qlogDir, 0o755); err != nil {
			return fmt.Errorf("-qlog-dir: %w", err)
		}
	}
	return nil
}

func (c *common) qlog() *quic.QlogDir {
	if c.qlogDir == "" {
		return nil
	}
	return &quic.QlogDir{Dir: c.qlogDir}
}

func serve(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var c common
	c.register(fs)
	root := fs.String("root", "", "directory to serve and to store uploads in (required)")
	listen := fs.String("listen", fmt.Sprintf(":%d", quic.Port), "UDP address to listen on")
	quiet := fs.Bool("q", false, "do not log transfers")
	if err := cli.ParseFlags(fs, args, stderr); err != nil {
		return err
	}
	if *root == "" {
		return cli.UsageError{Err: errors.New("serve: -root is required")}
	}
	if err := c.check(); err != nil {
		return err
	}
	keyLog, err := quic.OpenKeyLog(c.keyLog)
	if err != nil {
		return err
	}
	if keyLog != nil {
		defer keyLog.Close()
	}
	conn, err := net.ListenPacket("udp", *listen)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	defer conn.Close()
	srv := &quic.Server{Root: *root, Mode: c.mode, Timeout: c.timeout, Qlog: c.qlog()}
	if keyLog != nil {
		srv.KeyLog = keyLog
	}
	if !*quiet {
		srv.Log = log.New(stderr, "satquic: ", log.LstdFlags|log.LUTC)
		srv.Log.Printf("serving %s on %v (%s, congestion control %s)", *root, conn.LocalAddr(), c.mode, quic.CongestionControl)
	}
	return srv.Serve(ctx, conn)
}

func transfer(ctx context.Context, op string, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(op, flag.ContinueOnError)
	var c common
	c.register(fs)
	server := fs.String("server", "", "server HOST:PORT (required)")
	file := fs.String("file", "", "get: remote name; put: local path (required)")
	out := fs.String("out", "", "get: local output path (required)")
	name := fs.String("name", "", "put: remote name (default: base name of -file)")
	if err := cli.ParseFlags(fs, args, stderr); err != nil {
		return err
	}
	if *server == "" || *file == "" || (op == "get" && *out == "") {
		return cli.UsageError{Err: fmt.Errorf("%s: -server, -file%s are required", op, map[bool]string{true: " and -out", false: ""}[op == "get"])}
	}
	if err := c.check(); err != nil {
		return err
	}
	keyLog, err := quic.OpenKeyLog(c.keyLog)
	if err != nil {
		return err
	}
	cfg := quic.ClientConfig{Server: *server, Mode: c.mode, Timeout: c.timeout, Qlog: c.qlog()}
	if keyLog != nil {
		defer keyLog.Close()
		cfg.KeyLog = keyLog
	}
	var sum *quic.Summary
	if op == "get" {
		sum, err = quic.Get(ctx, cfg, *file, *out)
	} else {
		sum, err = quic.Put(ctx, cfg, *file, *name)
	}
	if err != nil {
		return err
	}
	b, err := json.Marshal(sum)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "%s\n", b)
	return err
}

// summarize prints each qlog's summary as one JSON line.
func summarize(files []string, stdout io.Writer) error {
	if len(files) == 0 {
		return cli.UsageError{Err: errors.New("qlog: give one or more qlog files")}
	}
	enc := json.NewEncoder(stdout)
	for _, path := range files {
		s, err := summarizeFile(path)
		if err != nil {
			return err
		}
		if err := enc.Encode(struct {
			File string `json:"file"`
			qlogsum.Summary
		}{path, s}); err != nil {
			return err
		}
	}
	return nil
}

func summarizeFile(path string) (qlogsum.Summary, error) {
	f, err := os.Open(path)
	if err != nil {
		return qlogsum.Summary{}, err
	}
	defer f.Close()
	s, err := qlogsum.Read(f)
	if err != nil {
		return s, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}
