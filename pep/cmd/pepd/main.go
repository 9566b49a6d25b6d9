// Command pepd is satbed's transparent split-TCP PEP daemon. It is
// normally started by pep/adapters/pepd inside a PEP node's network
// namespace, after the adapter has set up TPROXY interception.
//
// Flags default to the SATBED_* environment of the PEP adapter contract
// (see pep/CONTRACT.md). Bad options print one line and exit 2.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"satbed/pep/access"
	"satbed/pep/options"
	"satbed/pep/server"
	"satbed/pep/tune"
	"satbed/pep/wanrate"
)

type config struct {
	opts       options.Options
	rateBps    int64
	rttMs      float64
	ber        float64 // the link's bit-error rate hint (SATBED_BER)
	stateDir   string
	role       string
	name       string
	check      bool
	ccFile     string
	cpuProfile string
	// worker/workers: set (workers > 0) when a supervising pepd started
	// this process as worker number worker of workers.
	worker, workers int
	connLog         string // connection log path ("" = in stateDir)
	wanIf           string // the PEP's WAN port (wan=rate sends its frames there)
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// parseArgs turns flags and environment into a config; every error is a
// single line fit for the adapter to pass on.
func parseArgs(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("pepd", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	optStr := fs.String("opts", os.Getenv("SATBED_PEP_OPTS"), "space-separated key=value options")
	rate := fs.String("rate-bps", envOr("SATBED_RATE_BPS", "0"), "bottleneck rate in bit/s (WAN buffer sizing)")
	rtt := fs.String("rtt-ms", envOr("SATBED_RTT_MS", "0"), "round-trip time in ms (WAN buffer sizing)")
	ber := fs.String("ber", envOr("SATBED_BER", "0"), "the link's bit-error rate (wan=rate: data frame size)")
	fs.StringVar(&c.stateDir, "state-dir", envOr("SATBED_STATE_DIR", "."), "directory for stats.json, conns.jsonl, pepd.ready")
	fs.StringVar(&c.role, "role", os.Getenv("SATBED_PEP_ROLE"), "a or b (recorded in stats)")
	fs.StringVar(&c.name, "name", "pepd", "name reported in stats")
	fs.BoolVar(&c.check, "check", false, "validate options, print the resolved configuration and exit")
	fs.StringVar(&c.ccFile, "cc-file", tune.CCProcFile, "where the kernel lists available congestion controls")
	fs.StringVar(&c.cpuProfile, "cpuprofile", os.Getenv("PEPD_CPUPROFILE"), "write a CPU profile to this file (or pepd-PID.prof in this directory) until exit")
	workerSpec := fs.String("worker", "", "internal: run as worker I/N of a supervising pepd")
	fs.StringVar(&c.wanIf, "wan-if", os.Getenv("SATBED_PEP_WAN"), "the PEP's WAN port (wan=rate)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, fmt.Errorf("usage: pepd [-opts 'k=v ...'] [-rate-bps N] [-rtt-ms N] [-state-dir DIR] [-role a|b] [-check]; options: %s",
				strings.Join(options.Keys(), " "))
		}
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	var err error
	if c.rateBps, err = strconv.ParseInt(*rate, 10, 64); err != nil || c.rateBps < 0 {
		return c, fmt.Errorf("rate %q: want bit/s as a non-negative integer", *rate)
	}
	if c.rttMs, err = strconv.ParseFloat(*rtt, 64); err != nil || c.rttMs < 0 || c.rttMs > 1e6 {
		return c, fmt.Errorf("rtt %q: want milliseconds as a non-negative number", *rtt)
	}
	if c.ber, err = strconv.ParseFloat(*ber, 64); err != nil || !(c.ber >= 0 && c.ber < 1) {
		return c, fmt.Errorf("ber %q: want a bit-error rate in [0, 1)", *ber)
	}
	if c.role != "" && c.role != "a" && c.role != "b" {
		return c, fmt.Errorf("role %q: want a or b", c.role)
	}
	if c.opts, err = options.Parse(*optStr); err != nil {
		return c, err
	}
	if c.opts.Wan == options.WanRate && c.wanIf == "" {
		return c, fmt.Errorf("wan=rate: no WAN port named (SATBED_PEP_WAN or -wan-if)")
	}
	if *workerSpec != "" {
		if c.worker, c.workers, err = parseWorker(*workerSpec); err != nil {
			return c, err
		}
		// The supervisor's state dir holds the shared connection log and
		// one directory per worker for its ready and stats files.
		c.connLog = filepath.Join(c.stateDir, server.ConnsFile)
		c.stateDir = workerDir(c.stateDir, c.worker)
		c.opts.MaxConns = workerShare(c.opts.MaxConns, c.workers)
	}
	avail, err := tune.AvailableCC(c.ccFile)
	if err != nil {
		return c, err
	}
	for _, cc := range []string{c.opts.CC, c.opts.LanCC} {
		if err := tune.CheckCC(cc, avail); err != nil {
			return c, err
		}
	}
	return c, nil
}

// legs derives the socket options of the two legs. Only the WAN leg gets
// a BDP-sized buffer: the LAN side has a tiny RTT and autotunes well.
func legs(c config) (wan, lan tune.Leg) {
	o := c.opts
	wan = tune.Leg{CC: o.CC, MSS: o.MSS, NoDelay: o.NoDelay, QuickAck: o.QuickAck, Buf: o.WanBuf, KeepAlive: o.KeepAlive}
	if wan.Buf == 0 {
		wan.Buf = tune.BDPBuffer(c.rateBps, c.rttMs, o.BufferFactor)
	}
	if o.BufferPackets > 0 {
		// The WAN send queue must be able to take the whole access-node
		// buffer (B packets) whatever the BDP rule says, or the socket,
		// not B, would bound it; 4x covers the kernel's per-segment
		// overhead (ports without scatter-gather: one buffer per segment).
		wan.Buf = max(wan.Buf, 4*o.BufferPackets*access.DefaultSegment)
	}
	wan.RTOMax = o.WanRTOMax
	lan = tune.Leg{CC: o.LanCC, NoDelay: o.NoDelay, QuickAck: o.QuickAck, Buf: o.LanBuf, KeepAlive: o.KeepAlive}
	return wan, lan
}

// rateConfig is the rate-based WAN leg's configuration (nil with wan=tcp).
// The link's rate and RTT are hints: the tunnel measures the round trip
// and, with wan_adapt, follows the rate.
func rateConfig(c config) *wanrate.Config {
	if c.opts.Wan != options.WanRate {
		return nil
	}
	rate := c.opts.WanRate
	if rate == 0 {
		rate = c.rateBps
	}
	giveUp := c.opts.WanGiveUp
	if giveUp == 0 {
		giveUp = -1 // never
	}
	return &wanrate.Config{RateBPS: rate, RTT: time.Duration(c.rttMs * float64(time.Millisecond)),
		Window: c.opts.WanWindow, Adapt: c.opts.WanAdapt, PeerTimeout: giveUp,
		BER: c.ber, FrameBytes: c.opts.WanFrame}
}

func main() {
	c, err := parseArgs(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "pepd: %v\n", err)
		os.Exit(2)
	}
	wan, lan := legs(c)
	limit, limitErr := raiseFileLimit(c.opts.MaxConns, "/proc/sys/fs/nr_open")
	n := c.workers
	if n == 0 {
		n = workerCount(c.opts.Workers, c.opts.MaxConns, limit)
	}
	if c.check {
		fmt.Printf("ok ports=%d,%d wan_buf=%d lan_buf=%d cc=%q lan_cc=%q workers=%d wan=%s\n",
			c.opts.Port, c.opts.Port+1, wan.Buf, lan.Buf, wan.CC, lan.CC, n, c.opts.Wan)
		return
	}
	prefix := "pepd: "
	if c.workers > 0 {
		prefix = fmt.Sprintf("pepd[%d]: ", c.worker)
	}
	logger := log.New(os.Stderr, prefix, log.LstdFlags|log.Lmicroseconds)
	if limitErr != nil {
		logger.Print(limitErr)
	}
	if c.workers == 0 && n > 1 {
		os.Exit(supervise(c, n, logger))
	}
	os.Exit(serve(c, wan, lan, limit, logger, prefix))
}

// serve runs one server: the whole pepd, or one worker of several.
func serve(c config, wan, lan tune.Leg, limit uint64, logger *log.Logger, prefix string) int {
	if n := connsAllowed(limit); n < c.opts.MaxConns {
		// Past the limit accept and dial would fail with EMFILE and
		// clients would hang in the queue; at max_conns the overflow
		// policy (passthrough or refuse) applies instead.
		logger.Printf("open-file limit %d allows %d split connections (two sockets each, %d reserved): max_conns %d lowered to %d (more needs workers=auto, a higher ulimit -Hn or CAP_SYS_RESOURCE)",
			limit, n, fdReserve, c.opts.MaxConns, n)
		c.opts.MaxConns = n
	}
	srv, err := server.New(server.Config{
		Name: c.name, Role: c.role, Opts: c.opts, WAN: wan, LAN: lan, StateDir: c.stateDir,
		Log: logger, OpenFileLimit: limit, Workers: max(c.workers, 1), Worker: c.worker, ConnLogPath: c.connLog,
		WanRate: rateConfig(c), WanIf: c.wanIf,
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s%v\n", prefix, err)
		return 1
	}
	if c.cpuProfile != "" {
		if st, err := os.Stat(c.cpuProfile); err == nil && st.IsDir() {
			// One directory for several pepds (e.g. both ends of a chain).
			c.cpuProfile = fmt.Sprintf("%s/pepd-%d.prof", c.cpuProfile, os.Getpid())
		} else if c.workers > 0 {
			c.cpuProfile = fmt.Sprintf("%s.%d", c.cpuProfile, c.worker)
		}
		f, err := os.Create(c.cpuProfile)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%scpuprofile: %v\n", prefix, err)
			return 2
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(os.Stderr, "%scpuprofile: %v\n", prefix, err)
			return 2
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := srv.Run(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "%s%v\n", prefix, err)
		return 1
	}
	return 0
}
