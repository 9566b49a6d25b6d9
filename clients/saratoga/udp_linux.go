package saratoga

import (
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// ListenUDP opens the UDP socket a Saratoga server or client uses. On Linux
// it is a socket the Go runtime's network poller does not watch: the
// poller's epoll is woken by every datagram that arrives while no goroutine
// waits on the socket, so a reader that pauses to let paced frames gather
// (readCoalesce) still cost a thread wake-up and a pass through the
// scheduler per frame, most of a get's CPU time (perf, 30 MiB at
// 8 Mbit/s). Here a reader blocks in poll(2) only when the socket is empty
// and otherwise takes what has gathered with one recvmmsg.
func ListenUDP(network, address string) (net.PacketConn, error) {
	la, err := net.ResolveUDPAddr(network, address)
	if err != nil {
		return nil, err
	}
	c, err := listenRaw(network, la)
	if err != nil {
		return nil, &net.OpError{Op: "listen", Net: network, Addr: la, Err: err}
	}
	return c, nil
}

func listenRaw(network string, la *net.UDPAddr) (*rawUDP, error) {
	v4 := la.IP.To4() != nil || network == "udp4"
	dual := !v4 && network == "udp" && len(la.IP) == 0
	family := unix.AF_INET
	if !v4 {
		family = unix.AF_INET6
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil && dual {
		// No IPv6 in this kernel: an unspecified "udp" address is IPv4.
		family, dual = unix.AF_INET, false
		fd, err = unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	}
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	c := &rawUDP{fd: fd, v6: family == unix.AF_INET6}
	fail := func(op string, err error) (*rawUDP, error) {
		unix.Close(fd)
		return nil, os.NewSyscallError(op, err)
	}
	if dual {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0); err != nil {
			return fail("setsockopt", err)
		}
	}
	var sa unix.RawSockaddrAny
	n := c.putSockaddr(&sa, la)
	if _, _, e := unix.Syscall(unix.SYS_BIND, uintptr(fd), uintptr(unsafe.Pointer(&sa)), uintptr(n)); e != 0 {
		return fail("bind", e)
	}
	got, err := unix.Getsockname(fd)
	if err != nil {
		return fail("getsockname", err)
	}
	switch a := got.(type) {
	case *unix.SockaddrInet4:
		c.laddr = &net.UDPAddr{IP: net.IP(a.Addr[:]).To16(), Port: a.Port}
	case *unix.SockaddrInet6:
		c.laddr = &net.UDPAddr{IP: net.IP(a.Addr[:]), Port: a.Port}
	}
	return c, nil
}

// rawUDP is a blocking UDP socket used through system calls of its own
// (recvmmsg, sendmmsg, poll). It is a net.PacketConn with one limit: a
// read deadline can only be set to now or earlier (which ends reading for
// good, as stopping a server or client needs); later deadlines are refused.
type rawUDP struct {
	fd    int
	v6    bool
	laddr *net.UDPAddr
	// mu is held (read) by every operation that uses fd; Close takes it
	// after waking blocked readers, so fd is never closed under one.
	mu     sync.RWMutex
	closed atomic.Bool
	rdShut atomic.Bool // a past read deadline was set
	// Scratch space of the one reader and of writers (one at a time).
	rmu   sync.Mutex
	rhs   []mmsghdr
	riov  []unix.Iovec
	rsa   []unix.RawSockaddrAny
	last  unix.RawSockaddrAny // the previous sender, whose address is reused
	lastA *net.UDPAddr
	wmu   sync.Mutex
	whs   []mmsghdr
	wiov  []unix.Iovec
	wsa   []unix.RawSockaddrAny
}

// mmsghdr is the kernel's struct mmsghdr (the compiler pads it as C does).
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
}

var _ net.PacketConn = (*rawUDP)(nil)

func (c *rawUDP) LocalAddr() net.Addr { return c.laddr }

// ReadBatch receives up to len(ms) datagrams into each message's first
// buffer, waiting for the first; the same contract as ipv4.PacketConn's.
func (c *rawUDP) ReadBatch(ms []ipv4.Message, _ int) (int, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	c.rmu.Lock()
	defer c.rmu.Unlock()
	for {
		if c.closed.Load() {
			return 0, net.ErrClosed
		}
		if c.rdShut.Load() {
			return 0, os.ErrDeadlineExceeded
		}
		n, err := c.recvmmsg(ms)
		if err == nil {
			return n, nil
		}
		if err != unix.EAGAIN && err != unix.EINTR {
			return 0, os.NewSyscallError("recvmmsg", err)
		}
		// Empty: wait in the kernel, not in the runtime's poller.
		pfd := []unix.PollFd{{Fd: int32(c.fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(pfd, -1); err != nil && err != unix.EINTR {
			return 0, os.NewSyscallError("poll", err)
		}
	}
}

func (c *rawUDP) recvmmsg(ms []ipv4.Message) (int, error) {
	if len(ms) == 0 {
		return 0, nil
	}
	if len(c.rhs) < len(ms) {
		c.rhs, c.riov, c.rsa = make([]mmsghdr, len(ms)), make([]unix.Iovec, len(ms)), make([]unix.RawSockaddrAny, len(ms))
	}
	for i := range ms {
		b := ms[i].Buffers[0]
		c.riov[i] = unix.Iovec{Base: unsafe.SliceData(b)}
		c.riov[i].SetLen(len(b))
		c.rhs[i] = mmsghdr{hdr: unix.Msghdr{Name: (*byte)(unsafe.Pointer(&c.rsa[i])), Namelen: unix.SizeofSockaddrAny, Iov: &c.riov[i]}}
		c.rhs[i].hdr.SetIovlen(1)
	}
	r, _, e := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(c.fd), uintptr(unsafe.Pointer(&c.rhs[0])), uintptr(len(ms)), unix.MSG_DONTWAIT, 0, 0)
	if e != 0 {
		return 0, e
	}
	for i := range int(r) {
		ms[i].N, ms[i].NN, ms[i].Flags = int(c.rhs[i].len), 0, int(c.rhs[i].hdr.Flags)
		ms[i].Addr = c.fromSockaddr(&c.rsa[i])
	}
	return int(r), nil
}

// fromSockaddr converts a sender's address, reusing the previous one's
// value when it is the same peer (nearly every frame).
func (c *rawUDP) fromSockaddr(sa *unix.RawSockaddrAny) net.Addr {
	if c.lastA != nil && *sa == c.last {
		return c.lastA
	}
	var a *net.UDPAddr
	switch sa.Addr.Family {
	case unix.AF_INET:
		p := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		a = &net.UDPAddr{IP: net.IPv4(p.Addr[0], p.Addr[1], p.Addr[2], p.Addr[3]), Port: ntohs(p.Port)}
	case unix.AF_INET6:
		p := (*unix.RawSockaddrInet6)(unsafe.Pointer(sa))
		a = &net.UDPAddr{IP: append(net.IP(nil), p.Addr[:]...), Port: ntohs(p.Port)}
	default:
		return nil
	}
	c.last, c.lastA = *sa, a
	return a
}

// WriteBatch sends each message (its buffers gathered into one datagram,
// with its control bytes) to its address; the same contract as
// ipv4.PacketConn's.
func (c *rawUDP) WriteBatch(ms []ipv4.Message, _ int) (int, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed.Load() {
		return 0, net.ErrClosed
	}
	if len(ms) == 0 {
		return 0, nil
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	nb := 0
	for _, m := range ms {
		nb += len(m.Buffers)
	}
	if len(c.whs) < len(ms) {
		c.whs, c.wsa = make([]mmsghdr, len(ms)), make([]unix.RawSockaddrAny, len(ms))
	}
	if len(c.wiov) < nb {
		c.wiov = make([]unix.Iovec, nb)
	}
	iov := c.wiov
	for i, m := range ms {
		ua, ok := m.Addr.(*net.UDPAddr)
		if !ok {
			return 0, &net.OpError{Op: "write", Net: "udp", Addr: m.Addr, Err: net.InvalidAddrError("not a UDP address")}
		}
		h := &c.whs[i].hdr
		*h = unix.Msghdr{Name: (*byte)(unsafe.Pointer(&c.wsa[i])), Namelen: c.putSockaddr(&c.wsa[i], ua)}
		if len(m.Buffers) > 0 {
			for j, b := range m.Buffers {
				iov[j] = unix.Iovec{Base: unsafe.SliceData(b)}
				iov[j].SetLen(len(b))
			}
			h.Iov = &iov[0]
			h.SetIovlen(len(m.Buffers))
			iov = iov[len(m.Buffers):]
		}
		if len(m.OOB) > 0 {
			h.Control = &m.OOB[0]
			h.SetControllen(len(m.OOB))
		}
	}
	r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(c.fd), uintptr(unsafe.Pointer(&c.whs[0])), uintptr(len(ms)), 0, 0, 0)
	clear(c.wiov[:nb]) // do not pin the callers' buffers
	clear(c.whs[:len(ms)])
	if e != 0 {
		return 0, os.NewSyscallError("sendmmsg", e)
	}
	return int(r), nil
}

// putSockaddr writes a's socket address for this socket's family into sa
// and returns its length (IPv4 addresses are mapped on an IPv6 socket).
func (c *rawUDP) putSockaddr(sa *unix.RawSockaddrAny, a *net.UDPAddr) uint32 {
	*sa = unix.RawSockaddrAny{}
	if !c.v6 {
		p := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		p.Family, p.Port = unix.AF_INET, htons(a.Port)
		if ip4 := a.IP.To4(); ip4 != nil {
			copy(p.Addr[:], ip4)
		}
		return unix.SizeofSockaddrInet4
	}
	p := (*unix.RawSockaddrInet6)(unsafe.Pointer(sa))
	p.Family, p.Port = unix.AF_INET6, htons(a.Port)
	if len(a.IP) > 0 {
		copy(p.Addr[:], a.IP.To16())
	}
	if a.Zone != "" {
		if z, err := net.InterfaceByName(a.Zone); err == nil {
			p.Scope_id = uint32(z.Index)
		}
	}
	return unix.SizeofSockaddrInet6
}

// htons and ntohs convert a port to and from the network byte order a
// sockaddr holds, whatever this machine's byte order.
func htons(port int) uint16 {
	var b [2]byte
	b[0], b[1] = byte(port>>8), byte(port)
	return *(*uint16)(unsafe.Pointer(&b))
}

func ntohs(p uint16) int {
	b := (*[2]byte)(unsafe.Pointer(&p))
	return int(b[0])<<8 | int(b[1])
}

func (c *rawUDP) ReadFrom(b []byte) (int, net.Addr, error) {
	ms := []ipv4.Message{{Buffers: [][]byte{b}}}
	if _, err := c.ReadBatch(ms, 0); err != nil {
		return 0, nil, err
	}
	return ms[0].N, ms[0].Addr, nil
}

func (c *rawUDP) WriteTo(b []byte, addr net.Addr) (int, error) {
	if _, err := c.WriteBatch([]ipv4.Message{{Buffers: [][]byte{b}, Addr: addr}}, 0); err != nil {
		return 0, err
	}
	return len(b), nil
}

// Close wakes a blocked reader (shutdown makes poll return), waits until
// no operation uses the socket, and closes it.
func (c *rawUDP) Close() error {
	if c.closed.Swap(true) {
		return net.ErrClosed
	}
	_ = unix.Shutdown(c.fd, unix.SHUT_RDWR) // ENOTCONN on an unconnected socket, but it wakes poll
	c.mu.Lock()
	defer c.mu.Unlock()
	return unix.Close(c.fd)
}

var errDeadline = errors.New("only a read deadline at or before now is supported")

// SetReadDeadline with a time at or before now ends reading: blocked and
// later reads return os.ErrDeadlineExceeded. Zero clears nothing.
func (c *rawUDP) SetReadDeadline(t time.Time) error {
	switch {
	case t.IsZero():
		return nil
	case t.After(time.Now()):
		return errDeadline
	}
	c.rdShut.Store(true)
	c.mu.RLock()
	defer c.mu.RUnlock()
	if !c.closed.Load() {
		_ = unix.Shutdown(c.fd, unix.SHUT_RD)
	}
	return nil
}

func (c *rawUDP) SetDeadline(t time.Time) error { return c.SetReadDeadline(t) }

// SetWriteDeadline accepts only zero: sends do not wait.
func (c *rawUDP) SetWriteDeadline(t time.Time) error {
	if t.IsZero() {
		return nil
	}
	return errDeadline
}

// SyscallConn gives socket options access to the descriptor
// (SetSocketBuffers).
func (c *rawUDP) SyscallConn() (syscall.RawConn, error) { return rawControl{c}, nil }

type rawControl struct{ c *rawUDP }

func (r rawControl) Control(f func(fd uintptr)) error {
	r.c.mu.RLock()
	defer r.c.mu.RUnlock()
	if r.c.closed.Load() {
		return net.ErrClosed
	}
	f(uintptr(r.c.fd))
	return nil
}

func (rawControl) Read(func(fd uintptr) bool) error  { return errors.ErrUnsupported }
func (rawControl) Write(func(fd uintptr) bool) error { return errors.ErrUnsupported }
