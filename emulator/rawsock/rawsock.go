//go:build linux

// Package rawsock opens AF_PACKET raw sockets bound to one interface, for
// bridging whole Ethernet frames (every EtherType) in userspace.
package rawsock

import (
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
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
	// KeepOutgoing also delivers frames the host sends (for taps that
	// measure; a bridge must leave it false or it would loop).
	KeepOutgoing bool
	RcvBuf       int // SO_RCVBUFFORCE bytes, default 8 MiB
	SndBuf       int // SO_SNDBUFFORCE bytes, default 8 MiB
	// EtherType, when not 0, makes the socket receive only frames of that
	// EtherType (a kernel filter): a PEP tunnelling its own frames over a
	// bridge port must not wake up for every bridged frame.
	EtherType uint16
	// Ring receives through a TPACKET_V3 mmap ring (see ring.go) instead
	// of recvmmsg; RcvBuf then does not apply.
	Ring bool
}

// sendTimeout bounds a blocked send: frames leave a veth synchronously, so
// a full send buffer that does not drain means the interface is gone.
const sendTimeout = time.Second

// Socket is a pair of AF_PACKET SOCK_RAW sockets bound to one interface: a
// receiving one in promiscuous mode that ignores frames the host itself sends
// (PACKET_IGNORE_OUTGOING), so bridged frames never loop back, and a sending
// one. Sending has its own blocking socket, outside the Go netpoller: every
// sent frame's release signals write space on its socket, and on a socket
// the netpoller watches that is an epoll wake-up per frame, which on a
// virtual machine cost more than the send itself.
type Socket struct {
	fd      int
	file    *os.File // owns fd; registered with the Go netpoller
	rc      syscall.RawConn
	txfd    int // blocking, protocol 0: sends only, receives nothing
	Name    string
	MTU     int // the interface's MTU when opened
	ifindex int

	mu        sync.Mutex
	drops     uint64 // accumulated PACKET_STATISTICS drops (the kernel resets on read)
	truncated atomic.Uint64
	closeOnce sync.Once

	batch *batchState // allocated on first batch use
	ring  *ring       // TPACKET_V3 receive ring, if Options.Ring

	// recvmsg state, used by the single reader.
	iov  unix.Iovec
	msg  unix.Msghdr
	cmsg [64]byte
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func setBuf(fd, force, plain, size int) error {
	err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, force, size)
	if err == unix.EPERM {
		err = unix.SetsockoptInt(fd, unix.SOL_SOCKET, plain, size)
	}
	return err
}

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
	// Protocol 0 at creation: the socket receives nothing until bind names
	// the interface, so no frame from another interface slips in.
	// Non-blocking, so waiting readers park in the Go netpoller instead of
	// holding a thread and a P in a blocking syscall (which delays the
	// transmit goroutines' wake-ups by milliseconds).
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: socket: %w", name, err)
	}
	s := &Socket{fd: fd, Name: name, MTU: ifi.MTU, ifindex: ifi.Index}
	fail := func(what string, err error) (*Socket, error) {
		if s.ring != nil {
			_ = s.ring.close()
		}
		unix.Close(fd)
		return nil, fmt.Errorf("%s: %s: %w", name, what, err)
	}
	if !o.KeepOutgoing {
		if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1); err != nil {
			return fail("PACKET_IGNORE_OUTGOING", err)
		}
	}
	// The FORCE variants exceed net.core.[rw]mem_max but need CAP_NET_ADMIN;
	// without it, fall back to the capped ones.
	if err := setBuf(fd, unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, o.RcvBuf); err != nil {
		return fail("receive buffer", err)
	}
	// Kernel receive timestamps let the emulator measure delay from when a
	// frame arrived, not from when the reader got round to it.
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); err != nil {
		return fail("SO_TIMESTAMPNS", err)
	}
	if o.Ring {
		r, err := setupRing(fd)
		if err != nil {
			return fail("receive ring", err)
		}
		s.ring = r
	}
	if o.EtherType != 0 {
		if err := attachEtherTypeFilter(fd, o.EtherType); err != nil {
			return fail("EtherType filter", err)
		}
	}
	sll := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index}
	if err := unix.Bind(fd, sll); err != nil {
		return fail("bind", err)
	}
	mreq := &unix.PacketMreq{Ifindex: int32(ifi.Index), Type: unix.PACKET_MR_PROMISC}
	if err := unix.SetsockoptPacketMreq(fd, unix.SOL_PACKET, unix.PACKET_ADD_MEMBERSHIP, mreq); err != nil {
		return fail("promiscuous mode", err)
	}
	txfd, err := openSender(ifi.Index, o)
	if err != nil {
		return fail("sending socket", err)
	}
	s.txfd = txfd
	s.file = os.NewFile(uintptr(fd), "packet:"+name)
	rc, err := s.file.SyscallConn()
	if err != nil {
		s.file.Close()
		unix.Close(txfd)
		if s.ring != nil {
			_ = s.ring.close()
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	s.rc = rc
	return s, nil
}

// attachEtherTypeFilter installs a classic BPF program passing only frames
// of one EtherType. It goes on before bind, so no other frame is queued.
// (Binding to the EtherType instead would see nothing on a bridge port:
// the bridge consumes frames before protocol handlers run; ETH_P_ALL taps
// run first.)
func attachEtherTypeFilter(fd int, et uint16) error {
	prog := []unix.SockFilter{
		{Code: 0x28, K: 12},                       // ldh [12]
		{Code: 0x15, Jt: 0, Jf: 1, K: uint32(et)}, // jeq #et
		{Code: 0x06, K: 0x40000},                  // ret: whole frame
		{Code: 0x06, K: 0},                        // ret: drop
	}
	fp := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	return unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &fp)
}

// openSender creates the blocking sending socket. Bound with protocol 0 it
// receives nothing; the kernel takes each frame's EtherType from its header.
func openSender(ifindex int, o Options) (int, error) {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	fail := func(what string, err error) (int, error) {
		unix.Close(fd)
		return -1, fmt.Errorf("%s: %w", what, err)
	}
	if o.QdiscBypass {
		if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1); err != nil {
			return fail("PACKET_QDISC_BYPASS", err)
		}
	}
	if err := setBuf(fd, unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, o.SndBuf); err != nil {
		return fail("send buffer", err)
	}
	tv := unix.NsecToTimeval(sendTimeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv); err != nil {
		return fail("SO_SNDTIMEO", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Ifindex: ifindex}); err != nil {
		return fail("bind", err)
	}
	return fd, nil
}

// Read receives one frame into b, waiting until one arrives or the read
// deadline passes (then it returns an error satisfying
// errors.Is(err, os.ErrDeadlineExceeded)). age is how long ago the kernel
// received the frame (0 if unknown). A frame larger than b is dropped and
// counted (see Truncated).
func (s *Socket) Read(b []byte) (n int, age time.Duration, err error) {
	if s.ring != nil {
		var sizes [1]int
		var ages [1]time.Duration
		got, err := s.ReadBatch([][]byte{b}, sizes[:], ages[:])
		if err != nil || got == 0 {
			return 0, 0, err
		}
		return sizes[0], ages[0], nil
	}
	var rerr error
	err = s.rc.Read(func(fd uintptr) bool {
		for {
			s.iov.Base = &b[0]
			s.iov.SetLen(len(b))
			s.msg = unix.Msghdr{Iov: &s.iov, Iovlen: 1, Control: &s.cmsg[0]}
			s.msg.SetControllen(len(s.cmsg))
			// MSG_TRUNC makes the kernel report the real length of a frame
			// that did not fit.
			r, _, errno := unix.Syscall(unix.SYS_RECVMSG, fd, uintptr(unsafe.Pointer(&s.msg)), unix.MSG_TRUNC)
			switch errno {
			case 0:
				if int(r) > len(b) {
					s.truncated.Add(1)
					continue
				}
				n = int(r)
				age = s.age()
				return true
			case unix.EINTR:
				continue
			case unix.EAGAIN:
				return false
			default:
				rerr = errno
				return true
			}
		}
	})
	if err == nil {
		err = rerr
	}
	if err != nil {
		return 0, 0, fmt.Errorf("%s: recv: %w", s.Name, err)
	}
	return n, age, nil
}

// age returns the age of the frame last received by Read.
func (s *Socket) age() time.Duration {
	return cmsgAge(s.cmsg[:], int(s.msg.Controllen), time.Now())
}

// cmsgAge extracts an SCM_TIMESTAMPNS control message (CLOCK_REALTIME) and
// returns how long before now it was; 0 if absent or implausible.
func cmsgAge(cmsg []byte, cl int, now time.Time) time.Duration {
	if cl < unix.SizeofCmsghdr+16 || cl > len(cmsg) {
		return 0
	}
	h := (*unix.Cmsghdr)(unsafe.Pointer(&cmsg[0]))
	if h.Level != unix.SOL_SOCKET || h.Type != unix.SCM_TIMESTAMPNS {
		return 0
	}
	ts := (*unix.Timespec)(unsafe.Pointer(&cmsg[unix.SizeofCmsghdr]))
	age := now.Sub(time.Unix(ts.Sec, ts.Nsec))
	// Guard against wall-clock steps: an implausible age is ignored.
	if age < 0 || age > time.Second {
		return 0
	}
	return age
}

// SetReadDeadline bounds the wait of current and future Reads.
func (s *Socket) SetReadDeadline(t time.Time) error { return s.file.SetReadDeadline(t) }

// Write sends one complete Ethernet frame out of the interface, waiting
// for socket buffer space if needed.
func (s *Socket) Write(b []byte) error {
	for {
		_, _, errno := unix.Syscall6(unix.SYS_SENDTO, uintptr(s.txfd),
			uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), 0, 0, 0)
		switch errno {
		case 0:
			return nil
		case unix.EINTR:
			continue
		default:
			return fmt.Errorf("%s: send: %w", s.Name, sendErr(errno))
		}
	}
}

// sendErr names a send that timed out waiting for buffer space.
func sendErr(errno unix.Errno) error {
	if errno == unix.EAGAIN {
		return fmt.Errorf("no buffer space for %v: %w", sendTimeout, errno)
	}
	return errno
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

// Ring reports whether the socket receives through a TPACKET_V3 ring.
func (s *Socket) Ring() bool { return s.ring != nil }

// Close closes the socket; blocked Reads return an error. With a ring, no
// Read may be running or start (the mapping goes away).
func (s *Socket) Close() error {
	var err error
	s.closeOnce.Do(func() {
		err = s.file.Close()
		unix.Close(s.txfd)
		if s.ring != nil {
			_ = s.ring.close()
		}
	})
	return err
}
