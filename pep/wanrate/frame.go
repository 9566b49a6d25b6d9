// Package wanrate is pepd's rate-based WAN leg (option wan=rate): the two
// pepd instances of a pair carry every split connection's bytes between
// them in their own frames, paced at the link rate, with no slow start and
// no rate cut on loss. Losses are repaired by selective retransmission
// driven by the receiver's status frames (cumulative offset plus SACK
// blocks, like Saratoga's hole lists), the receiver reorders and delivers
// in order, and a per-stream window bounds what either pepd holds, so a
// slow LAN receiver pushes back to the LAN sender.
//
// The frames travel as Ethernet frames of EtherType 0x88B5 (IEEE 802
// local experimental) between the PEPs' WAN ports: the PEP nodes keep no
// IP address, the emulator forwards and counts them like any frame, and
// each pepd's bridge drops them so end hosts never see them.
package wanrate

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"net/netip"
)

// EtherType of tunnel frames (IEEE 802 local experimental EtherType 1).
const EtherType = 0x88B5

// Version of the frame format; frames of another version are dropped.
const Version = 1

// Frame types.
const (
	THello    = 1 // peer discovery and liveness; carries the rate hint and timestamps
	TOpen     = 2 // open a stream: the original client and server addresses
	TOpenAck  = 3 // the peer reached the server: the stream is established
	TData     = 4 // stream bytes at an offset (FIN flag: the stream ends after them)
	TStatus   = 5 // receiver state: cumulative offset, window limit, SACK blocks
	TReset    = 6 // abort a stream (either direction)
	TResetAck = 7 // the reset was seen
)

// Flags.
const (
	// FlagInit marks frames sent by the side that opened the stream, so
	// both sides can number their own streams independently.
	FlagInit = 1 << 0
	FlagFin  = 1 << 1 // TData: no bytes follow Offset+len(Payload)
	// FlagReply marks a HELLO sent in answer to one, so two pepds do not
	// answer each other forever.
	FlagReply = 1 << 2
	// FlagProbe on a HELLO: the sender found the link silent and asks
	// for every stream's status; on a TStatus: the answer, whose TSEcr is
	// the probe's TSVal (everything the prober sent before the probe and
	// the status does not list was lost).
	FlagProbe = 1 << 3
)

// Sizes. The common header: version, type, flags, reserved, sender's
// instance id, stream id. A CRC-32C trailer covers everything before it:
// the userspace emulator drops corrupt frames whole, but netem corrupts
// bits and a frame must never deliver wrong bytes.
const (
	headerLen   = 12
	crcLen      = 4
	helloLen    = 8 + 8 + 8 + 8 + 4
	openLen     = 2 * (16 + 2)
	dataHdrLen  = 8 + 8
	statusFixed = 8 + 8 + 8 + 8 + 2
	rangeLen    = 16
	// MaxSACK bounds the SACK blocks in one status frame (it stays
	// under 1,500 bytes).
	MaxSACK = 64
	// DataOverhead is what a DATA frame adds to its payload.
	DataOverhead = headerLen + dataHdrLen + crcLen
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Range is a half-open byte range [Start, End) of a stream.
type Range struct{ Start, End uint64 }

// Frame is one decoded tunnel frame. Which fields mean something depends
// on Type; Payload and SACK alias the decoded buffer or a reused slice.
type Frame struct {
	Type     uint8
	Flags    uint8
	Instance uint32 // the sender's instance id (changes when a pepd restarts)
	Stream   uint32

	// THello
	RateBPS      uint64
	PeerInstance uint32 // in a reply: the instance whose HELLO is answered
	// THello, TData (TSVal) and TStatus (TSEcr, EcrDelay): nanoseconds on
	// the sender's clock, echoed with the time the echo was held, so the
	// sender measures the round trip without synchronised clocks.
	TSVal, TSEcr, EcrDelay int64

	// TOpen
	Src, Dst netip.AddrPort

	// TData
	Offset  uint64
	Payload []byte

	// TStatus: Ack is the next offset expected (everything below arrived),
	// Limit the offset the sender may not reach (window), SACK the ranges
	// received above Ack, lowest first.
	Ack, Limit uint64
	SACK       []Range

	// TReset
	Reason uint8
}

// Append encodes f after dst and returns the extended slice.
func Append(dst []byte, f *Frame) ([]byte, error) {
	start := len(dst)
	dst = append(dst, Version, f.Type, f.Flags, 0)
	dst = binary.BigEndian.AppendUint32(dst, f.Instance)
	dst = binary.BigEndian.AppendUint32(dst, f.Stream)
	switch f.Type {
	case THello:
		dst = binary.BigEndian.AppendUint64(dst, f.RateBPS)
		dst = binary.BigEndian.AppendUint64(dst, uint64(f.TSVal))
		dst = binary.BigEndian.AppendUint64(dst, uint64(f.TSEcr))
		dst = binary.BigEndian.AppendUint64(dst, uint64(f.EcrDelay))
		dst = binary.BigEndian.AppendUint32(dst, f.PeerInstance)
	case TOpen:
		for _, ap := range []netip.AddrPort{f.Src, f.Dst} {
			if !ap.IsValid() {
				return dst[:start], errors.New("open frame without addresses")
			}
			a := ap.Addr().As16()
			dst = append(dst, a[:]...)
			dst = binary.BigEndian.AppendUint16(dst, ap.Port())
		}
	case TOpenAck, TResetAck:
	case TData:
		dst = binary.BigEndian.AppendUint64(dst, f.Offset)
		dst = binary.BigEndian.AppendUint64(dst, uint64(f.TSVal))
		dst = append(dst, f.Payload...)
	case TStatus:
		if len(f.SACK) > MaxSACK {
			return dst[:start], fmt.Errorf("%d SACK blocks (max %d)", len(f.SACK), MaxSACK)
		}
		dst = binary.BigEndian.AppendUint64(dst, f.Ack)
		dst = binary.BigEndian.AppendUint64(dst, f.Limit)
		dst = binary.BigEndian.AppendUint64(dst, uint64(f.TSEcr))
		dst = binary.BigEndian.AppendUint64(dst, uint64(f.EcrDelay))
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(f.SACK)))
		for _, r := range f.SACK {
			dst = binary.BigEndian.AppendUint64(dst, r.Start)
			dst = binary.BigEndian.AppendUint64(dst, r.End)
		}
	case TReset:
		dst = append(dst, f.Reason)
	default:
		return dst[:start], fmt.Errorf("unknown frame type %d", f.Type)
	}
	return binary.BigEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli)), nil
}

// appendCRC appends the CRC-32C of b.
func appendCRC(b []byte) []byte {
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// Errors of Decode.
var (
	ErrShort   = errors.New("frame too short")
	ErrCRC     = errors.New("frame checksum mismatch")
	ErrVersion = errors.New("unknown frame version")
)

// Decode parses b into f. Payload aliases b; SACK reuses f.SACK's array.
// Any malformed frame is an error and leaves nothing to act on.
func Decode(b []byte, f *Frame) error {
	if len(b) < headerLen+crcLen {
		return ErrShort
	}
	body := b[:len(b)-crcLen]
	if crc32.Checksum(body, castagnoli) != binary.BigEndian.Uint32(b[len(body):]) {
		return ErrCRC
	}
	if body[0] != Version {
		return ErrVersion
	}
	sack := f.SACK[:0]
	*f = Frame{Type: body[1], Flags: body[2],
		Instance: binary.BigEndian.Uint32(body[4:]), Stream: binary.BigEndian.Uint32(body[8:])}
	p := body[headerLen:]
	need := func(n int) error {
		if len(p) < n {
			return fmt.Errorf("type %d: %w (%d of %d bytes)", f.Type, ErrShort, len(p), n)
		}
		return nil
	}
	exact := func(n int) error {
		if len(p) != n {
			return fmt.Errorf("type %d: body of %d bytes, want %d", f.Type, len(p), n)
		}
		return nil
	}
	switch f.Type {
	case THello:
		if err := exact(helloLen); err != nil {
			return err
		}
		f.RateBPS = binary.BigEndian.Uint64(p)
		f.TSVal = int64(binary.BigEndian.Uint64(p[8:]))
		f.TSEcr = int64(binary.BigEndian.Uint64(p[16:]))
		f.EcrDelay = int64(binary.BigEndian.Uint64(p[24:]))
		f.PeerInstance = binary.BigEndian.Uint32(p[32:])
	case TOpen:
		if err := exact(openLen); err != nil {
			return err
		}
		f.Src = addrPort(p[0:18])
		f.Dst = addrPort(p[18:36])
	case TOpenAck, TResetAck:
		if err := exact(0); err != nil {
			return err
		}
	case TData:
		if err := need(dataHdrLen); err != nil {
			return err
		}
		f.Offset = binary.BigEndian.Uint64(p)
		f.TSVal = int64(binary.BigEndian.Uint64(p[8:]))
		f.Payload = p[dataHdrLen:]
		if f.Offset+uint64(len(f.Payload)) < f.Offset {
			return errors.New("data frame: offset overflows")
		}
	case TStatus:
		if err := need(statusFixed); err != nil {
			return err
		}
		f.Ack = binary.BigEndian.Uint64(p)
		f.Limit = binary.BigEndian.Uint64(p[8:])
		f.TSEcr = int64(binary.BigEndian.Uint64(p[16:]))
		f.EcrDelay = int64(binary.BigEndian.Uint64(p[24:]))
		n := int(binary.BigEndian.Uint16(p[32:]))
		if n > MaxSACK {
			return fmt.Errorf("status frame: %d SACK blocks (max %d)", n, MaxSACK)
		}
		if err := exact(statusFixed + n*rangeLen); err != nil {
			return err
		}
		prev := f.Ack
		for i := range n {
			q := p[statusFixed+i*rangeLen:]
			r := Range{binary.BigEndian.Uint64(q), binary.BigEndian.Uint64(q[8:])}
			// Ascending, disjoint, above Ack: anything else is not a
			// receiver's state and must not steer retransmission.
			if r.Start <= prev || r.End <= r.Start {
				return fmt.Errorf("status frame: SACK block %d [%d, %d) not above %d", i, r.Start, r.End, prev)
			}
			prev = r.End
			sack = append(sack, r)
		}
		f.SACK = sack
	case TReset:
		if err := exact(1); err != nil {
			return err
		}
		f.Reason = p[0]
	default:
		return fmt.Errorf("unknown frame type %d", f.Type)
	}
	return nil
}

func addrPort(b []byte) netip.AddrPort {
	a := netip.AddrFrom16([16]byte(b[:16])).Unmap()
	return netip.AddrPortFrom(a, binary.BigEndian.Uint16(b[16:]))
}
