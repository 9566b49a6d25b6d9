// Package tproxy opens the transparent sockets of a split-TCP PEP: a
// listener that accepts connections redirected by the TPROXY target (the
// accepted socket's local address is the original destination), and an
// upstream dialer that connects from the client's own address so neither
// end host can tell a proxy is in the path.
package tproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"

	"satbed/pep/tune"
)

// Listen opens a transparent TCP listener on 0.0.0.0:port with the leg's
// pre-handshake options, which accepted sockets inherit (window scale,
// MSS and congestion control are decided when the SYN is answered).
// shared sets SO_REUSEPORT so several pepd worker processes listen on one
// port: the TPROXY lookup then picks one of them by the flow's hash. A
// single pepd leaves it off, so a second daemon on the port fails to
// start instead of silently taking part of the traffic.
func Listen(ctx context.Context, port int, leg tune.Leg, shared bool) (*net.TCPListener, error) {
	lc := net.ListenConfig{
		// Go's default 15 s keep-alive would be far too chatty on a
		// satellite link; tune.Leg sets pepd's own after the handshake.
		KeepAlive: -1,
		Control: func(network, address string, c syscall.RawConn) error {
			return control(c, func(fd int) error {
				if err := unix.SetsockoptInt(fd, unix.SOL_IP, unix.IP_TRANSPARENT, 1); err != nil {
					return fmt.Errorf("IP_TRANSPARENT: %w", err)
				}
				if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
					return fmt.Errorf("SO_REUSEADDR: %w", err)
				}
				if shared {
					if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
						return fmt.Errorf("SO_REUSEPORT: %w", err)
					}
				}
				return leg.ApplyPre(fd)
			})
		},
	}
	ln, err := lc.Listen(ctx, "tcp4", fmt.Sprintf("0.0.0.0:%d", port))
	if err != nil {
		return nil, fmt.Errorf("transparent listen on port %d: %w", port, err)
	}
	return ln.(*net.TCPListener), nil
}

// Dial connects to dst from src with IP_TRANSPARENT, so the server sees
// the client's address. The client's port is kept too: the WAN leg then
// has the same 4-tuple as the LAN leg, so captures on either side of a
// PEP show one connection (tcptrace can match them) and a second PEP
// downstream intercepts a flow that looks exactly like the original.
// Two clients cannot share a source port towards the same server, so the
// tuple is unique; if the port is busy locally (e.g. a TIME_WAIT leg of
// an earlier connection), Dial falls back to an ephemeral port.
func Dial(ctx context.Context, src, dst *net.TCPAddr, leg tune.Leg) (*net.TCPConn, error) {
	c, err := dial(ctx, src, dst, leg)
	if err != nil && src.Port != 0 && (errors.Is(err, unix.EADDRINUSE) || errors.Is(err, unix.EADDRNOTAVAIL)) {
		c, err = dial(ctx, &net.TCPAddr{IP: src.IP}, dst, leg)
	}
	return c, err
}

func dial(ctx context.Context, src, dst *net.TCPAddr, leg tune.Leg) (*net.TCPConn, error) {
	d := net.Dialer{
		LocalAddr: src,
		KeepAlive: -1,
		Control: func(network, address string, c syscall.RawConn) error {
			return control(c, func(fd int) error {
				if err := unix.SetsockoptInt(fd, unix.SOL_IP, unix.IP_TRANSPARENT, 1); err != nil {
					return fmt.Errorf("IP_TRANSPARENT: %w", err)
				}
				// Lets several upstream legs share the client's
				// address:port towards different servers, as the client
				// itself does.
				if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
					return fmt.Errorf("SO_REUSEADDR: %w", err)
				}
				return leg.ApplyPre(fd)
			})
		},
	}
	c, err := d.DialContext(ctx, "tcp4", dst.String())
	if err != nil {
		return nil, err
	}
	return c.(*net.TCPConn), nil
}

// ApplyPost applies post-handshake options to an established connection.
func ApplyPost(c *net.TCPConn, leg tune.Leg) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	return control(rc, leg.ApplyPost)
}

func control(c syscall.RawConn, f func(fd int) error) error {
	var ferr error
	if err := c.Control(func(fd uintptr) { ferr = f(int(fd)) }); err != nil {
		return err
	}
	return ferr
}
