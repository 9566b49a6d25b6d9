package saratoga

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// RemoteError is an error code reported by the peer in a STATUS frame.
type RemoteError struct {
	Code ErrorCode
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("peer reported error 0x%02x (%v)", uint8(e.Code), e.Code)
}

// ErrTimeout is wrapped by every inactivity timeout.
var ErrTimeout = errors.New("timed out")

// TransferStats are the counters a transfer endpoint keeps.
type TransferStats struct {
	DataFramesSent      uint64
	DataFramesReceived  uint64
	RetransmittedFrames uint64 // sender: hole resends; receiver: frames that filled a hole
	ProbeFrames         uint64 // sender: DATA re-sent only to solicit STATUS
	DuplicateFrames     uint64 // receiver: DATA carrying no new bytes
	MetadataSent        uint64
	StatusFrames        uint64        // sender: received; receiver: sent
	HolesRequested      uint64        // hole ranges listed in STATUS frames (sent or received)
	BytesWire           uint64        // UDP payload bytes sent by this endpoint
	FirstPass           time.Duration // sender: until every chunk was sent once
	PacerStall          time.Duration // sender: sending time lost to host scheduling delays
	SRTT                time.Duration
}

// senderConfig tunes a sender.
type senderConfig struct {
	Session    uint32
	Descriptor Descriptor
	RateBPS    int64
	Burst      time.Duration // token-bucket depth; 0 means DefaultBurst
	Frame      int           // largest UDP payload (frame) to send
	Timeout    time.Duration // give up after this long without a STATUS
	// ReqEvery and ReqInterval bound how often DATA asks for a STATUS.
	ReqEvery    int
	ReqInterval time.Duration
	// LateChecksum, if set, computes the METADATA checksum concurrently
	// with the first DATA frames, so hashing a large file does not delay
	// the start; METADATA is sent as soon as it is ready (receivers accept
	// DATA before METADATA).
	LateChecksum func() ([]byte, error)
	Now          func() time.Time
}

// sender transmits one object at a fixed rate and repairs the holes the
// receiver reports. It never waits for acknowledgements before sending new
// data: STATUS frames only steer retransmission.
type sender struct {
	cfg   senderConfig
	src   io.ReaderAt
	size  uint64
	meta  []byte // encoded METADATA
	md    *Metadata
	send  func([][]byte) // writes a batch of frames; errors are loss
	in    <-chan any
	chunk int // payload bytes per DATA frame
	batch int // frames the pacer lets out per wake-up

	nChunks  int
	nextNew  int     // next never-sent chunk
	lastSent []int64 // stamp of each chunk's last send
	queued   []bool
	queue    []int

	// stamp is the send time of the latest frame in Unix ns, made strictly
	// increasing so it also orders frames: an echoed timestamp tells which
	// frames were sent before the one that solicited a STATUS.
	stamp       int64
	metaStamp   int64
	metaNeeded  bool
	metaReady   bool
	sinceReq    int
	lastReqTime time.Time
	lastProbe   time.Time
	lastHeard   time.Time
	start       time.Time
	done        bool
	err         error
	stats       TransferStats
	// bufs hold the frames of the batch being built; ahead is a
	// read-ahead block of the object (first pass reads are sequential).
	bufs         [][]byte
	readBufFrame []byte // holds a frame the pacer held back
	readBuf      []byte // one chunk, for reads outside the read-ahead
	ahead        []byte
	aheadOff     uint64
	aheadLen     int
}

// batchWindow is the sending time one pacer wake-up covers: frames leave
// in groups of this much at the configured rate (at least one frame,
// at most maxSendBatch), which cuts the wake-ups and system calls per
// frame by the group size. 40 ms at 8 Mbit/s is 27 frames (40 KB), far
// inside the link's queue and HTB burst (128 KB in the test bed).
const batchWindow = 40 * time.Millisecond

// maxSendBatch bounds a batch (one sendmmsg call).
const maxSendBatch = 64

// readAhead is the block read from the object at once for new chunks.
const readAhead = 256 << 10

// chunkSize is the DATA payload per frame of at most frame bytes. Room for
// the optional timestamp is always reserved so every chunk has the same
// size whether or not its frame carries a STATUS request.
func chunkSize(frame int, d Descriptor) int {
	return frame - DataHeaderLen(d, true)
}

func newSender(cfg senderConfig, src io.ReaderAt, size uint64, meta *Metadata, send func([][]byte), in <-chan any) (*sender, error) {
	if cfg.RateBPS <= 0 {
		return nil, errors.New("rate must be positive")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Burst <= 0 {
		cfg.Burst = DefaultBurst
	}
	if cfg.ReqEvery <= 0 {
		cfg.ReqEvery = 32
	}
	if cfg.ReqInterval <= 0 {
		cfg.ReqInterval = 50 * time.Millisecond
	}
	if size > cfg.Descriptor.Max() {
		return nil, fmt.Errorf("size %d does not fit a %d-bit descriptor", size, cfg.Descriptor.Bits())
	}
	chunk := chunkSize(cfg.Frame, cfg.Descriptor)
	if chunk < 16 {
		return nil, fmt.Errorf("frame size %d too small", cfg.Frame)
	}
	if cfg.LateChecksum != nil {
		// Size the frame with a placeholder of the final checksum length.
		meta.Checksum = make([]byte, 4*max(meta.ChecksumType.Words(), 0))
	}
	mb, err := meta.Append(nil)
	if err != nil {
		return nil, err
	}
	if len(mb) > cfg.Frame {
		return nil, fmt.Errorf("metadata frame of %d bytes exceeds the frame size %d", len(mb), cfg.Frame)
	}
	n := int((size + uint64(chunk) - 1) / uint64(chunk))
	frameBits := float64((cfg.Frame + WireOverhead) * 8)
	batch := int(float64(cfg.RateBPS) * batchWindow.Seconds() / frameBits)
	batch = min(max(batch, 1), maxSendBatch)
	bufs := make([][]byte, batch)
	for i := range bufs {
		bufs[i] = make([]byte, 0, cfg.Frame)
	}
	return &sender{
		cfg: cfg, src: src, size: size, meta: mb, md: meta, send: send, in: in, chunk: chunk, batch: batch,
		metaReady: cfg.LateChecksum == nil,
		nChunks:   n, lastSent: make([]int64, n), queued: make([]bool, n),
		metaNeeded: true,
		bufs:       bufs, readBufFrame: make([]byte, 0, cfg.Frame), readBuf: make([]byte, chunk), ahead: make([]byte, max(readAhead, chunk)),
	}, nil
}

func (s *sender) chunkRange(c int) (uint64, uint64) {
	off := uint64(c) * uint64(s.chunk)
	return off, min(off+uint64(s.chunk), s.size)
}

// probeInterval spaces STATUS-soliciting probes while nothing else is due.
func (s *sender) probeInterval() time.Duration {
	if s.stats.SRTT == 0 {
		return 100 * time.Millisecond
	}
	// Probes only go out while the link would otherwise idle, so they are
	// cheap; frequent ones shorten the wait after a lost STATUS.
	return min(max(s.stats.SRTT/8, 10*time.Millisecond), 250*time.Millisecond)
}

// staleAfter is how old a chunk's last send must be before a hole report
// that carries no echoed timestamp may trigger a resend.
func (s *sender) staleAfter() time.Duration {
	if s.stats.SRTT == 0 {
		return time.Second
	}
	return s.stats.SRTT*5/4 + 20*time.Millisecond
}

func (s *sender) run(ctx context.Context) (TransferStats, error) {
	now := s.cfg.Now()
	s.start, s.lastHeard, s.lastReqTime = now, now, now
	pace := newPacer(s.cfg.RateBPS, s.cfg.Frame, s.cfg.Burst, now)
	// The first batch leaves at once rather than one batch window late.
	pace.tokens = min(pace.burst, float64(s.batch*(s.cfg.Frame+WireOverhead)*8))
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	type sumResult struct {
		sum []byte
		err error
	}
	var sumCh chan sumResult
	if s.cfg.LateChecksum != nil {
		sumCh = make(chan sumResult, 1) // buffered: never blocks the hasher
		go func() {
			b, err := s.cfg.LateChecksum()
			sumCh <- sumResult{b, err}
		}()
	}
	gotSum := func(r sumResult) {
		sumCh = nil
		if r.err != nil {
			s.err = fmt.Errorf("sender: checksum: %w", r.err)
			return
		}
		s.md.Checksum = r.sum
		mb, err := s.md.Append(nil)
		if err != nil {
			s.err = fmt.Errorf("sender: %w", err)
			return
		}
		s.meta, s.metaReady = mb, true
	}
	// pending is a frame built (its chunk's state already updated) but not
	// yet allowed out by the pacer; it leads the next batch.
	var pending []byte
	frames := make([][]byte, 0, s.batch)
	for {
		select {
		case r := <-sumCh:
			gotSum(r)
		default:
		}
		s.drain()
		if s.err != nil {
			return s.stats, s.err
		}
		if s.done {
			return s.stats, nil
		}
		now = s.cfg.Now()
		if now.Sub(s.lastHeard) > s.cfg.Timeout {
			return s.stats, fmt.Errorf("sender: no STATUS from receiver for %v: %w", s.cfg.Timeout, ErrTimeout)
		}
		// Build a batch of what the bucket allows now.
		frames = frames[:0]
		for len(frames) < s.batch {
			if pending == nil {
				b := s.next(now, s.bufs[len(frames)][:0])
				if b == nil {
					break
				}
				pending = b
			}
			if pace.delay(len(pending), now) > 0 {
				break
			}
			pace.consume(len(pending))
			// pending may sit in another slot's buffer (built in an earlier
			// round) or be the METADATA: the batch keeps its own copy.
			frames = append(frames, append(s.bufs[len(frames)][:0], pending...))
			s.stats.BytesWire += uint64(len(pending))
			pending = nil
		}
		s.stats.PacerStall = pace.stalled
		if len(frames) > 0 {
			s.send(frames)
			if pending != nil {
				// Keep the held frame out of the buffers the next batch
				// reuses.
				pending = append(s.readBufFrame[:0], pending...)
			}
			continue
		}
		if s.err != nil {
			return s.stats, s.err
		}
		if pending == nil {
			// Idle: wait for a STATUS, the next probe, or cancellation.
			wait := s.probeInterval() - now.Sub(s.lastProbe)
			timer.Reset(max(wait, time.Millisecond))
			select {
			case <-ctx.Done():
				return s.stats, ctx.Err()
			case f := <-s.in:
				s.handle(f)
			case r := <-sumCh:
				gotSum(r)
			case <-timer.C:
			}
			pace.refill(s.cfg.Now(), false)
			continue
		}
		// Paced: sleep until the bucket holds a whole batch (or what is
		// left of the object), so the next wake-up sends several frames.
		want := len(pending) + (min(s.batch, s.framesLeft())-1)*s.cfg.Frame
		timer.Reset(max(pace.delay(want, now), pace.delay(len(pending), now)))
		select {
		case <-ctx.Done():
			return s.stats, ctx.Err()
		case <-timer.C:
		}
	}
}

// framesLeft is how many DATA frames are known to be due: queued repairs
// and chunks never sent (at least 1).
func (s *sender) framesLeft() int {
	return max(1, len(s.queue)+s.nChunks-s.nextNew)
}

// drain handles every STATUS already queued without blocking.
func (s *sender) drain() {
	for {
		select {
		case f := <-s.in:
			s.handle(f)
		default:
			return
		}
	}
}

type frameKind int

const (
	kindNew frameKind = iota
	kindResend
	kindProbe
)

// nextStamp returns the send stamp of a frame sent now: its Unix ns,
// bumped past the previous frame's so that stamps never repeat.
func (s *sender) nextStamp(now time.Time) int64 {
	s.stamp = max(now.UnixNano(), s.stamp+1)
	return s.stamp
}

// next builds the next frame to send into buf, or returns nil if nothing
// is due.
func (s *sender) next(now time.Time, buf []byte) []byte {
	if s.metaNeeded && s.metaReady {
		s.metaNeeded = false
		s.metaStamp = s.nextStamp(now)
		s.stats.MetadataSent++
		return s.meta
	}
	var c int
	kind := kindNew
	switch {
	case len(s.queue) > 0:
		c = s.queue[0]
		s.queue = s.queue[1:]
		s.queued[c] = false
		kind = kindResend
	case s.nextNew < s.nChunks:
		c = s.nextNew
		s.nextNew++
		if s.nextNew == s.nChunks {
			s.stats.FirstPass = now.Sub(s.start)
		}
	case now.Sub(s.lastProbe) >= s.probeInterval():
		if s.nChunks == 0 {
			// An empty object has no DATA frame to probe with, and a DATA
			// frame without payload is one other implementations reject:
			// the METADATA is re-sent instead (receivers answer it).
			if !s.metaReady {
				return nil
			}
			s.lastProbe = now
			s.stats.ProbeFrames++
			s.metaStamp = s.nextStamp(now)
			return s.meta
		}
		c = s.nChunks - 1
		kind = kindProbe
	default:
		return nil
	}
	req := kind == kindProbe || s.sinceReq+1 >= s.cfg.ReqEvery || now.Sub(s.lastReqTime) >= s.cfg.ReqInterval
	if kind == kindResend && len(s.queue) == 0 && s.nextNew >= s.nChunks {
		// Last repair of a round in the tail: ask at once where we stand.
		req = true
	}
	stamp := s.nextStamp(now)
	d := Data{Descriptor: s.cfg.Descriptor, Session: s.cfg.Session, ReqStatus: req}
	start, end := s.chunkRange(c)
	p, err := s.read(start, end, kind == kindNew)
	if err != nil {
		s.err = fmt.Errorf("sender: reading offset %d: %w", start, err)
		return nil
	}
	d.Offset, d.Payload, d.EOD = start, p, end == s.size
	s.lastSent[c] = stamp
	if req {
		d.HasTimestamp = true
		d.Timestamp = NewTimestamp(time.Unix(0, stamp))
		s.sinceReq, s.lastReqTime = 0, now
	} else {
		s.sinceReq++
	}
	switch kind {
	case kindResend:
		s.stats.RetransmittedFrames++
	case kindProbe:
		s.stats.ProbeFrames++
		s.lastProbe = now
	}
	s.stats.DataFramesSent++
	b, err := d.Append(buf)
	if err != nil {
		s.err = fmt.Errorf("sender: %w", err)
		return nil
	}
	return b
}

// read returns the object's bytes [start, end). Sequential (first pass)
// reads are served from a read-ahead block, one system call per block
// instead of one per frame.
func (s *sender) read(start, end uint64, sequential bool) ([]byte, error) {
	if start >= s.aheadOff && end <= s.aheadOff+uint64(s.aheadLen) {
		return s.ahead[start-s.aheadOff : end-s.aheadOff], nil
	}
	if !sequential {
		p := s.readBuf[:end-start]
		if _, err := s.src.ReadAt(p, int64(start)); err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		return p, nil
	}
	n := min(uint64(len(s.ahead)), s.size-start)
	if _, err := s.src.ReadAt(s.ahead[:n], int64(start)); err != nil && !errors.Is(err, io.EOF) {
		s.aheadLen = 0
		return nil, err
	}
	s.aheadOff, s.aheadLen = start, int(n)
	return s.ahead[:end-start], nil
}

func (s *sender) handle(f any) {
	st, ok := f.(*Status)
	if !ok || st.Session != s.cfg.Session {
		return
	}
	now := s.cfg.Now()
	s.lastHeard = now
	s.stats.StatusFrames++
	s.stats.HolesRequested += uint64(len(st.Holes))
	if st.Error != ErrSuccess {
		s.err = &RemoteError{Code: st.Error}
		return
	}
	// An echoed timestamp is one of ours (type TSPosix64_32, a stamp no
	// later than the latest frame) or is ignored.
	var echoStamp int64
	echo := false
	if t, ok := ParseTimestamp(st.Timestamp); st.HasTimestamp && ok && TimestampType(st.Timestamp[0]) == TSPosix64_32 {
		sent := t.UnixNano()
		if sent > 0 && sent <= s.stamp && sent <= now.UnixNano() {
			echo, echoStamp = true, sent
			sample := time.Duration(now.UnixNano() - sent)
			if s.stats.SRTT == 0 {
				s.stats.SRTT = sample
			} else {
				s.stats.SRTT = (7*s.stats.SRTT + sample) / 8
			}
		}
	}
	if st.MetadataMissing {
		if (echo && s.metaStamp < echoStamp) || (!echo && s.metaStamp < now.Add(-s.staleAfter()).UnixNano()) {
			s.metaNeeded = true
		}
		// Without metadata the receiver cannot be complete.
	} else if st.Progress >= s.size && len(st.Holes) == 0 {
		s.done = true
		return
	}
	stale := now.Add(-s.staleAfter()).UnixNano()
	var tail []int
	for _, h := range st.Holes {
		if h.Start >= s.size || h.End <= h.Start {
			continue
		}
		first := int(h.Start / uint64(s.chunk))
		last := int((min(h.End, s.size) - 1) / uint64(s.chunk))
		for c := first; c <= last && c < s.nextNew; c++ {
			if s.queued[c] {
				continue
			}
			// Resend only if the copy the receiver is missing was sent
			// before the frame that solicited this STATUS; later copies
			// may still be in flight.
			if (echo && s.lastSent[c] < echoStamp) || (!echo && s.lastSent[c] < stale) {
				s.queued[c] = true
				s.queue = append(s.queue, c)
				if s.nextNew >= s.nChunks {
					tail = append(tail, c)
				}
			}
		}
	}
	// After the first pass the link would otherwise idle for an RTT per
	// repair round, so each repair is sent twice: a round then fails with
	// probability PER^2 instead of PER, and the tail needs fewer RTTs.
	s.queue = append(s.queue, tail...)
}
