package trafficgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"syscall"
	"time"
)

// Arrival processes for finite flows.
const (
	ArrivalNone     = "none"     // no finite flows (long-lived only)
	ArrivalPoisson  = "poisson"  // exponential inter-arrival times at Rate flows/s
	ArrivalConstant = "constant" // Concurrent flows at all times: one that ends is replaced (a Rate
	// spreads the first Concurrent starts as Poisson arrivals, as the TCP
	// spoofing study started its competing flows)
)

// retryDelay is how long a failed flow's replacement waits, so a server
// that refuses connections does not turn the client into a busy loop.
const retryDelay = time.Second

// ClientConfig describes one client's workload against one server.
type ClientConfig struct {
	Server         string // host:port
	ClientID       uint32 // tells this client's flows apart at a shared server
	Tag            string // free text copied into every record (e.g. "h3->h4")
	Long           int    // long-lived flows, open for the whole run
	Arrival        string // ArrivalNone, ArrivalPoisson or ArrivalConstant
	Rate           float64
	Concurrent     int
	MaxActive      int // Poisson: arrivals beyond this many active flows are skipped (counted)
	Sizes          Sizer
	UploadFraction float64 // share of flows the client sends; the rest are downloads
	Duration       time.Duration
	Seed           uint64
	ConnectTimeout time.Duration
	Payload        []byte
}

// Validate checks the configuration; the error is one line.
func (c *ClientConfig) Validate() error {
	switch {
	case c.Server == "":
		return errors.New("no server address")
	case c.Long < 0:
		return fmt.Errorf("long-lived flows %d: must not be negative", c.Long)
	case !(c.UploadFraction >= 0 && c.UploadFraction <= 1):
		return fmt.Errorf("upload fraction %g: must be in [0, 1]", c.UploadFraction)
	case c.Duration < 0:
		return fmt.Errorf("duration %v: must not be negative", c.Duration)
	case len(c.Payload) == 0:
		return errors.New("no payload")
	}
	if _, _, err := net.SplitHostPort(c.Server); err != nil {
		return fmt.Errorf("server %q: %w", c.Server, err)
	}
	switch c.Arrival {
	case ArrivalNone, "":
		if c.Long == 0 {
			return errors.New("nothing to do: no long-lived flows and no arrival process")
		}
	case ArrivalPoisson:
		if !(c.Rate > 0) || c.Rate > 1e5 {
			return fmt.Errorf("poisson rate %g flows/s: must be in (0, 100000]", c.Rate)
		}
	case ArrivalConstant:
		if c.Concurrent < 1 {
			return fmt.Errorf("constant arrival needs at least 1 concurrent flow, got %d", c.Concurrent)
		}
		if !(c.Rate >= 0) || c.Rate > 1e5 {
			return fmt.Errorf("constant arrival ramp-up rate %g flows/s: must be in [0, 100000]", c.Rate)
		}
	default:
		return fmt.Errorf("arrival %q: want none, poisson or constant", c.Arrival)
	}
	if c.Arrival == ArrivalPoisson || c.Arrival == ArrivalConstant {
		if c.Sizes == nil {
			return errors.New("finite flows need a size distribution")
		}
	}
	return nil
}

type flowEnd struct {
	long   bool
	status string
}

type flowSpec struct {
	id   uint64
	long bool
	size uint64
	dir  Direction
}

// Run generates the workload until Duration passes or ctx is cancelled,
// then stops every flow, records it, and writes the summary. All random
// draws happen on this goroutine, from one generator seeded by Seed.
func Run(ctx context.Context, cfg ClientConfig, records *Recorder) (*Summary, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.MaxActive <= 0 {
		cfg.MaxActive = 2000
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = 30 * time.Second
	}
	sum := &Summary{Side: "client", Client: cfg.ClientID, Tag: cfg.Tag, Start: now(), Config: cfg.describe()}
	// The end of the run is a plain cancellation, not a context deadline:
	// a dial would inherit a deadline and could fail with a timeout a
	// moment before the context reports it, and be miscounted as aborted.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if cfg.Duration > 0 {
		t := time.AfterFunc(cfg.Duration, cancel)
		defer t.Stop()
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))
	bufs := newBuffers()
	done := make(chan flowEnd, 64)
	retry := make(chan bool, 64) // a replacement due after retryDelay; true: long-lived
	var nextID uint64
	active := 0
	start := func(long bool) {
		if ctx.Err() != nil {
			return // the run is over: a late replacement would only record an empty flow
		}
		nextID++
		f := flowSpec{id: nextID, long: long, dir: Download}
		if rng.Float64() < cfg.UploadFraction {
			f.dir = Upload
		}
		if !long {
			f.size = cfg.Sizes.Draw(rng)
		}
		active++
		sum.MaxActive = max(sum.MaxActive, active)
		go func() {
			rec := cfg.flow(ctx, f, bufs)
			records.Flow(rec)
			done <- flowEnd{long: long, status: rec.Status}
		}()
	}
	later := func(long bool) {
		time.AfterFunc(retryDelay, func() {
			select {
			case retry <- long:
			case <-ctx.Done():
			}
		})
	}

	for range cfg.Long {
		start(true)
	}
	// Finite flows wait for arrival times: all of them under Poisson
	// arrivals; under a constant count only the first Concurrent, and only
	// when a ramp-up Rate is given (else they all start now).
	pending := 0
	switch {
	case cfg.Arrival == ArrivalPoisson:
		pending = -1 // unbounded
	case cfg.Arrival == ArrivalConstant && cfg.Rate > 0:
		pending = cfg.Concurrent
	case cfg.Arrival == ArrivalConstant:
		for range cfg.Concurrent {
			start(false)
		}
	}
	var arrivals <-chan time.Time
	var timer *time.Timer
	var next time.Time
	if pending != 0 {
		// Arrival times are drawn on an absolute schedule, so timer lateness
		// never lowers the rate.
		next = time.Now().Add(expDuration(rng, cfg.Rate))
		timer = time.NewTimer(time.Until(next))
		defer timer.Stop()
		arrivals = timer.C
	}
	for loop := true; loop; {
		select {
		case <-ctx.Done():
			loop = false
		case e := <-done:
			active--
			cfg.replace(e, start, later)
		case long := <-retry:
			start(long)
		case <-arrivals:
			for now := time.Now(); pending != 0 && !next.After(now); next = next.Add(expDuration(rng, cfg.Rate)) {
				if active < cfg.MaxActive {
					start(false)
				} else {
					sum.Skipped++
				}
				if pending > 0 {
					pending--
				}
			}
			if pending == 0 {
				arrivals = nil // a constant count's ramp-up is over
			} else {
				timer.Reset(time.Until(next))
			}
		}
	}
	for ; active > 0; active-- {
		<-done
	}
	return records.Summary(sum), records.Err()
}

// replace starts what a flow's end calls for: nothing for a finite Poisson
// flow, a new flow for a constant-count flow or a failed long-lived one.
func (cfg *ClientConfig) replace(e flowEnd, start, later func(bool)) {
	switch {
	case e.long && e.status == Aborted:
		later(true)
	case !e.long && cfg.Arrival == ArrivalConstant && e.status == Aborted:
		later(false)
	case !e.long && cfg.Arrival == ArrivalConstant && e.status != Stopped:
		start(false)
	}
}

func expDuration(rng *rand.Rand, rate float64) time.Duration {
	return time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
}

func (cfg *ClientConfig) describe() map[string]any {
	d := map[string]any{
		"server": cfg.Server, "long": cfg.Long, "arrival": cfg.Arrival, "upload_fraction": cfg.UploadFraction,
		"duration_s": cfg.Duration.Seconds(), "seed": cfg.Seed, "max_active": cfg.MaxActive,
	}
	switch cfg.Arrival {
	case ArrivalPoisson:
		d["rate_per_s"] = cfg.Rate
	case ArrivalConstant:
		d["concurrent"] = cfg.Concurrent
		if cfg.Rate > 0 {
			d["ramp_up_rate_per_s"] = cfg.Rate
		}
	}
	if cfg.Sizes != nil {
		d["sizes"] = cfg.Sizes.String()
		d["mean_size_bytes"] = cfg.Sizes.Mean()
	}
	return d
}

// flow runs one flow to its end and returns its record.
func (cfg *ClientConfig) flow(ctx context.Context, f flowSpec, bufs *buffers) *FlowRecord {
	rec := &FlowRecord{
		Side: "client", Client: cfg.ClientID, Tag: cfg.Tag, Flow: f.id, Kind: kindOf(f.size),
		Direction: f.dir.String(), Remote: cfg.Server, Size: f.size, Sender: f.dir == Upload,
	}
	if f.long {
		rec.Kind = "long"
	}
	start := time.Now()
	end, err := cfg.exchange(ctx, f, rec, start, bufs)
	switch {
	case err == nil:
		rec.Status = Completed
	case ctx.Err() != nil:
		rec.Status = Stopped
		end = time.Now()
	default:
		rec.Status, rec.Error = Aborted, err.Error()
		end = time.Now()
	}
	rec.finish(start, end)
	return rec
}

// exchange opens the connection and moves the bytes; it returns when the
// last byte was delivered (download: received; upload: the server's receipt
// arrived).
func (cfg *ClientConfig) exchange(ctx context.Context, f flowSpec, rec *FlowRecord, start time.Time,
	bufs *buffers) (time.Time, error) {
	d := net.Dialer{Timeout: cfg.ConnectTimeout}
	nc, err := d.DialContext(ctx, "tcp", cfg.Server)
	if err != nil {
		return start, fmt.Errorf("connect: %w", err)
	}
	c := nc.(*net.TCPConn)
	defer c.Close()
	rec.ConnectMs = round3(time.Since(start).Seconds() * 1000)
	rec.Local = c.LocalAddr().String()
	unhook := context.AfterFunc(ctx, func() { _ = c.SetDeadline(longAgo()) })
	defer unhook()
	req := Request{Direction: f.dir, Client: cfg.ClientID, Flow: f.id, Size: f.size}
	if _, err := c.Write(req.Marshal()); err != nil {
		return start, fmt.Errorf("request: %w", err)
	}
	if f.dir == Download {
		var last time.Time
		got, err := bufs.readN(c, f.size, &last)
		rec.Bytes = got
		rec.addTCPInfo(c, 0, 0)
		if err != nil {
			return last, fmt.Errorf("receive: %w", err)
		}
		if f.long {
			return last, errors.New("server ended a long-lived flow")
		}
		return last, nil
	}
	written, err := writeN(c, cfg.Payload, f.size)
	if err != nil {
		rec.addTCPInfo(c, HeaderLen, written)
		return start, fmt.Errorf("send: %w", err)
	}
	if err := c.CloseWrite(); err != nil {
		return start, fmt.Errorf("send: %w", err)
	}
	var reply [ReplyLen]byte
	if _, err := io.ReadFull(c, reply[:]); err != nil {
		rec.addTCPInfo(c, HeaderLen, written)
		return start, fmt.Errorf("receipt: %w", err)
	}
	end := time.Now()
	// Every byte is acknowledged now: the retransmission count is final.
	rec.addTCPInfo(c, HeaderLen, written)
	got, err := ParseReply(reply[:])
	if err != nil {
		return end, err
	}
	if got != f.size {
		return end, fmt.Errorf("server received %d of %d bytes", got, f.size)
	}
	return end, nil
}

// isTemporaryAccept reports accept errors worth waiting out.
func isTemporaryAccept(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM)
}
