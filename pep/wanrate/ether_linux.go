//go:build linux

package wanrate

import (
	"encoding/binary"
	"fmt"
	"net"
	"sync"

	"satbed/emulator/rawsock"
)

// EtherLink carries tunnel frames as Ethernet frames of EtherType 0x88B5
// straight out of a bridge port (the PEP's WAN port): they need no IP
// address and pass the emulator like any frame.
type EtherLink struct {
	s    *rawsock.Socket
	src  HWAddr
	mu   sync.Mutex // the send buffer
	sbuf []byte
	rbuf []byte
}

// etherHeader is destination, source and EtherType.
const etherHeader = 14

// OpenEther opens the link on interface name.
func OpenEther(name string) (*EtherLink, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return nil, fmt.Errorf("wan=rate: interface %s: %w", name, err)
	}
	if len(ifi.HardwareAddr) != 6 {
		return nil, fmt.Errorf("wan=rate: interface %s has no Ethernet address", name)
	}
	s, err := rawsock.Open(name, rawsock.Options{EtherType: EtherType, RcvBuf: 4 << 20, SndBuf: 1 << 20})
	if err != nil {
		return nil, fmt.Errorf("wan=rate: %w", err)
	}
	l := &EtherLink{s: s, sbuf: make([]byte, 0, etherHeader+s.MTU), rbuf: make([]byte, etherHeader+s.MTU+64)}
	copy(l.src[:], ifi.HardwareAddr)
	return l, nil
}

// Send transmits one frame to the peer's address (or broadcast).
func (l *EtherLink) Send(frame []byte, to HWAddr) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := append(l.sbuf[:0], to[:]...)
	b = append(b, l.src[:]...)
	b = binary.BigEndian.AppendUint16(b, EtherType)
	b = append(b, frame...)
	l.sbuf = b
	return l.s.Write(b)
}

// Recv waits for one tunnel frame.
func (l *EtherLink) Recv(buf []byte) (int, HWAddr, error) {
	for {
		n, _, err := l.s.Read(l.rbuf)
		if err != nil {
			return 0, HWAddr{}, err
		}
		if n < etherHeader || binary.BigEndian.Uint16(l.rbuf[12:]) != EtherType {
			continue
		}
		var from HWAddr
		copy(from[:], l.rbuf[6:12])
		return copy(buf, l.rbuf[etherHeader:n]), from, nil
	}
}

// Overhead is the Ethernet header, which the emulator's shaper counts.
func (l *EtherLink) Overhead() int { return etherHeader }

// MTU is the interface's MTU (the largest tunnel frame).
func (l *EtherLink) MTU() int { return l.s.MTU }

// Close closes the socket.
func (l *EtherLink) Close() error { return l.s.Close() }
