package bridge

import (
	"sync/atomic"
	"time"
)

// frame is a buffer in flight; buf comes from the pool and data = buf[:n].
type frame struct {
	buf *[]byte
	n   int
	due time.Duration
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
	ring   []frame
	head   atomic.Uint64 // next to pop; written by the consumer only
	tail   atomic.Uint64 // next free slot; written by the producer only
	notify chan struct{}
}

func newDelayLine(capacity int) *delayLine {
	// A power of two, so an index is a mask away from its slot.
	c := 1
	for c < capacity {
		c <<= 1
	}
	return &delayLine{ring: make([]frame, c), notify: make(chan struct{}, 1)}
}

// push appends f; false if the line is full. Producer only.
func (d *delayLine) push(f frame) bool {
	t := d.tail.Load()
	if t-d.head.Load() == uint64(len(d.ring)) {
		return false
	}
	d.ring[t&uint64(len(d.ring)-1)] = f
	d.tail.Store(t + 1)
	return true
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
	return d.ring[h&uint64(len(d.ring)-1)].due, true
}

// popDue appends frames due at or before now (at most max) to out.
// Consumer only.
func (d *delayLine) popDue(now time.Duration, out []frame, max int) []frame {
	h, t := d.head.Load(), d.tail.Load()
	mask := uint64(len(d.ring) - 1)
	for h != t && len(out) < max && d.ring[h&mask].due <= now {
		out = append(out, d.ring[h&mask])
		d.ring[h&mask] = frame{}
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
