package bridge

import (
	"sync/atomic"
	"time"
)

// frame is a buffer in flight; buf comes from the pool and data = buf[:n].
// seq is its pipeline Verdict.Seq.
type frame struct {
	buf *[]byte
	n   int
	seq uint64
	due time.Duration
}

// slot is a frame in the ring. due is atomic because a live parameter change
// moves the departures of frames still in the shaper queue (retime, on the
// producer's side) while the consumer may be reading them.
type slot struct {
	buf *[]byte
	n   int
	seq uint64
	due atomic.Int64
}

// delayLine is the FIFO of frames waiting for their departure time. The
// pipeline guarantees non-decreasing due times, so the head is always the
// next frame to send.
//
// One receive goroutine pushes and one transmit thread pops, so it is a
// single-producer single-consumer ring without a lock. With a mutex, a
// receive goroutine preempted while holding it (an ordinary thread, on a
// loaded machine) stalled the real-time transmit thread behind it for
// milliseconds. The capacity is maxInFlight: a full ring refuses the frame.
type delayLine struct {
	ring   []slot
	head   atomic.Uint64 // next to pop; written by the consumer only
	tail   atomic.Uint64 // next free slot; written by the producer only
	hint   uint64        // after the frame retime last moved; producer only
	notify chan struct{}
}

func newDelayLine(capacity int) *delayLine {
	// A power of two, so an index is a mask away from its slot.
	c := 1
	for c < capacity {
		c <<= 1
	}
	return &delayLine{ring: make([]slot, c), notify: make(chan struct{}, 1)}
}

// push appends f; false if the line is full. Producer only.
func (d *delayLine) push(f frame) bool {
	t := d.tail.Load()
	if t-d.head.Load() == uint64(len(d.ring)) {
		return false
	}
	s := &d.ring[t&uint64(len(d.ring)-1)]
	s.buf, s.n, s.seq = f.buf, f.n, f.seq
	s.due.Store(int64(f.due))
	d.tail.Store(t + 1)
	return true
}

// retime gives the frame numbered seq a new due time, if it is still in the
// line. Producer only. The frames it moves are the newest ones (those still
// in the shaper queue), so the search runs from the tail; frames are pushed
// in seq order. A live change moves them in seq order, so a call starts
// after the frame the previous one moved: a whole queue costs one pass, not
// one search per frame. The consumer pops in FIFO order and stops at the
// first frame not due, so while frames are being moved none overtakes
// another.
func (d *delayLine) retime(seq uint64, due time.Duration) {
	h, t := d.head.Load(), d.tail.Load()
	mask := uint64(len(d.ring) - 1)
	// hint-1 is the last frame moved; above head it is still in its slot.
	if d.hint > h && d.hint <= t && d.ring[(d.hint-1)&mask].seq < seq {
		for i := d.hint; i != t; i++ {
			s := &d.ring[i&mask]
			if s.seq == seq {
				s.due.Store(int64(due))
				d.hint = i + 1
				return
			}
			if s.seq > seq {
				return
			}
		}
		return
	}
	for i := t; i != h; i-- {
		s := &d.ring[(i-1)&mask]
		if s.seq == seq {
			s.due.Store(int64(due))
			d.hint = i
			return
		}
		if s.seq < seq {
			return
		}
	}
}

// signal wakes a consumer waiting on notify. The producer calls it after
// each batch of pushes; a token left over only makes the consumer look again.
func (d *delayLine) signal() {
	select {
	case d.notify <- struct{}{}:
	default:
	}
}

// front returns the head's due time. Consumer only.
func (d *delayLine) front() (time.Duration, bool) {
	h := d.head.Load()
	if h == d.tail.Load() {
		return 0, false
	}
	return time.Duration(d.ring[h&uint64(len(d.ring)-1)].due.Load()), true
}

// popDue appends frames due at or before now (at most max) to out.
// Consumer only.
func (d *delayLine) popDue(now time.Duration, out []frame, max int) []frame {
	h, t := d.head.Load(), d.tail.Load()
	mask := uint64(len(d.ring) - 1)
	for h != t && len(out) < max {
		s := &d.ring[h&mask]
		due := time.Duration(s.due.Load())
		if due > now {
			break
		}
		out = append(out, frame{buf: s.buf, n: s.n, seq: s.seq, due: due})
		s.buf = nil
		h++
	}
	d.head.Store(h)
	return out
}

// len returns the frames in the line (any goroutine).
func (d *delayLine) len() int {
	h := d.head.Load() // first: tail read after it is never below it
	return int(d.tail.Load() - h)
}
