// Package nfqueue is the small part of the kernel's nfnetlink_queue
// protocol pepd needs for its end-to-end handshake mode: bind one queue,
// receive each queued packet (its id, mark and IP packet), and give a
// verdict (accept, accept with a new mark, or drop).
//
// Written against include/uapi/linux/netfilter/nfnetlink_queue.h with
// golang.org/x/sys/unix only, so pepd keeps its single dependency. The
// kernel here has xt_NFQUEUE but not nft's queue expression, hence the
// iptables rule in pep/adapters/lib/intercept.sh.
package nfqueue

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// nfnetlink constants (linux/netfilter/nfnetlink.h, nfnetlink_queue.h).
const (
	subsysQueue = 3

	msgPacket  = 0
	msgVerdict = 1
	msgConfig  = 2

	cfgCmdBind = 1

	attrCfgCmd    = 1
	attrCfgParams = 2
	attrCfgMaxLen = 3

	attrPacketHdr  = 1
	attrVerdictHdr = 2
	attrMark       = 3
	attrPayload    = 10

	copyPacket = 2
)

// Verdicts (linux/netfilter.h).
const (
	Drop   = 0
	Accept = 1
)

// Packet is one queued packet.
type Packet struct {
	ID      uint32
	Mark    uint32
	Payload []byte // the IP packet from its header on
}

// Conn is a bound queue.
type Conn struct {
	fd     int
	queue  uint16
	mu     sync.Mutex // serialises verdicts (sent from many goroutines)
	closed atomic.Bool
	seq    uint32
	buf    []byte
}

// Open binds queue num in the calling thread's network namespace. Only
// one socket may own a queue: a second pepd on the same queue fails here.
func Open(num uint16) (*Conn, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("nfqueue socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("nfqueue bind: %w", err)
	}
	// ENOBUFS on a full socket would lose packets silently; the kernel
	// then keeps them queued (maxlen below) instead of reporting.
	unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_NO_ENOBUFS, 1)
	tv := unix.NsecToTimeval(pollInterval.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("nfqueue receive timeout: %w", err)
	}
	c := &Conn{fd: fd, queue: num, buf: make([]byte, 1<<16)}
	cmd := []byte{cfgCmdBind, 0, 0, 0} // command, pad, pf (AF_UNSPEC)
	if err := c.request(msgConfig, attr(attrCfgCmd, cmd)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("nfqueue bind queue %d: %w", num, err)
	}
	// Copy whole packets: pepd needs the IP and TCP headers (a SYN with
	// options is at most 60 + 60 bytes; the range is generous).
	params := make([]byte, 5)
	binary.BigEndian.PutUint32(params, 0xffff)
	params[4] = copyPacket
	maxlen := binary.BigEndian.AppendUint32(nil, 4096)
	if err := c.request(msgConfig, append(attr(attrCfgParams, params), attr(attrCfgMaxLen, maxlen)...)); err != nil {
		c.Close()
		return nil, fmt.Errorf("nfqueue copy mode: %w", err)
	}
	return c, nil
}

// Close closes the socket; the kernel unbinds the queue with it (and the
// rule's bypass then lets packets pass unqueued). Call it after Receive
// has returned.
func (c *Conn) Close() error { return unix.Close(c.fd) }

// Shutdown makes Receive return os.ErrClosed within pollInterval. (A
// netlink socket has no shutdown(2), hence the receive timeout.)
func (c *Conn) Shutdown() { c.closed.Store(true) }

// pollInterval bounds how long Receive takes to notice Shutdown.
const pollInterval = 200 * time.Millisecond

// Receive blocks until the next packet. It returns os.ErrClosed after
// Shutdown.
func (c *Conn) Receive() (Packet, error) {
	for {
		if c.closed.Load() {
			return Packet{}, os.ErrClosed
		}
		n, _, err := unix.Recvfrom(c.fd, c.buf, 0)
		if err != nil {
			if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
				continue
			}
			return Packet{}, err
		}
		msgs, err := parseMessages(c.buf[:n])
		if err != nil {
			return Packet{}, err
		}
		for _, m := range msgs {
			if m.typ == uint16(subsysQueue<<8|msgPacket) {
				return parsePacket(m.body)
			}
		}
	}
}

// Verdict decides packet id's fate; with setMark the packet leaves the
// queue carrying mark (the rules downstream can act on it).
func (c *Conn) Verdict(id uint32, verdict uint32, setMark bool, mark uint32) error {
	hdr := binary.BigEndian.AppendUint32(nil, verdict)
	hdr = binary.BigEndian.AppendUint32(hdr, id)
	attrs := attr(attrVerdictHdr, hdr)
	if setMark {
		attrs = append(attrs, attr(attrMark, binary.BigEndian.AppendUint32(nil, mark))...)
	}
	return c.send(msgVerdict, attrs, false)
}

// request sends a config message and waits for its acknowledgement.
// Only Open calls it, before Receive runs.
func (c *Conn) request(typ uint16, attrs []byte) error {
	if err := c.send(typ, attrs, true); err != nil {
		return err
	}
	buf := make([]byte, 8192)
	for {
		n, _, err := unix.Recvfrom(c.fd, buf, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		msgs, err := parseMessages(buf[:n])
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if m.typ == unix.NLMSG_ERROR && m.seq == c.seq {
				if len(m.body) < 4 {
					return errors.New("short netlink error message")
				}
				if code := int32(binary.NativeEndian.Uint32(m.body)); code != 0 {
					return unix.Errno(-code)
				}
				return nil
			}
		}
	}
}

func (c *Conn) send(typ uint16, attrs []byte, ack bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	flags := uint16(unix.NLM_F_REQUEST)
	if ack {
		flags |= unix.NLM_F_ACK
	}
	msg := make([]byte, 16, 16+4+len(attrs))
	binary.NativeEndian.PutUint32(msg[0:], uint32(16+4+len(attrs)))
	binary.NativeEndian.PutUint16(msg[4:], subsysQueue<<8|typ)
	binary.NativeEndian.PutUint16(msg[6:], flags)
	binary.NativeEndian.PutUint32(msg[8:], c.seq)
	// nfgenmsg: family AF_UNSPEC, version 0, resource id = queue (big endian).
	msg = append(msg, unix.AF_UNSPEC, 0)
	msg = binary.BigEndian.AppendUint16(msg, c.queue)
	msg = append(msg, attrs...)
	return unix.Sendto(c.fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
}

func attr(typ uint16, data []byte) []byte {
	l := 4 + len(data)
	b := make([]byte, 4, align(l))
	binary.NativeEndian.PutUint16(b[0:], uint16(l))
	binary.NativeEndian.PutUint16(b[2:], typ)
	b = append(b, data...)
	return b[:align(l)]
}

func align(n int) int { return (n + 3) &^ 3 }

type message struct {
	typ  uint16
	seq  uint32
	body []byte
}

// parseMessages splits a netlink datagram into messages.
func parseMessages(b []byte) ([]message, error) {
	var out []message
	for len(b) >= 16 {
		l := int(binary.NativeEndian.Uint32(b[0:]))
		if l < 16 || l > len(b) {
			return nil, fmt.Errorf("netlink message length %d of %d bytes", l, len(b))
		}
		out = append(out, message{typ: binary.NativeEndian.Uint16(b[4:]), seq: binary.NativeEndian.Uint32(b[8:]), body: b[16:l]})
		b = b[min(align(l), len(b)):]
	}
	return out, nil
}

// parsePacket reads an NFQNL_MSG_PACKET body: nfgenmsg, then attributes.
func parsePacket(b []byte) (Packet, error) {
	var p Packet
	if len(b) < 4 {
		return p, errors.New("short nfqueue packet message")
	}
	b = b[4:]
	seenHdr := false
	for len(b) >= 4 {
		l := int(binary.NativeEndian.Uint16(b[0:]))
		typ := binary.NativeEndian.Uint16(b[2:]) & 0x3fff // without NLA_F_NESTED / NET_BYTEORDER
		if l < 4 || l > len(b) {
			return p, fmt.Errorf("nfqueue attribute length %d of %d bytes", l, len(b))
		}
		data := b[4:l]
		switch typ {
		case attrPacketHdr:
			if len(data) < 4 {
				return p, errors.New("short nfqueue packet header")
			}
			p.ID = binary.BigEndian.Uint32(data)
			seenHdr = true
		case attrMark:
			if len(data) < 4 {
				return p, errors.New("short nfqueue mark")
			}
			p.Mark = binary.BigEndian.Uint32(data)
		case attrPayload:
			p.Payload = append([]byte(nil), data...)
		}
		b = b[min(align(l), len(b)):]
	}
	if !seenHdr {
		return p, errors.New("nfqueue packet without header")
	}
	return p, nil
}

// SYN is what pepd needs of a queued TCP segment.
type SYN struct {
	Src, Dst netip.AddrPort
	SYN, ACK bool
}

// ParseTCP reads the addresses and flags of an IPv4 TCP segment. It
// rejects anything else (IPv6, other protocols, fragments, truncation).
func ParseTCP(pkt []byte) (SYN, error) {
	var s SYN
	if len(pkt) < 20 {
		return s, errors.New("short IPv4 header")
	}
	if pkt[0]>>4 != 4 {
		return s, fmt.Errorf("IP version %d, want 4", pkt[0]>>4)
	}
	ihl := int(pkt[0]&0x0f) * 4
	if ihl < 20 || len(pkt) < ihl+20 {
		return s, errors.New("truncated IPv4/TCP header")
	}
	if pkt[9] != unix.IPPROTO_TCP {
		return s, fmt.Errorf("IP protocol %d, want TCP", pkt[9])
	}
	if frag := binary.BigEndian.Uint16(pkt[6:]); frag&0x1fff != 0 {
		return s, errors.New("IPv4 fragment")
	}
	src, _ := netip.AddrFromSlice(pkt[12:16])
	dst, _ := netip.AddrFromSlice(pkt[16:20])
	tcp := pkt[ihl:]
	s.Src = netip.AddrPortFrom(src, binary.BigEndian.Uint16(tcp[0:]))
	s.Dst = netip.AddrPortFrom(dst, binary.BigEndian.Uint16(tcp[2:]))
	s.SYN = tcp[13]&0x02 != 0
	s.ACK = tcp[13]&0x10 != 0
	return s, nil
}
