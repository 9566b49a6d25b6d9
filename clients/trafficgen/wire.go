// Package trafficgen is satbed's background-traffic generator: a server that
// sends or sinks bytes on request, and a client that opens TCP flows to it
// (long-lived, or finite flows arriving as a Poisson process or kept at a
// constant count, sizes from a distribution), writing one JSON record per flow.
//
// On the wire a flow is one TCP connection. The client opens it with a
// fixed 28-byte request header:
//
//	offset size field
//	0      4    magic "SBTG"
//	4      1    version (1)
//	5      1    direction: 0 download (server sends), 1 upload (client sends)
//	6      2    reserved, zero
//	8      4    client id (big endian), so flows of several clients stay apart
//	12     8    flow id (big endian), unique per client
//	20     8    size in bytes (big endian); 0: unbounded, until one side stops
//
// Download: the server sends size bytes, shuts down its write side and
// waits for the client's close, which comes once the client holds all size
// bytes (so every byte is acknowledged before the server reads its
// retransmission count). Upload: the client sends size bytes and shuts down
// its write side; the server, once it holds size bytes, answers with an
// 8-byte big-endian count of them and waits for the client's close. Neither
// waits for the other's FIN to call a flow complete: a FIN queued behind a
// full congestion window can leave a round trip after the last byte.
package trafficgen

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Wire constants.
const (
	HeaderLen = 28
	ReplyLen  = 8
	Version   = 1
	magic     = "SBTG"
	MaxSize   = 1 << 50 // far beyond any run; rejects garbage sizes
	maxFlowID = 1<<63 - 1
)

// Direction says which end sends the flow's bytes.
type Direction uint8

// Directions, named from the client's side as the transfer tools are.
const (
	Download Direction = 0 // server to client
	Upload   Direction = 1 // client to server
)

func (d Direction) String() string {
	if d == Upload {
		return "upload"
	}
	return "download"
}

// Request is the header a client sends to open a flow.
type Request struct {
	Direction Direction
	Client    uint32
	Flow      uint64
	Size      uint64 // 0: unbounded
}

// ErrBadHeader wraps every header parse failure.
var ErrBadHeader = errors.New("bad request header")

// Marshal encodes the request header.
func (r Request) Marshal() []byte {
	b := make([]byte, HeaderLen)
	copy(b, magic)
	b[4] = Version
	b[5] = byte(r.Direction)
	binary.BigEndian.PutUint32(b[8:], r.Client)
	binary.BigEndian.PutUint64(b[12:], r.Flow)
	binary.BigEndian.PutUint64(b[20:], r.Size)
	return b
}

// ParseRequest decodes a request header; b must hold exactly HeaderLen bytes.
func ParseRequest(b []byte) (Request, error) {
	if len(b) != HeaderLen {
		return Request{}, fmt.Errorf("%w: %d bytes, want %d", ErrBadHeader, len(b), HeaderLen)
	}
	if string(b[:4]) != magic {
		return Request{}, fmt.Errorf("%w: magic %q", ErrBadHeader, b[:4])
	}
	if b[4] != Version {
		return Request{}, fmt.Errorf("%w: version %d, want %d", ErrBadHeader, b[4], Version)
	}
	if d := Direction(b[5]); d != Download && d != Upload {
		return Request{}, fmt.Errorf("%w: direction %d", ErrBadHeader, b[5])
	}
	if b[6] != 0 || b[7] != 0 {
		return Request{}, fmt.Errorf("%w: reserved bytes set", ErrBadHeader)
	}
	r := Request{
		Direction: Direction(b[5]),
		Client:    binary.BigEndian.Uint32(b[8:]),
		Flow:      binary.BigEndian.Uint64(b[12:]),
		Size:      binary.BigEndian.Uint64(b[20:]),
	}
	if r.Flow > maxFlowID {
		return Request{}, fmt.Errorf("%w: flow id %d out of range", ErrBadHeader, r.Flow)
	}
	if r.Size > MaxSize {
		return Request{}, fmt.Errorf("%w: size %d exceeds %d", ErrBadHeader, r.Size, uint64(MaxSize))
	}
	return r, nil
}

// MarshalReply encodes the server's upload receipt.
func MarshalReply(received uint64) []byte {
	return binary.BigEndian.AppendUint64(make([]byte, 0, ReplyLen), received)
}

// ParseReply decodes the server's upload receipt.
func ParseReply(b []byte) (uint64, error) {
	if len(b) != ReplyLen {
		return 0, fmt.Errorf("bad reply: %d bytes, want %d", len(b), ReplyLen)
	}
	n := binary.BigEndian.Uint64(b)
	if n > MaxSize {
		return 0, fmt.Errorf("bad reply: count %d exceeds %d", n, uint64(MaxSize))
	}
	return n, nil
}
