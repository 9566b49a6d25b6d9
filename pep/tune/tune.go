// Package tune derives per-socket TCP settings for the two legs of a split
// connection and applies them to raw socket descriptors.
package tune

import (
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Buffer bounds: below MinBuf a socket cannot keep even a LAN busy, and
// above MaxBuf a typo in the rate would let one connection pin huge
// amounts of kernel memory.
const (
	MinBuf = 64 << 10
	MaxBuf = 256 << 20
)

// BDPBuffer returns the socket buffer for a link of rateBps bit/s and
// rtt, scaled by factor, clamped to [MinBuf, MaxBuf]. It returns 0 (leave
// autotuning alone) when the rate or RTT is unknown or zero: at zero delay
// the kernel's autotuning is already right and a fixed buffer only caps it.
func BDPBuffer(rateBps int64, rttMs float64, factor float64) int {
	if rateBps <= 0 || rttMs <= 0 || factor <= 0 {
		return 0
	}
	b := float64(rateBps) / 8 * rttMs / 1000 * factor
	if math.IsNaN(b) || b < MinBuf {
		return MinBuf
	}
	if b > MaxBuf {
		return MaxBuf
	}
	return int(math.Ceil(b))
}

// AvailableCC lists the congestion control algorithms the kernel offers,
// as read from the given proc file.
func AvailableCC(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read available congestion controls: %w", err)
	}
	return strings.Fields(string(b)), nil
}

// CCProcFile is where Linux lists the congestion controls sockets may use.
const CCProcFile = "/proc/sys/net/ipv4/tcp_available_congestion_control"

// CheckCC returns an error naming the offered algorithms if cc is not one
// of them. An empty cc means "kernel default" and is always fine.
func CheckCC(cc string, available []string) error {
	if cc == "" {
		return nil
	}
	for _, a := range available {
		if a == cc {
			return nil
		}
	}
	return fmt.Errorf("congestion control %q not offered by this kernel (available: %s)", cc, strings.Join(available, " "))
}

// Leg is the set of socket options for one side of a split connection.
type Leg struct {
	Buf      int    // SO_SNDBUF and SO_RCVBUF in bytes (0 = autotune)
	CC       string // TCP_CONGESTION ("" = default)
	MSS      int    // TCP_MAXSEG (0 = default)
	NoDelay  bool
	QuickAck bool
	// KeepAlive is the idle time before TCP keep-alive probes (0 = off).
	// A reset lost on the way (or a peer that vanished) would otherwise
	// leave the other leg established forever; probes find out and the
	// relay then resets the other leg.
	KeepAlive time.Duration
	// RTOMax caps the retransmission timer's exponential backoff
	// (TCP_RTO_MAX_MS, Linux >= 6.15; 0 = kernel default, 120 s): through
	// a 10 s outage the backed-off timer may otherwise fire seconds after
	// the link is back, and until it fires nothing crosses.
	RTOMax time.Duration
}

// ApplyPre sets the options that must be in place before the handshake:
// buffers decide the window scale offered in the SYN, and MSS is
// advertised in it. Used on listeners (inherited by accepted sockets) and
// on upstream sockets before connect.
func (l Leg) ApplyPre(fd int) error {
	if l.Buf > 0 {
		// The FORCE variants ignore net.core.[rw]mem_max, which would
		// otherwise silently cap a satellite-sized window at ~200 KB.
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, l.Buf); err != nil {
			return fmt.Errorf("SO_SNDBUFFORCE %d: %w", l.Buf, err)
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, l.Buf); err != nil {
			return fmt.Errorf("SO_RCVBUFFORCE %d: %w", l.Buf, err)
		}
	}
	if l.CC != "" {
		if err := unix.SetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION, l.CC); err != nil {
			return fmt.Errorf("TCP_CONGESTION %s: %w", l.CC, err)
		}
	}
	if l.MSS > 0 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_MAXSEG, l.MSS); err != nil {
			return fmt.Errorf("TCP_MAXSEG %d: %w", l.MSS, err)
		}
	}
	return nil
}

// ApplyPost sets the options that act on an established socket.
func (l Leg) ApplyPost(fd int) error {
	nd := 0
	if l.NoDelay {
		nd = 1
	}
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, nd); err != nil {
		return fmt.Errorf("TCP_NODELAY: %w", err)
	}
	if l.QuickAck {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_QUICKACK, 1); err != nil {
			return fmt.Errorf("TCP_QUICKACK: %w", err)
		}
	}
	if l.RTOMax > 0 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_RTO_MAX_MS, int(l.RTOMax/time.Millisecond)); err != nil {
			return fmt.Errorf("TCP_RTO_MAX_MS %d (needs Linux 6.15 or later): %w", l.RTOMax/time.Millisecond, err)
		}
	}
	if l.KeepAlive > 0 {
		idle := max(int(l.KeepAlive/time.Second), 1)
		for _, o := range []struct {
			level, opt, val int
			name            string
		}{
			{unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1, "SO_KEEPALIVE"},
			{unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, idle, "TCP_KEEPIDLE"},
			{unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, max(idle/4, 1), "TCP_KEEPINTVL"},
			{unix.IPPROTO_TCP, unix.TCP_KEEPCNT, 4, "TCP_KEEPCNT"},
		} {
			if err := unix.SetsockoptInt(fd, o.level, o.opt, o.val); err != nil {
				return fmt.Errorf("%s: %w", o.name, err)
			}
		}
	}
	return nil
}
