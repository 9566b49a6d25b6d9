//go:build !linux

package saratoga

import "net"

// ListenUDP opens the UDP socket a Saratoga server or client uses (on
// Linux, one outside the runtime's network poller; here a plain one).
func ListenUDP(network, address string) (net.PacketConn, error) {
	return net.ListenPacket(network, address)
}
