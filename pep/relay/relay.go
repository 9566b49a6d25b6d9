// Package relay moves bytes between the two legs of a split TCP
// connection with splice(2), propagating half-closes (FIN) and resets
// (RST) from each side to the other.
//
// Backpressure: each direction splices at most one pipe's worth from its
// source, then blocks until all of it is written to the destination. While
// the destination's send buffer is full nothing more is read, the source
// socket's receive buffer fills and its advertised window closes, so the
// sender is slowed instead of data piling up in the PEP.
package relay

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Reasons a pair finished.
const (
	ReasonClosed = "closed" // both directions ended with FIN
	ReasonResetA = "reset_by_a"
	ReasonResetB = "reset_by_b"
	ReasonErrorA = "error_a"
	ReasonErrorB = "error_b"
)

// Pair relays between A (the accepted, client-facing socket) and B (the
// upstream socket pepd dialled).
type Pair struct {
	A, B *net.TCPConn
	pool *PipePool

	aToB, bToA   atomic.Int64
	lastActive   atomic.Int64 // unix nanoseconds of the last byte moved
	halfClosedAt atomic.Int64 // unix nanoseconds when the first direction ended, 0 if none
	halvesDone   atomic.Int32

	endOnce sync.Once
	reason  string
	err     error
	closed  chan struct{} // closed when the pair ends (releases a waiting gate)

	gate      Gate
	gateFromA bool         // the gated direction reads A (else B)
	pending   atomic.Int64 // bytes in the gated direction's pipe
	// moving is held while the gated direction moves bytes between a
	// socket and its pipe and counts them in pending, so Still sees each
	// byte in exactly one place.
	moving sync.Mutex
}

// Gate bounds one direction's reads (pepd's access-node buffer, package
// access): Allow returns how many of max bytes may be read now, waiting
// while none may, and 0 once closed is closed.
type Gate interface {
	Allow(max int, closed <-chan struct{}) int
}

// SetGate makes the direction reading from A (fromA) or from B ask g
// before every read. Call before Run.
func (p *Pair) SetGate(g Gate, fromA bool) {
	p.gate, p.gateFromA = g, fromA
}

// Pending is the bytes the gated direction holds in its pipe: read from
// its source, not yet written to its destination.
func (p *Pair) Pending() int64 { return p.pending.Load() }

// Still runs measure while the gated direction moves no bytes: each byte
// it has read is then in exactly one of the source socket's queue, the
// pipe (Pending) and the destination socket's queue. Measured between a
// splice and its count, a pipe's worth showed in two places at once
// (pepd's access buffer read 1.16 B at its high water on a busy host).
func (p *Pair) Still(measure func()) {
	p.moving.Lock()
	defer p.moving.Unlock()
	measure()
}

// NewPair prepares a relay between a and b using pipes from pool.
func NewPair(a, b *net.TCPConn, pool *PipePool) *Pair {
	p := &Pair{A: a, B: b, pool: pool, closed: make(chan struct{})}
	p.lastActive.Store(time.Now().UnixNano())
	return p
}

// Bytes returns the bytes delivered A->B and B->A so far.
func (p *Pair) Bytes() (aToB, bToA int64) { return p.aToB.Load(), p.bToA.Load() }

// LastActive is when the relay last moved data.
func (p *Pair) LastActive() time.Time { return time.Unix(0, p.lastActive.Load()) }

// HalfClosed reports whether one direction has ended with a FIN, and when.
func (p *Pair) HalfClosed() (time.Time, bool) {
	ns := p.halfClosedAt.Load()
	return time.Unix(0, ns), ns != 0
}

// Run relays until both directions end or the pair is aborted, and
// returns why it ended. It closes both sockets.
func (p *Pair) Run() (reason string, err error) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		p.half(p.A, p.B, &p.aToB, p.gate != nil && p.gateFromA, ReasonResetA, ReasonResetB, ReasonErrorA, ReasonErrorB)
	}()
	p.half(p.B, p.A, &p.bToA, p.gate != nil && !p.gateFromA, ReasonResetB, ReasonResetA, ReasonErrorB, ReasonErrorA)
	wg.Wait()
	return p.reason, p.err
}

// Abort ends the pair with a reset on both sides (SO_LINGER 0 then close),
// so neither end host is left with a connection that silently hangs.
func (p *Pair) Abort(reason string, err error) {
	p.endOnce.Do(func() {
		p.reason, p.err = reason, err
		close(p.closed)
		p.A.SetLinger(0)
		p.B.SetLinger(0)
		p.A.Close()
		p.B.Close()
	})
}

// finish closes both sockets normally once both directions saw a FIN.
func (p *Pair) finish() {
	p.endOnce.Do(func() {
		p.reason = ReasonClosed
		close(p.closed)
		p.A.Close()
		p.B.Close()
	})
}

func (p *Pair) half(src, dst *net.TCPConn, n *atomic.Int64, gated bool, resetSrc, resetDst, errSrc, errDst string) {
	rerr, werr := p.copy(src, dst, n, gated)
	switch {
	case rerr == nil && werr == nil:
		// FIN from src: pass it on as a FIN to dst and keep the other
		// direction running (half-close).
		if err := dst.CloseWrite(); err != nil {
			if !errors.Is(err, net.ErrClosed) {
				p.Abort(resetDst, fmt.Errorf("shutdown: %w", err))
			}
			return
		}
		if p.halvesDone.Add(1) == 2 {
			p.finish()
			return
		}
		p.halfClosedAt.CompareAndSwap(0, time.Now().UnixNano())
		p.watch(src, resetSrc, errSrc)
	case rerr != nil:
		p.fail(rerr, resetSrc, errSrc)
	default:
		p.fail(werr, resetDst, errDst)
	}
}

func (p *Pair) fail(err error, resetReason, errReason string) {
	if errors.Is(err, net.ErrClosed) {
		return // the pair was already ended by the other direction or by Abort
	}
	if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		p.Abort(resetReason, err)
		return
	}
	p.Abort(errReason, err)
}

// copy splices src into dst until EOF (both errors nil), a read error or a
// write error. A gated direction asks p.gate how much it may read first.
func (p *Pair) copy(src, dst *net.TCPConn, n *atomic.Int64, gated bool) (readErr, writeErr error) {
	srcRC, err := src.SyscallConn()
	if err != nil {
		return err, nil
	}
	dstRC, err := dst.SyscallConn()
	if err != nil {
		return nil, err
	}
	var pipe *Pipe
	defer func() {
		if pipe != nil {
			p.pool.Put(pipe)
		}
	}()
	size := p.pool.Size()
	for {
		max := size
		if gated {
			if max = p.gate.Allow(size, p.closed); max == 0 {
				return net.ErrClosed, nil
			}
		}
		var got int64
		var serr error
		err := srcRC.Read(func(fd uintptr) bool {
			if pipe == nil {
				if pipe, serr = p.pool.Get(); serr != nil {
					return true
				}
			}
			if gated {
				p.moving.Lock()
			}
			for {
				got, serr = unix.Splice(int(fd), nil, pipe.w, nil, max, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
				if serr != unix.EINTR {
					break
				}
			}
			if gated {
				if got > 0 {
					p.pending.Add(got)
				}
				p.moving.Unlock()
			}
			if serr == unix.EAGAIN {
				// Source drained and the pipe is empty: give the pipe
				// back while waiting, so idle connections hold none.
				p.pool.Put(pipe)
				pipe = nil
				return false
			}
			return true
		})
		if err != nil {
			return err, nil
		}
		if serr != nil {
			return fmt.Errorf("splice from socket: %w", serr), nil
		}
		if got == 0 {
			return nil, nil
		}
		armed := false
		for left := int(got); left > 0; {
			var wrote int64
			var werr error
			blocked := false
			err := dstRC.Write(func(fd uintptr) bool {
				if gated {
					p.moving.Lock()
				}
				for {
					wrote, werr = unix.Splice(pipe.r, nil, int(fd), nil, left, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
					if werr != unix.EINTR {
						break
					}
				}
				if gated {
					if wrote > 0 {
						p.pending.Add(-wrote)
					}
					p.moving.Unlock()
				}
				if werr == unix.EAGAIN && !armed {
					blocked = true // leave to arm the probe deadline first
					return true
				}
				return werr != unix.EAGAIN
			})
			if blocked || errors.Is(err, os.ErrDeadlineExceeded) {
				// dst is full. Meanwhile nobody reads src, so a reset
				// there would go unnoticed until dst drains: probe it.
				if serr := sockErr(srcRC); serr != nil {
					p.pool.Discard(pipe)
					pipe = nil
					return serr, nil
				}
				armed = true
				dst.SetWriteDeadline(time.Now().Add(probeInterval))
				continue
			}
			if err == nil && werr != nil {
				err = fmt.Errorf("splice to socket: %w", werr)
			}
			if err != nil {
				p.pool.Discard(pipe)
				pipe = nil
				return nil, err
			}
			left -= int(wrote)
			n.Add(wrote)
		}
		if armed {
			dst.SetWriteDeadline(time.Time{})
		}
		p.lastActive.Store(time.Now().UnixNano())
	}
}

// probeInterval bounds how late a reset of the source is noticed while
// the destination is too full to take more data.
const probeInterval = 250 * time.Millisecond

// sockErr returns the pending socket error of c (e.g. ECONNRESET after a
// reset), or nil.
func sockErr(c syscall.RawConn) error {
	var v int
	var gerr error
	if err := c.Control(func(fd uintptr) {
		v, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR)
	}); err != nil {
		return err
	}
	if gerr != nil {
		return gerr
	}
	if v != 0 {
		return fmt.Errorf("socket error: %w", syscall.Errno(v))
	}
	return nil
}

// watch waits on a socket whose read side has ended, to notice a reset
// that arrives later (the peer may abort after its FIN while the other
// direction is still running). It returns when the pair ends.
func (p *Pair) watch(c *net.TCPConn, resetReason, errReason string) {
	rc, err := c.SyscallConn()
	if err != nil {
		return
	}
	var soErr int
	err = rc.Read(func(fd uintptr) bool {
		v, gerr := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR)
		if gerr != nil {
			soErr = int(unix.EBADF)
			return true
		}
		soErr = v
		return v != 0
	})
	if err != nil {
		return // closed by finish or Abort
	}
	p.fail(syscall.Errno(soErr), resetReason, errReason)
}
