package saratoga

import (
	"crypto/rand"
	"encoding/binary"
	"time"
)

// DefaultMTU is the IP MTU frames are sized for (1500-byte packets, as in
// the Global Hawk test bed).
const DefaultMTU = 1500

// FrameMargin is how far below the IP MTU the default frame (UDP payload)
// stays: room for an IPv6 header (40) and UDP (8) with 12 bytes to spare,
// and the limit other implementations enforce on receive (the draft
// co-author's drops frames above interface MTU - 60). README, "Frame size".
const FrameMargin = 60

// FrameFor returns the frame size to use: frame if set, else mtu (or
// DefaultMTU) less FrameMargin.
func FrameFor(mtu, frame int) int {
	if frame > 0 {
		return frame
	}
	if mtu <= 0 {
		mtu = DefaultMTU
	}
	return mtu - FrameMargin
}

// maxDatagram is the read buffer size; anything larger is not a frame we
// could have produced and is truncated into a malformed frame.
const maxDatagram = 65536

// newSessionID returns a random non-zero transaction id.
func newSessionID() uint32 {
	var b [4]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			// crypto/rand does not fail on Linux; fall back to the clock.
			return uint32(time.Now().UnixNano()) | 1
		}
		if v := binary.BigEndian.Uint32(b[:]); v != 0 {
			return v
		}
	}
}

// since2000 converts a time to the draft's directory-entry epoch.
func since2000(t time.Time) uint32 {
	if t.Before(epoch2000) {
		return 0
	}
	d := t.Sub(epoch2000) / time.Second
	if d > 0xffffffff {
		return 0xffffffff
	}
	return uint32(d)
}

// Summary describes one finished transfer; the CLI prints it as JSON.
type Summary struct {
	Op                  string  `json:"op"`
	File                string  `json:"file"`
	Bytes               uint64  `json:"bytes"`
	Seconds             float64 `json:"seconds"`
	GoodputBPS          float64 `json:"goodput_bps"`
	RateBPS             int64   `json:"rate_bps,omitempty"`
	Descriptor          int     `json:"descriptor"`
	DataFramesSent      uint64  `json:"data_frames_sent"`
	DataFramesReceived  uint64  `json:"data_frames_received"`
	RetransmittedFrames uint64  `json:"retransmitted_frames"`
	ProbeFrames         uint64  `json:"probe_frames"`
	DuplicateFrames     uint64  `json:"duplicate_frames"`
	MetadataFrames      uint64  `json:"metadata_frames_sent"`
	StatusFrames        uint64  `json:"status_frames"`
	HolesRequested      uint64  `json:"holes_requested"`
	MalformedFrames     uint64  `json:"malformed_frames"`
	WireBytesSent       uint64  `json:"wire_bytes_sent"`
	SRTTMillis          float64 `json:"srtt_ms,omitempty"`
	FirstPassSeconds    float64 `json:"first_pass_seconds,omitempty"`
	PacerStallSeconds   float64 `json:"pacer_stall_seconds,omitempty"`
	Checksum            string  `json:"checksum"`
	ChecksumOK          bool    `json:"checksum_ok"`
}

func (s *Summary) fill(st TransferStats, elapsed time.Duration) {
	s.Seconds = elapsed.Seconds()
	if s.Seconds > 0 {
		s.GoodputBPS = float64(s.Bytes) * 8 / s.Seconds
	}
	s.DataFramesSent = st.DataFramesSent
	s.DataFramesReceived = st.DataFramesReceived
	s.RetransmittedFrames = st.RetransmittedFrames
	s.ProbeFrames = st.ProbeFrames
	s.DuplicateFrames = st.DuplicateFrames
	s.MetadataFrames = st.MetadataSent
	s.StatusFrames = st.StatusFrames
	s.HolesRequested = st.HolesRequested
	s.WireBytesSent = st.BytesWire
	s.SRTTMillis = float64(st.SRTT) / float64(time.Millisecond)
	s.FirstPassSeconds = st.FirstPass.Seconds()
	s.PacerStallSeconds = st.PacerStall.Seconds()
}
