//go:build linux

// Package rawsock opens AF_PACKET raw sockets bound to one interface, for
// bridging whole Ethernet frames (every EtherType) in userspace.
package rawsock

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Options tune a socket. Zero values pick the defaults noted on each field.
type Options struct {
	// QdiscBypass sends straight to the driver (PACKET_QDISC_BYPASS),
	// skipping the egress qdisc: the emulator is the qdisc. Frames sent this
	// way are not seen by taps (tcpdump) on the emulator's own ports.
	QdiscBypass bool
	RcvBuf      int           // SO_RCVBUFFORCE bytes, default 8 MiB
	SndBuf      int           // SO_SNDBUFFORCE bytes, default 8 MiB
	ReadTimeout time.Duration // how long Read blocks before returning 0, default 100 ms
}

// Socket is an AF_PACKET SOCK_RAW socket bound to one interface in
// promiscuous mode that ignores frames the host itself sends
// (PACKET_IGNORE_OUTGOING), so bridged frames never loop back.
type Socket struct {
	fd      int
	Name    string
	ifindex int

	mu        sync.Mutex
	drops     uint64 // accumulated PACKET_STATISTICS drops (the kernel resets on read)
	truncated atomic.Uint64
	closeOnce sync.Once
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// Open creates the socket on interface name.
func Open(name string, o Options) (*Socket, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return nil, fmt.Errorf("interface %s: %w", name, err)
	}
	if o.RcvBuf == 0 {
		o.RcvBuf = 8 << 20
	}
	if o.SndBuf == 0 {
		o.SndBuf = 8 << 20
	}
	if o.ReadTimeout == 0 {
		o.ReadTimeout = 100 * time.Millisecond
	}
	// Protocol 0 at creation: the socket receives nothing until bind names
	// the interface, so no frame from another interface slips in.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: socket: %w", name, err)
	}
	s := &Socket{fd: fd, Name: name, ifindex: ifi.Index}
	fail := func(what string, err error) (*Socket, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("%s: %s: %w", name, what, err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1); err != nil {
		return fail("PACKET_IGNORE_OUTGOING", err)
	}
	if o.QdiscBypass {
		if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1); err != nil {
			return fail("PACKET_QDISC_BYPASS", err)
		}
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, o.RcvBuf); err != nil {
		return fail("SO_RCVBUFFORCE", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, o.SndBuf); err != nil {
		return fail("SO_SNDBUFFORCE", err)
	}
	tv := unix.NsecToTimeval(o.ReadTimeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return fail("SO_RCVTIMEO", err)
	}
	sll := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index}
	if err := unix.Bind(fd, sll); err != nil {
		return fail("bind", err)
	}
	mreq := &unix.PacketMreq{Ifindex: int32(ifi.Index), Type: unix.PACKET_MR_PROMISC}
	if err := unix.SetsockoptPacketMreq(fd, unix.SOL_PACKET, unix.PACKET_ADD_MEMBERSHIP, mreq); err != nil {
		return fail("promiscuous mode", err)
	}
	return s, nil
}

// Read receives one frame into b. It returns 0, nil when the read timeout
// expires with nothing received. A frame larger than b is dropped and
// counted (see Truncated).
func (s *Socket) Read(b []byte) (int, error) {
	for {
		// MSG_TRUNC makes the kernel report the real length of a frame that
		// did not fit.
		n, _, errno := unix.Syscall6(unix.SYS_RECVFROM, uintptr(s.fd),
			uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), unix.MSG_TRUNC, 0, 0)
		switch errno {
		case 0:
			if int(n) > len(b) {
				s.truncated.Add(1)
				continue
			}
			return int(n), nil
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return 0, nil
		default:
			return 0, fmt.Errorf("%s: recv: %w", s.Name, errno)
		}
	}
}

// Write sends one complete Ethernet frame out of the interface.
func (s *Socket) Write(b []byte) error {
	for {
		_, _, errno := unix.Syscall6(unix.SYS_SENDTO, uintptr(s.fd),
			uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), 0, 0, 0)
		switch errno {
		case 0:
			return nil
		case unix.EINTR:
			continue
		default:
			return fmt.Errorf("%s: send: %w", s.Name, errno)
		}
	}
}

// KernelDrops returns the number of frames the kernel dropped because the
// socket's receive buffer was full, accumulated since Open.
func (s *Socket) KernelDrops() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, err := unix.GetsockoptTpacketStats(s.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS)
	if err == nil {
		s.drops += uint64(st.Drops)
	}
	return s.drops
}

// Truncated returns how many frames were dropped for exceeding the read
// buffer.
func (s *Socket) Truncated() uint64 { return s.truncated.Load() }

// Close closes the socket. Call it only after readers and writers stopped.
func (s *Socket) Close() error {
	var err error
	s.closeOnce.Do(func() { err = unix.Close(s.fd) })
	return err
}
