package bridge

import (
	"sync"
	"time"
)

// frame is a buffer in flight; buf comes from the pool and data = buf[:n].
type frame struct {
	buf  *[]byte
	n    int
	due  time.Duration
	size int
}

// delayLine is the FIFO of frames waiting for their departure time. The
// pipeline guarantees non-decreasing due times, so the head is always the
// next frame to send.
type delayLine struct {
	mu     sync.Mutex
	ring   []frame
	head   int
	n      int
	notify chan struct{}
}

func newDelayLine() *delayLine {
	return &delayLine{ring: make([]frame, 1024), notify: make(chan struct{}, 1)}
}

func (d *delayLine) push(f frame) {
	d.mu.Lock()
	if d.n == len(d.ring) {
		nr := make([]frame, 2*len(d.ring))
		for i := 0; i < d.n; i++ {
			nr[i] = d.ring[(d.head+i)%len(d.ring)]
		}
		d.ring, d.head = nr, 0
	}
	d.ring[(d.head+d.n)%len(d.ring)] = f
	d.n++
	wasEmpty := d.n == 1
	d.mu.Unlock()
	if wasEmpty {
		select {
		case d.notify <- struct{}{}:
		default:
		}
	}
}

// front returns the head's due time.
func (d *delayLine) front() (time.Duration, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.n == 0 {
		return 0, false
	}
	return d.ring[d.head].due, true
}

// popDue appends frames due at or before now (at most max) to out.
func (d *delayLine) popDue(now time.Duration, out []frame, max int) []frame {
	d.mu.Lock()
	defer d.mu.Unlock()
	for d.n > 0 && len(out) < max && d.ring[d.head].due <= now {
		out = append(out, d.ring[d.head])
		d.ring[d.head] = frame{}
		d.head = (d.head + 1) % len(d.ring)
		d.n--
	}
	return out
}

func (d *delayLine) len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.n
}
