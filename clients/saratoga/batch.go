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

// batchConn moves several datagrams per system call (recvmmsg/sendmmsg).
type batchConn interface {
	ReadBatch(ms []ipv4.Message, flags int) (int, error)
	WriteBatch(ms []ipv4.Message, flags int) (int, error)
}

// batchIO returns the batching view of c, or nil if c cannot batch: a
// socket from ListenUDP batches itself, a *net.UDPConn through
// ipv4.PacketConn (whose batch calls only wrap recvmmsg/sendmmsg, so they
// work on IPv6 sockets too).
func batchIO(c net.PacketConn) batchConn {
	switch c := c.(type) {
	case batchConn:
		return c
	case *net.UDPConn:
		return ipv4.NewPacketConn(c)
	}
	return nil
}

// A run of frames of one size goes to the kernel as one datagram with a
// UDP_SEGMENT control message (UDP segmentation offload, Linux): the kernel
// cuts it back into the frames below the UDP layer, so one pass through the
// socket, UDP and IP code serves the whole run instead of one per frame.
// The frames on the wire are the same. The limits: the kernel takes at most
// 64 segments (UDP_MAX_SEGMENTS on older kernels) and an IP datagram's size.
const (
	maxGSOSegments = 64
	maxGSOBytes    = 65000
)

// batchSender writes groups of frames to one peer.
type batchSender struct {
	conn net.PacketConn
	pc   batchConn
	addr net.Addr
	msgs []ipv4.Message
	oob  []byte
	// off is set when a batch write failed where a single write worked:
	// this socket cannot batch, so it is not tried again. gsoOff is set
	// when a segmented write failed (an old kernel, or a route whose MTU
	// is below the frame): batches then go frame by frame.
	off    atomic.Bool
	gsoOff atomic.Bool
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
	if b.pc == nil || b.off.Load() || len(frames) < 2 {
		for _, f := range frames {
			_, _ = b.conn.WriteTo(f, b.addr)
		}
		return
	}
	if gsoSupported && !b.gsoOff.Load() {
		n := b.sendSegmented(frames)
		if n == len(frames) {
			return
		}
		frames = frames[n:]
	}
	b.sendEach(frames)
}

// gsoRuns groups frames into datagrams for segmentation offload: each is
// a run of frames of its first frame's size, possibly ending with one
// shorter frame (the kernel cuts at that size; only the last segment may
// be short). A run of one frame is sent as it is.
func (b *batchSender) gsoRuns(frames [][]byte) []ipv4.Message {
	if need := len(frames) * gsoCmsgLen; cap(b.oob) < need {
		b.oob = make([]byte, need)
	}
	msgs, oob := b.msgs[:0], b.oob[:0]
	for i := 0; i < len(frames); {
		size := len(frames[i])
		j, n := i+1, size
		for j < len(frames) && j-i < maxGSOSegments && len(frames[j]) <= size && n+len(frames[j]) <= maxGSOBytes {
			n += len(frames[j])
			j++
			if len(frames[j-1]) < size {
				break
			}
		}
		m := ipv4.Message{Buffers: frames[i:j], Addr: b.addr}
		if j-i > 1 {
			m.OOB = putGSOCmsg(oob[len(oob):len(oob)+gsoCmsgLen], size)
			oob = oob[:len(oob)+gsoCmsgLen]
		}
		msgs = append(msgs, m)
		i = j
	}
	b.msgs = msgs
	return msgs
}

// sendSegmented writes frames as segmented datagrams, all in one sendmmsg
// call when it can, and returns how many frames went out. On an error it
// stops using segmentation for this peer.
func (b *batchSender) sendSegmented(frames [][]byte) int {
	msgs := b.gsoRuns(frames)
	defer clear(b.msgs[:len(msgs)]) // do not pin the caller's buffers
	sent := 0
	for len(msgs) > 0 {
		n, err := b.pc.WriteBatch(msgs, 0)
		for _, m := range msgs[:n] {
			sent += len(m.Buffers)
		}
		if err != nil || n == 0 {
			b.gsoOff.Store(true)
			return sent
		}
		msgs = msgs[n:]
	}
	return sent
}

// sendEach writes frames one datagram each, several per sendmmsg call.
func (b *batchSender) sendEach(frames [][]byte) {
	if cap(b.msgs) < len(frames) {
		b.msgs = make([]ipv4.Message, len(frames))
	}
	msgs := b.msgs[:len(frames)]
	for i := range frames {
		msgs[i] = ipv4.Message{Buffers: frames[i : i+1 : i+1], Addr: b.addr}
	}
	defer clear(b.msgs[:len(frames)])
	for len(msgs) > 0 {
		n, err := b.pc.WriteBatch(msgs, 0)
		if err != nil || n == 0 {
			break
		}
		msgs = msgs[n:]
	}
	rest := frames[len(frames)-len(msgs):]
	if len(rest) > 0 {
		if _, err := b.conn.WriteTo(rest[0], b.addr); err == nil {
			b.off.Store(true)
		}
		rest = rest[1:]
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
