// Command trafficgen is satbed's background-traffic generator.
//
//	trafficgen serve  -listen ADDR:PORT [-records FILE] [-seed N] [-q]
//	trafficgen client -server ADDR:PORT [-records FILE] [-duration D] [-seed N]
//	                  [-long N] [-arrival none|poisson|constant] [-rate R] [-concurrent K]
//	                  [-sizes SPEC] [-upload-fraction F] [-client-id N] [-tag TEXT]
//
// Both run until SIGTERM/SIGINT (the client also until -duration), then stop
// every flow, write one JSON record per flow and a summary line to -records,
// print the summary on stdout and exit 0. Bad flags: one line on stderr,
// exit 2; a failure while running: one line, exit 1.
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

	"satbed/clients/trafficgen"
	"satbed/internal/cli"
)

const usage = "usage: trafficgen serve|client [flags] (trafficgen CMD -h for flags)"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	cli.Exit("trafficgen", run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) < 1 {
		return cli.UsageError{Err: errors.New(usage)}
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], stdout, stderr)
	case "client":
		return client(ctx, args[1:], stdout, stderr)
	}
	return cli.UsageError{Err: fmt.Errorf("unknown command %q; %s", args[0], usage)}
}

// openRecords opens the per-flow records file for appending; with no path
// (or "-") there is none: a nil writer and a close that does nothing.
func openRecords(path string) (io.Writer, func(), error) {
	if path == "" || path == "-" {
		return nil, func() {}, nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("records: %w", err)
	}
	return f, func() { f.Close() }, nil
}

func printSummary(stdout io.Writer, s *trafficgen.Summary) error {
	line, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("summary: %w", err)
	}
	_, err = fmt.Fprintf(stdout, "%s\n", line)
	return err
}

func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	listen := fs.String("listen", ":5301", "TCP address to listen on")
	records := fs.String("records", "", "append one JSON line per flow and a summary to this file")
	seed := fs.Uint64("seed", 1, "seed of the payload bytes")
	quiet := fs.Bool("q", false, "do not log protocol errors")
	if err := cli.ParseFlags(fs, args, stderr); err != nil {
		return err
	}
	w, closeRecords, err := openRecords(*records)
	if err != nil {
		return err
	}
	defer closeRecords()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	rec := trafficgen.NewRecorder(w)
	srv := &trafficgen.Server{Records: rec, Payload: trafficgen.NewPayload(*seed)}
	if !*quiet {
		srv.Log = log.New(stderr, "trafficgen: ", log.LstdFlags|log.LUTC)
	}
	sum := &trafficgen.Summary{Side: "server", Start: float64(time.Now().UnixNano()) / 1e9,
		Config: map[string]any{"listen": ln.Addr().String(), "seed": *seed}}
	serr := srv.Serve(ctx, ln.(*net.TCPListener))
	rec.Summary(sum)
	if err := printSummary(stdout, sum); err != nil {
		return err
	}
	if serr != nil {
		return serr
	}
	return rec.Err()
}

func client(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("client", flag.ContinueOnError)
	var cfg trafficgen.ClientConfig
	fs.StringVar(&cfg.Server, "server", "", "server ADDR:PORT (required)")
	records := fs.String("records", "", "append one JSON line per flow and a summary to this file")
	clientID := fs.Uint("client-id", 0, "client id carried in each request (tells clients apart at a shared server)")
	fs.StringVar(&cfg.Tag, "tag", "", "free text copied into every record")
	fs.IntVar(&cfg.Long, "long", 0, "long-lived flows, open for the whole run")
	fs.StringVar(&cfg.Arrival, "arrival", "none", "finite flows: none, poisson (-rate) or constant (-concurrent)")
	fs.Float64Var(&cfg.Rate, "rate", 0, "poisson: mean arrivals per second; constant: the first -concurrent flows start as Poisson arrivals at this rate (0: all at once)")
	fs.IntVar(&cfg.Concurrent, "concurrent", 0, "constant: finite flows kept open at all times")
	fs.IntVar(&cfg.MaxActive, "max-active", 2000, "poisson: skip (and count) arrivals beyond this many active flows")
	sizes := fs.String("sizes", "", "finite flow sizes: BYTES, fixed:BYTES, exp:MEAN, pareto:SHAPE:MIN[:MAX], table:PATH")
	fs.Float64Var(&cfg.UploadFraction, "upload-fraction", 0, "share of flows that are uploads (client sends)")
	fs.DurationVar(&cfg.Duration, "duration", 0, "stop after this long (0: at SIGTERM/SIGINT)")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of every random draw (arrivals, sizes, directions, payload)")
	fs.DurationVar(&cfg.ConnectTimeout, "connect-timeout", 30*time.Second, "give up a connection attempt after this long")
	if err := cli.ParseFlags(fs, args, stderr); err != nil {
		return err
	}
	if *clientID > 1<<32-1 {
		return cli.UsageError{Err: fmt.Errorf("client: -client-id %d out of range", *clientID)}
	}
	cfg.ClientID = uint32(*clientID)
	cfg.Payload = trafficgen.NewPayload(cfg.Seed)
	if *sizes != "" {
		s, err := trafficgen.ParseSizes(*sizes)
		if err != nil {
			return cli.UsageError{Err: fmt.Errorf("client: %w", err)}
		}
		cfg.Sizes = s
	}
	if err := cfg.Validate(); err != nil {
		return cli.UsageError{Err: fmt.Errorf("client: %w", err)}
	}
	w, closeRecords, err := openRecords(*records)
	if err != nil {
		return err
	}
	defer closeRecords()
	sum, err := trafficgen.Run(ctx, cfg, trafficgen.NewRecorder(w))
	if sum != nil {
		if perr := printSummary(stdout, sum); perr != nil && err == nil {
			err = perr
		}
	}
	return err
}
