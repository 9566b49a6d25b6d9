package saratoga

import (
	"errors"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/ipv4"
)

// Datagrams move several per system call (recvmmsg/sendmmsg through
// golang.org/x/net/ipv4) when the socket is a plain *net.UDPConn: at a few
// hundred frames a second each, the per-call cost is most of what
// Saratoga's processes spend. Other PacketConns (the tests' loss wrapper)
// go one datagram at a time.

// readBatch is how many datagrams one receive call can return.
const readBatch = 16

// readCoalesce is how long the reader pauses after a receive call that did
// not fill its batch, letting paced frames (one every 1.5 ms at 8 Mbit/s)
// queue in the socket buffer so the next call returns several: software
// interrupt coalescing. It delays a STATUS answer by at most this much,
// small against any satellite RTT.
const readCoalesce = 16 * time.Millisecond

// batchIO returns the batching view of c, or nil if c cannot batch.
// ipv4.PacketConn's batch calls only wrap recvmmsg/sendmmsg, so they work
// on IPv6 sockets too.
func batchIO(c net.PacketConn) *ipv4.PacketConn {
	if _, ok := c.(*net.UDPConn); !ok {
		return nil
	}
	return ipv4.NewPacketConn(c)
}

// batchSender writes groups of frames to one peer.
type batchSender struct {
	conn net.PacketConn
	pc   *ipv4.PacketConn
	addr net.Addr
	msgs []ipv4.Message
	// off is set when a batch write failed where a single write worked:
	// this socket cannot batch, so it is not tried again.
	off atomic.Bool
}

func newBatchSender(conn net.PacketConn, addr net.Addr) *batchSender {
	return &batchSender{conn: conn, pc: batchIO(conn), addr: addr}
}

// send writes one frame.
func (b *batchSender) send(f []byte) error {
	_, err := b.conn.WriteTo(f, b.addr)
	return err
}

// sendBatch writes frames in as few calls as it can. Errors are loss to a
// rate-based protocol (the holes get reported), so they are not returned.
func (b *batchSender) sendBatch(frames [][]byte) {
	rest := frames
	if b.pc != nil && !b.off.Load() && len(frames) > 1 {
		if cap(b.msgs) < len(frames) {
			b.msgs = make([]ipv4.Message, len(frames))
			for i := range b.msgs {
				b.msgs[i].Buffers = make([][]byte, 1)
			}
		}
		msgs := b.msgs[:len(frames)]
		for i, f := range frames {
			msgs[i].Buffers[0], msgs[i].Addr = f, b.addr
		}
		for len(msgs) > 0 {
			n, err := b.pc.WriteBatch(msgs, 0)
			if err != nil {
				break
			}
			msgs = msgs[n:]
		}
		rest = frames[len(frames)-len(msgs):]
		if len(rest) > 0 {
			if _, err := b.conn.WriteTo(rest[0], b.addr); err == nil {
				b.off.Store(true)
			}
			rest = rest[1:]
		}
		for i := range b.msgs[:len(frames)] {
			b.msgs[i].Buffers[0] = nil // do not pin the caller's buffers
		}
	}
	for _, f := range rest {
		_, _ = b.conn.WriteTo(f, b.addr)
	}
}

// readLoop decodes datagrams from conn and hands them to dispatch until
// conn fails (closed or read deadline hit). Undecodable datagrams are
// counted in bad and dropped.
func readLoop(conn net.PacketConn, bad *atomic.Uint64, dispatch func(net.Addr, any)) error {
	pc := batchIO(conn)
	n := readBatch
	if pc == nil {
		n = 1
	}
	msgs := make([]ipv4.Message, n)
	for i := range msgs {
		msgs[i].Buffers = [][]byte{make([]byte, maxDatagram)}
	}
	// Decoded frames alias their bytes, so each is copied out of the
	// receive buffers; one slab serves many frames.
	var slab []byte
	for {
		got := 1
		var err error
		if pc != nil {
			got, err = pc.ReadBatch(msgs, 0)
		} else {
			msgs[0].N, msgs[0].Addr, err = conn.ReadFrom(msgs[0].Buffers[0])
		}
		if err != nil {
			if errors.Is(err, syscall.ECONNREFUSED) {
				// ICMP port unreachable from an earlier send; the socket
				// is still fine.
				continue
			}
			return err
		}
		for _, m := range msgs[:got] {
			if len(slab) < m.N {
				slab = make([]byte, max(64<<10, m.N))
			}
			b := slab[:m.N:m.N]
			slab = slab[m.N:]
			copy(b, m.Buffers[0][:m.N])
			f, err := Decode(b)
			if err != nil {
				bad.Add(1)
				continue
			}
			dispatch(m.Addr, f)
		}
		if pc != nil && got < len(msgs) {
			time.Sleep(readCoalesce)
		}
	}
}
