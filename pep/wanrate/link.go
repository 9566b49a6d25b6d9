package wanrate

// HWAddr is a link-layer address of a peer (an Ethernet MAC).
type HWAddr [6]byte

// Broadcast reaches every station on the segment (peer discovery).
var Broadcast = HWAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// Link carries tunnel frames to and from the peer pepd. Frames are
// whole tunnel frames (Append's output) without the link's own header.
type Link interface {
	Send(frame []byte, to HWAddr) error
	// Recv waits for one frame and returns its length and sender.
	Recv(buf []byte) (int, HWAddr, error)
	// Overhead is what the link adds to each frame on the wire (Ethernet:
	// 14 header bytes), counted against the pacing rate.
	Overhead() int
	// MTU is the largest frame Send takes.
	MTU() int
	Close() error
}
