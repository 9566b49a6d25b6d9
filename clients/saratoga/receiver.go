package saratoga

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha1"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"time"
)

// maxUnannouncedOffset bounds DATA accepted before METADATA gives the size,
// so a bogus frame cannot make the receiver create a huge sparse file.
const maxUnannouncedOffset = 1 << 40

// sinkFile is what a receiver writes into.
type sinkFile interface {
	io.WriterAt
	io.ReaderAt
	Truncate(int64) error
}

type receiverConfig struct {
	Session        uint32
	Descriptor     Descriptor    // used for STATUS before any frame shows the sender's
	Frame          int           // largest UDP payload to send
	Timeout        time.Duration // give up after this long without a frame
	StatusInterval time.Duration // unsolicited STATUS period
	Linger         time.Duration // keep answering after completion
	// Retry, if set, is called every RetryEvery until the first frame
	// arrives (a client re-sending its REQUEST).
	// OnComplete, if set, runs once the object verifies and before the
	// final STATUS is sent; an error is reported to the sender.
	OnComplete func() error
	Retry      func() error
	RetryEvery time.Duration
	Now        func() time.Time
}

// receiver collects one object, reports holes and verifies the checksum.
type receiver struct {
	cfg  receiverConfig
	dst  sinkFile
	send func([]byte) error
	in   <-chan any

	meta       *Metadata
	desc       Descriptor
	got        rangeSet
	heard      bool
	lastHeard  time.Time
	lastStatus time.Time
	lastRetry  time.Time
	stats      TransferStats
	checksumOK bool
	// The checksum is computed incrementally over the contiguous prefix as
	// it grows, so little is left to hash when the last hole fills.
	hasher  hash.Hash
	hashed  uint64
	hashBuf []byte
	// completedAt is when the object was complete and verified.
	completedAt time.Time
	buf         []byte
	// wbuf collects a run of consecutive frames so the file is written in
	// blocks (one system call per writeBlock, not per frame); wOff is
	// where it goes.
	wbuf []byte
	wOff uint64
}

// writeBlock is the largest run of frames written to the file at once.
const writeBlock = 256 << 10

func newReceiver(cfg receiverConfig, dst sinkFile, send func([]byte) error, in <-chan any) *receiver {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.StatusInterval <= 0 {
		cfg.StatusInterval = 200 * time.Millisecond
	}
	if cfg.RetryEvery <= 0 {
		cfg.RetryEvery = time.Second
	}
	return &receiver{cfg: cfg, dst: dst, send: send, in: in, desc: cfg.Descriptor, buf: make([]byte, 0, cfg.Frame)}
}

// newHash returns the hash for a checksum type (nil for none).
func newHash(t ChecksumType) (hash.Hash, error) {
	switch t {
	case CsumNone:
		return nil, nil
	case CsumCRC32:
		return crc32.NewIEEE(), nil
	case CsumMD5:
		return md5.New(), nil
	case CsumSHA1:
		return sha1.New(), nil
	}
	return nil, fmt.Errorf("unknown checksum type %d", t)
}

// ChecksumOf hashes the first size bytes of r with the given algorithm.
func ChecksumOf(r io.ReaderAt, size uint64, t ChecksumType) ([]byte, error) {
	h, err := newHash(t)
	if h == nil || err != nil {
		return nil, err
	}
	if _, err := io.Copy(h, io.NewSectionReader(r, 0, int64(size))); err != nil {
		return nil, fmt.Errorf("checksum: %w", err)
	}
	return h.Sum(nil), nil
}

func (r *receiver) complete() bool {
	return r.meta != nil && r.got.complete(r.meta.Dirent.Size)
}

// run receives until the object is complete and verified, then lingers.
func (r *receiver) run(ctx context.Context) (TransferStats, *Metadata, error) {
	now := r.cfg.Now()
	r.lastHeard, r.lastStatus = now, now
	if r.cfg.Retry != nil {
		r.lastRetry = now
		if err := r.cfg.Retry(); err != nil {
			return r.stats, nil, err
		}
	}
	tick := time.NewTicker(min(r.cfg.StatusInterval, r.cfg.RetryEvery) / 2)
	defer tick.Stop()
	for !r.complete() {
		select {
		case <-ctx.Done():
			return r.stats, r.meta, ctx.Err()
		case f := <-r.in:
			if err := r.handle(f); err != nil {
				return r.stats, r.meta, err
			}
		case <-tick.C:
			now := r.cfg.Now()
			if now.Sub(r.lastHeard) > r.cfg.Timeout {
				r.sendStatus(nil, ErrRxTimeout)
				if !r.heard {
					return r.stats, r.meta, fmt.Errorf("no response from peer within %v: %w", r.cfg.Timeout, ErrTimeout)
				}
				return r.stats, r.meta, fmt.Errorf("receiver: nothing from sender for %v: %w", r.cfg.Timeout, ErrTimeout)
			}
			if !r.heard && r.cfg.Retry != nil && now.Sub(r.lastRetry) >= r.cfg.RetryEvery {
				r.lastRetry = now
				if err := r.cfg.Retry(); err != nil {
					return r.stats, r.meta, err
				}
			}
			if r.heard && now.Sub(r.lastStatus) >= r.cfg.StatusInterval {
				r.sendStatus(nil, ErrSuccess)
			}
		}
	}
	if err := r.flush(); err != nil {
		r.sendStatus(nil, ErrCantReceive)
		return r.stats, r.meta, err
	}
	if err := r.advanceHash(0, nil); err != nil {
		r.sendStatus(nil, ErrUnspecified)
		return r.stats, r.meta, err
	}
	var sum []byte
	if r.hasher != nil {
		sum = r.hasher.Sum(nil)
	}
	if !bytes.Equal(sum, r.meta.Checksum) {
		r.sendStatus(nil, ErrUnspecified)
		return r.stats, r.meta, fmt.Errorf("%v checksum mismatch: got %x, metadata says %x", r.meta.ChecksumType, sum, r.meta.Checksum)
	}
	r.checksumOK = true
	r.completedAt = r.cfg.Now()
	if err := r.dst.Truncate(int64(r.meta.Dirent.Size)); err != nil {
		return r.stats, r.meta, fmt.Errorf("truncate: %w", err)
	}
	// Repeat the final STATUS: losing it only costs the sender a timeout,
	// but three copies make that unlikely even at 10% loss.
	if r.cfg.OnComplete != nil {
		if err := r.cfg.OnComplete(); err != nil {
			r.sendStatus(nil, ErrCantReceive)
			return r.stats, r.meta, fmt.Errorf("receiver: %w", err)
		}
	}
	for range 3 {
		r.sendStatus(nil, ErrSuccess)
	}
	r.linger(ctx)
	return r.stats, r.meta, nil
}

// linger answers the sender's probes with the final STATUS for a while, in
// case every copy of it was lost.
func (r *receiver) linger(ctx context.Context) {
	if r.cfg.Linger <= 0 {
		return
	}
	t := time.NewTimer(r.cfg.Linger)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			return
		case f := <-r.in:
			switch v := f.(type) {
			case *Data:
				if v.ReqStatus {
					r.sendStatus(v, ErrSuccess)
				}
			case *Metadata:
				// The sender of an empty object probes with METADATA.
				if v.Session == r.cfg.Session {
					r.sendStatus(nil, ErrSuccess)
				}
			}
		}
	}
}

func (r *receiver) handle(f any) error {
	now := r.cfg.Now()
	switch v := f.(type) {
	case *Request:
		// A re-sent REQUEST means our earlier answer was lost.
		if v.Session == r.cfg.Session {
			r.sendStatus(nil, ErrSuccess)
		}
	case *Status:
		if v.Session != r.cfg.Session {
			return nil
		}
		if v.Error != ErrSuccess {
			return &RemoteError{Code: v.Error}
		}
		r.heard, r.lastHeard = true, now
	case *Metadata:
		if v.Session != r.cfg.Session {
			return nil
		}
		r.heard, r.lastHeard = true, now
		if r.meta != nil {
			return nil
		}
		if v.Transfer != 0 || v.Dirent.Properties != 0 {
			r.sendStatus(nil, ErrBadRequest)
			return fmt.Errorf("receiver: only plain file transfers are supported (transfer %d, properties %d)", v.Transfer, v.Dirent.Properties)
		}
		if v.Dirent.Size > maxUnannouncedOffset {
			r.sendStatus(nil, ErrFileTooBig)
			return fmt.Errorf("receiver: object of %d bytes is too big", v.Dirent.Size)
		}
		h, err := newHash(v.ChecksumType)
		if err != nil {
			r.sendStatus(nil, ErrBadRequest)
			return fmt.Errorf("receiver: %w", err)
		}
		r.meta, r.desc, r.hasher = v, v.Descriptor, h
		if err := r.dst.Truncate(int64(v.Dirent.Size)); err != nil {
			r.sendStatus(nil, ErrCantReceive)
			return fmt.Errorf("receiver: %w", err)
		}
		if err := r.advanceHash(0, nil); err != nil {
			r.sendStatus(nil, ErrCantReceive)
			return err
		}
	case *Data:
		if v.Session != r.cfg.Session {
			return nil
		}
		r.heard, r.lastHeard = true, now
		if r.meta == nil {
			r.desc = v.Descriptor
		}
		end := v.Offset + uint64(len(v.Payload))
		limit := uint64(maxUnannouncedOffset)
		if r.meta != nil {
			limit = r.meta.Dirent.Size
		}
		if end > limit {
			r.stats.DuplicateFrames++
			return nil
		}
		r.stats.DataFramesReceived++
		if len(v.Payload) > 0 {
			below := v.Offset < r.got.highest()
			fresh := r.got.add(v.Offset, end)
			switch {
			case fresh == 0:
				r.stats.DuplicateFrames++
			default:
				if below {
					r.stats.RetransmittedFrames++
				}
				if err := r.write(v.Offset, v.Payload); err != nil {
					r.sendStatus(nil, ErrCantReceive)
					return fmt.Errorf("receiver: write at %d: %w", v.Offset, err)
				}
				if err := r.advanceHash(v.Offset, v.Payload); err != nil {
					r.sendStatus(nil, ErrCantReceive)
					return err
				}
			}
		}
		// Once complete, the final STATUS waits for checksum verification:
		// a sender seeing "all received" earlier would stop too soon.
		if v.ReqStatus && !r.complete() {
			r.sendStatus(v, ErrSuccess)
		}
	}
	return nil
}

// write stores p at off, extending the pending block when p follows it.
func (r *receiver) write(off uint64, p []byte) error {
	if len(r.wbuf) > 0 && off == r.wOff+uint64(len(r.wbuf)) && len(r.wbuf)+len(p) <= writeBlock {
		r.wbuf = append(r.wbuf, p...)
		return nil
	}
	if err := r.flush(); err != nil {
		return err
	}
	if r.wbuf == nil {
		r.wbuf = make([]byte, 0, writeBlock)
	}
	if len(p) > writeBlock {
		_, err := r.dst.WriteAt(p, int64(off))
		return err
	}
	r.wbuf, r.wOff = append(r.wbuf[:0], p...), off
	return nil
}

// flush writes the pending block.
func (r *receiver) flush() error {
	if len(r.wbuf) == 0 {
		return nil
	}
	_, err := r.dst.WriteAt(r.wbuf, int64(r.wOff))
	r.wbuf = r.wbuf[:0]
	if err != nil {
		return fmt.Errorf("receiver: write at %d: %w", r.wOff, err)
	}
	return nil
}

// advanceHash feeds newly contiguous bytes to the checksum. p, at offset
// off, is a frame just written: the bytes it holds are hashed from memory
// rather than read back from the file (one system call less per frame).
func (r *receiver) advanceHash(off uint64, p []byte) error {
	if r.hasher == nil {
		return nil
	}
	end := min(r.got.contiguous(), r.meta.Dirent.Size)
	if off <= r.hashed && r.hashed < off+uint64(len(p)) && r.hashed < end {
		n := min(off+uint64(len(p)), end) - r.hashed
		r.hasher.Write(p[r.hashed-off : r.hashed-off+n])
		r.hashed += n
	}
	if r.hashBuf == nil && end > r.hashed {
		r.hashBuf = make([]byte, 256<<10)
	}
	if r.hashed < end {
		if err := r.flush(); err != nil {
			return err
		}
	}
	for r.hashed < end {
		p := r.hashBuf[:min(uint64(len(r.hashBuf)), end-r.hashed)]
		if _, err := r.dst.ReadAt(p, int64(r.hashed)); err != nil {
			return fmt.Errorf("receiver: checksum read at %d: %w", r.hashed, err)
		}
		r.hasher.Write(p)
		r.hashed += uint64(len(p))
	}
	return nil
}

// sendStatus reports progress and holes; req is the DATA frame that asked
// for it (nil for an unsolicited STATUS).
func (r *receiver) sendStatus(req *Data, code ErrorCode) {
	st := Status{
		Descriptor:      r.desc,
		Session:         r.cfg.Session,
		MetadataMissing: r.meta == nil,
		Voluntary:       req == nil,
		Error:           code,
		Progress:        r.got.contiguous(),
	}
	if req != nil {
		st.InResponseTo = req.Offset
		st.HasTimestamp, st.Timestamp = req.HasTimestamp, req.Timestamp
	}
	if code == ErrSuccess {
		maxN := (r.cfg.Frame - StatusHeaderLen(st.Descriptor, st.HasTimestamp)) / (2 * st.Descriptor.Size())
		st.Holes, st.Incomplete = r.got.holes(r.got.highest(), max(maxN, 0))
	}
	if st.Progress > st.Descriptor.Max() {
		st.Progress = st.Descriptor.Max()
	}
	b, err := st.Append(r.buf[:0])
	if err != nil {
		return
	}
	_ = r.send(b) // a lost STATUS is repaired by the next one
	r.lastStatus = r.cfg.Now()
	r.stats.StatusFrames++
	r.stats.HolesRequested += uint64(len(st.Holes))
	r.stats.BytesWire += uint64(len(b))
}
