// Command saratoga is a Saratoga (draft-wood-tsvwg-saratoga-21) file
// transfer server and client.
//
//	saratoga serve -root DIR [-listen :7542] [-rate BPS] [-descriptor 16|32|64|auto] [-checksum md5|sha1|crc32|none]
//	saratoga get -server HOST:PORT -file NAME -out PATH [-rate BPS] [-timeout DUR]
//	saratoga put -server HOST:PORT -file LOCALPATH [-name REMOTE] [-rate BPS] [-timeout DUR]
//
// get and put print one JSON summary line on stdout on success; on failure
// they print one error line on stderr and exit non-zero.
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
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"satbed/clients/saratoga"
	"satbed/internal/cli"
)

func main() {
	// One transfer is sequential work (pace, send, repair), so one P
	// runs it; more only add cross-thread wake-ups (futex, spinning
	// threads) per batch: 15-20% of the CPU time measured on a 2-core
	// host. GOMAXPROCS in the environment still overrides this, e.g. for a
	// server with many concurrent sessions.
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
	cli.Exit("saratoga", run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = "usage: saratoga serve|get|put [flags] (saratoga CMD -h for flags)"

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
	}
	return cli.UsageError{Err: fmt.Errorf("unknown command %q; %s", args[0], usage)}
}

func parseDescriptor(s string) (saratoga.Descriptor, bool, error) {
	if s == "auto" {
		return saratoga.D64, true, nil
	}
	bits, err := strconv.Atoi(s)
	if err != nil {
		return 0, false, fmt.Errorf("-descriptor %q: want 16, 32, 64, 128 or auto", s)
	}
	d, err := saratoga.ParseDescriptorBits(bits)
	return d, false, err
}

// checkFrame refuses frame sizes that cannot carry a DATA header plus
// payload, or that would not fit the MTU in one IPv4 packet.
func checkFrame(mtu, frame int) error {
	if mtu < saratoga.FrameMargin+128 || mtu > 65535 {
		return fmt.Errorf("-mtu %d: want %d to 65535", mtu, saratoga.FrameMargin+128)
	}
	if frame != 0 && (frame < 128 || frame > mtu-saratoga.WireOverhead) {
		return fmt.Errorf("-frame %d: want 128 to %d (MTU - 28)", frame, mtu-saratoga.WireOverhead)
	}
	return nil
}

func parseChecksum(s string) (saratoga.ChecksumType, error) {
	for _, c := range []saratoga.ChecksumType{saratoga.CsumNone, saratoga.CsumCRC32, saratoga.CsumMD5, saratoga.CsumSHA1} {
		if c.String() == s {
			return c, nil
		}
	}
	return 0, fmt.Errorf("-checksum %q: want md5, sha1, crc32 or none", s)
}

func serve(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	root := fs.String("root", "", "directory to serve (required)")
	listen := fs.String("listen", fmt.Sprintf(":%d", saratoga.Port), "UDP address to listen on")
	rate := fs.Int64("rate", 8_000_000, "sending rate of each get transfer, bits/s of IP packets")
	burst := fs.Duration("burst", saratoga.DefaultBurst, "pacer credit: sending time a delayed sender may make up in one burst")
	desc := fs.String("descriptor", "auto", "offset width: 16, 32, 64, 128 or auto (narrowest that fits)")
	csum := fs.String("checksum", "md5", "METADATA checksum: md5, sha1, crc32 or none")
	timeout := fs.Duration("timeout", 30*time.Second, "per-session inactivity timeout")
	mtu := fs.Int("mtu", saratoga.DefaultMTU, "IP MTU frames are sized for")
	frame := fs.Int("frame", 0, "largest frame (UDP payload) to send; 0 means MTU - 60")
	beaconTo := fs.String("beacon-to", "", "send BEACON frames to these HOST:PORT addresses (comma-separated)")
	beaconEvery := fs.Duration("beacon-every", 10*time.Second, "interval between BEACON frames")
	quiet := fs.Bool("q", false, "do not log sessions")
	if err := cli.ParseFlags(fs, args, stderr); err != nil {
		return err
	}
	if err := checkFrame(*mtu, *frame); err != nil {
		return cli.UsageError{Err: err}
	}
	if *root == "" {
		return cli.UsageError{Err: errors.New("serve: -root is required")}
	}
	d, auto, err := parseDescriptor(*desc)
	if err != nil {
		return cli.UsageError{Err: err}
	}
	c, err := parseChecksum(*csum)
	if err != nil {
		return cli.UsageError{Err: err}
	}
	var beacons []net.Addr
	if *beaconTo != "" {
		if *beaconEvery <= 0 {
			return cli.UsageError{Err: fmt.Errorf("-beacon-every %v: want a positive interval", *beaconEvery)}
		}
		for _, a := range strings.Split(*beaconTo, ",") {
			ua, err := net.ResolveUDPAddr("udp", a)
			if err != nil {
				return cli.UsageError{Err: fmt.Errorf("-beacon-to %q: %w", a, err)}
			}
			beacons = append(beacons, ua)
		}
	}
	conn, err := saratoga.ListenUDP("udp", *listen)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	defer conn.Close()
	saratoga.SetSocketBuffers(conn, 4<<20)
	srv := &saratoga.Server{Root: *root, RateBPS: *rate, Burst: *burst, Descriptor: d, AutoDescriptor: auto, Checksum: c,
		Timeout: *timeout, MTU: *mtu, Frame: *frame, Linger: 5 * time.Second, BeaconTo: beacons, BeaconEvery: *beaconEvery}
	if !*quiet {
		srv.Log = log.New(stderr, "saratoga: ", log.LstdFlags|log.LUTC)
		srv.Log.Printf("serving %s on %v (rate %d bit/s, checksum %v)", *root, conn.LocalAddr(), *rate, c)
	}
	return srv.Serve(ctx, conn)
}

func transfer(ctx context.Context, op string, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(op, flag.ContinueOnError)
	server := fs.String("server", "", "server HOST:PORT (required)")
	file := fs.String("file", "", "get: remote name; put: local path (required)")
	out := fs.String("out", "", "get: local output path (required)")
	name := fs.String("name", "", "put: remote name (default: base name of -file)")
	rate := fs.Int64("rate", 8_000_000, "put: sending rate, bits/s of IP packets")
	burst := fs.Duration("burst", saratoga.DefaultBurst, "put: pacer credit a delayed sender may make up in one burst")
	timeout := fs.Duration("timeout", 30*time.Second, "inactivity timeout")
	desc := fs.String("descriptor", "auto", "put: offset width 16, 32, 64 or auto")
	csum := fs.String("checksum", "md5", "put: METADATA checksum md5, sha1, crc32 or none")
	mtu := fs.Int("mtu", saratoga.DefaultMTU, "IP MTU frames are sized for")
	frame := fs.Int("frame", 0, "largest frame (UDP payload) to send; 0 means MTU - 60")
	linger := fs.Duration("linger", 0, "get: keep answering the server this long after the file verified")
	if err := cli.ParseFlags(fs, args, stderr); err != nil {
		return err
	}
	if err := checkFrame(*mtu, *frame); err != nil {
		return cli.UsageError{Err: err}
	}
	if *server == "" || *file == "" || (op == "get" && *out == "") {
		return cli.UsageError{Err: fmt.Errorf("%s: -server, -file%s are required", op, map[bool]string{true: " and -out", false: ""}[op == "get"])}
	}
	d, auto, err := parseDescriptor(*desc)
	if err != nil {
		return cli.UsageError{Err: err}
	}
	c, err := parseChecksum(*csum)
	if err != nil {
		return cli.UsageError{Err: err}
	}
	cfg := saratoga.ClientConfig{Server: *server, RateBPS: *rate, Burst: *burst, Timeout: *timeout, MTU: *mtu, Frame: *frame,
		Checksum: c, Descriptor: d, AutoDescriptor: auto, Linger: *linger}
	var sum *saratoga.Summary
	if op == "get" {
		sum, err = saratoga.Get(ctx, cfg, *file, *out)
	} else {
		sum, err = saratoga.Put(ctx, cfg, *file, *name)
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
