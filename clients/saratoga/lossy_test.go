package saratoga

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// lossyConn wraps a PacketConn and impairs what it sends: frames are dropped
// with a seeded probability (per frame type, or from a bit-error rate and the
// frame's size on the wire) and delivered after a fixed delay, in order.
type lossyConn struct {
	net.PacketConn
	delay time.Duration
	// drop[t] is the drop probability of frame type t; ber, if set,
	// replaces it with 1-(1-ber)^(bits on the wire).
	drop [5]float64
	ber  float64
	// dropFirst[t] drops that many leading frames of type t outright.
	dropFirst [5]int
	// violations lists frames written that another implementation
	// would reject (interopViolation).
	violations []string

	mu      sync.Mutex
	rng     *rand.Rand
	sent    [5]int
	dropped [5]int
	closed  bool
	q       chan delayed
	done    chan struct{}
}

type delayed struct {
	at   time.Time
	b    []byte
	addr net.Addr
}

// interopViolation says why another implementation would reject frame b
// (the interoperability findings), or "" if none would.
func interopViolation(b []byte) string {
	if len(b) > FrameFor(DefaultMTU, 0) {
		return fmt.Sprintf("frame of %d bytes above MTU-60", len(b))
	}
	f, err := Decode(b)
	if err != nil {
		return err.Error()
	}
	switch v := f.(type) {
	case *Request:
		if v.TxWilling != WillingYes || v.RxWilling != WillingYes {
			return fmt.Sprintf("REQUEST willing bits tx %d rx %d", v.TxWilling, v.RxWilling)
		}
	case *Data:
		if len(v.Payload) == 0 {
			return "DATA without payload"
		}
		if t := TimestampType(v.Timestamp[0]); v.HasTimestamp && (t == TSLocal || t > TSEpoch2000_32) {
			return fmt.Sprintf("DATA timestamp type %d", t)
		}
	}
	return ""
}

func newLossyConn(c net.PacketConn, seed uint64, delay time.Duration) *lossyConn {
	l := &lossyConn{PacketConn: c, delay: delay, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		q: make(chan delayed, 1<<16), done: make(chan struct{})}
	go l.pump()
	return l
}

// pump releases delayed frames when due. A constant delay keeps order.
func (l *lossyConn) pump() {
	defer close(l.done)
	for d := range l.q {
		if w := time.Until(d.at); w > 0 {
			time.Sleep(w)
		}
		_, _ = l.PacketConn.WriteTo(d.b, d.addr)
	}
}

func (l *lossyConn) WriteTo(b []byte, addr net.Addr) (int, error) {
	t := 0
	if len(b) >= 1 {
		t = int(b[0] & 0x1f)
	}
	if t > 4 {
		t = 0
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return 0, net.ErrClosed
	}
	p := l.drop[t]
	if l.ber > 0 {
		p = 1 - math.Pow(1-l.ber, float64((len(b)+WireOverhead)*8))
	}
	l.sent[t]++
	if v := interopViolation(b); v != "" && len(l.violations) < 10 {
		l.violations = append(l.violations, v)
	}
	drop := l.rng.Float64() < p
	if l.dropFirst[t] > 0 {
		l.dropFirst[t]--
		drop = true
	}
	if drop {
		l.dropped[t]++
	}
	if drop {
		l.mu.Unlock()
		return len(b), nil
	}
	if l.delay == 0 {
		l.mu.Unlock()
		return l.PacketConn.WriteTo(b, addr)
	}
	// Enqueue under the lock so frames keep their order.
	l.q <- delayed{at: time.Now().Add(l.delay), b: append([]byte(nil), b...), addr: addr}
	l.mu.Unlock()
	return len(b), nil
}

func (l *lossyConn) Close() error {
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		close(l.q)
	}
	l.mu.Unlock()
	<-l.done
	return l.PacketConn.Close()
}

// counts returns frames offered and dropped per type.
func (l *lossyConn) counts() (sent, dropped [5]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sent, l.dropped
}
