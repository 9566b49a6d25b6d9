// Package saratoga implements the Saratoga file-transfer protocol
// (draft-wood-tsvwg-saratoga-21): frame encoding, a rate-paced sender, a
// hole-tracking receiver, a directory server and get/put clients.
package saratoga

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// Port is the IANA-assigned Saratoga UDP port.
const Port = 7542

// Version is the only protocol version this package speaks (binary 001).
const Version = 1

// FrameType is the 5-bit frame type carried in bits 3-7 of the flags word.
type FrameType uint8

// Frame types defined by the draft.
const (
	TypeBeacon   FrameType = 0
	TypeRequest  FrameType = 1
	TypeMetadata FrameType = 2
	TypeData     FrameType = 3
	TypeStatus   FrameType = 4
)

func (t FrameType) String() string {
	switch t {
	case TypeBeacon:
		return "BEACON"
	case TypeRequest:
		return "REQUEST"
	case TypeMetadata:
		return "METADATA"
	case TypeData:
		return "DATA"
	case TypeStatus:
		return "STATUS"
	}
	return fmt.Sprintf("type%d", uint8(t))
}

// Descriptor is the 2-bit offset/length width selector (flags bits 8-9).
type Descriptor uint8

// Descriptor widths. Offsets are held in a uint64, so a 128-bit
// descriptor is sent with its upper 64 bits zero, and a received one whose
// upper 64 bits are not zero is rejected (no object here is that large).
const (
	D16  Descriptor = 0
	D32  Descriptor = 1
	D64  Descriptor = 2
	D128 Descriptor = 3
)

// Size returns the descriptor width in bytes.
func (d Descriptor) Size() int { return 2 << d }

// Max returns the largest offset representable with d.
func (d Descriptor) Max() uint64 {
	switch d {
	case D16:
		return 0xffff
	case D32:
		return 0xffffffff
	}
	return ^uint64(0)
}

// Bits returns the width in bits (16, 32, 64, 128).
func (d Descriptor) Bits() int { return d.Size() * 8 }

// DescriptorFor returns the narrowest descriptor that can hold
// offsets up to and including size.
func DescriptorFor(size uint64) Descriptor {
	switch {
	case size <= D16.Max():
		return D16
	case size <= D32.Max():
		return D32
	}
	return D64
}

// ParseDescriptorBits maps 16/32/64/128 to a Descriptor.
func ParseDescriptorBits(bits int) (Descriptor, error) {
	switch bits {
	case 16:
		return D16, nil
	case 32:
		return D32, nil
	case 64:
		return D64, nil
	case 128:
		return D128, nil
	}
	return 0, fmt.Errorf("unsupported descriptor width %d (want 16, 32, 64 or 128)", bits)
}

// Willing is the 2-bit tx-willing / rx-willing field of BEACON and
// REQUEST frames.
type Willing uint8

// Willing values (draft section 4.1, BEACON flags; reused by REQUEST).
const (
	WillingNo      Willing = 0
	WillingInvalid Willing = 1
	WillingCapable Willing = 2
	WillingYes     Willing = 3
)

// RequestType is the 8-bit request type of a REQUEST frame (flags bits 24-31).
type RequestType uint8

// Request types defined by the draft.
const (
	ReqNoAction  RequestType = 0
	ReqGet       RequestType = 1
	ReqPut       RequestType = 2
	ReqGetDelete RequestType = 3
	ReqPutDelete RequestType = 4
	ReqDelete    RequestType = 5
	ReqGetDir    RequestType = 6
)

// ChecksumType is the 4-bit METADATA checksum type (flags bits 28-31).
type ChecksumType uint8

// Checksum types defined by the draft.
const (
	CsumNone  ChecksumType = 0
	CsumCRC32 ChecksumType = 1
	CsumMD5   ChecksumType = 2
	CsumSHA1  ChecksumType = 3
)

// Words returns the checksum length in 32-bit words, the unit of the
// METADATA checksum-length field (flags bits 24-27); -1 if unknown.
func (c ChecksumType) Words() int {
	switch c {
	case CsumNone:
		return 0
	case CsumCRC32:
		return 1
	case CsumMD5:
		return 4
	case CsumSHA1:
		return 5
	}
	return -1
}

func (c ChecksumType) String() string {
	switch c {
	case CsumNone:
		return "none"
	case CsumCRC32:
		return "crc32"
	case CsumMD5:
		return "md5"
	case CsumSHA1:
		return "sha1"
	}
	return fmt.Sprintf("csum%d", uint8(c))
}

// ErrorCode is the 8-bit STATUS error code (flags bits 24-31).
type ErrorCode uint8

// Error codes defined by the draft.
const (
	ErrSuccess          ErrorCode = 0x00
	ErrUnspecified      ErrorCode = 0x01
	ErrCantSend         ErrorCode = 0x02
	ErrCantReceive      ErrorCode = 0x03
	ErrFileNotFound     ErrorCode = 0x04
	ErrAccessDenied     ErrorCode = 0x05
	ErrUnknownID        ErrorCode = 0x06
	ErrDidNotDelete     ErrorCode = 0x07
	ErrFileTooBig       ErrorCode = 0x08
	ErrBadOffset        ErrorCode = 0x09
	ErrBadPacket        ErrorCode = 0x0a
	ErrBadRequest       ErrorCode = 0x0b
	ErrInternalTimeout  ErrorCode = 0x0c
	ErrBadDataFlag      ErrorCode = 0x0d
	ErrRxNotInterested  ErrorCode = 0x0e
	ErrFileInUse        ErrorCode = 0x0f
	ErrMetadataRequired ErrorCode = 0x10
	ErrBadStatus        ErrorCode = 0x11
	ErrRxTimeout        ErrorCode = 0x12
)

var errorNames = map[ErrorCode]string{
	ErrSuccess: "success", ErrUnspecified: "unspecified error",
	ErrCantSend: "cannot send", ErrCantReceive: "cannot receive",
	ErrFileNotFound: "file not found", ErrAccessDenied: "access denied",
	ErrUnknownID: "unknown transaction id", ErrDidNotDelete: "did not delete",
	ErrFileTooBig: "file too big for descriptor", ErrBadOffset: "bad offset",
	ErrBadPacket: "bad packet", ErrBadRequest: "bad request",
	ErrInternalTimeout: "internal timeout", ErrBadDataFlag: "bad data flag",
	ErrRxNotInterested: "receiver not interested", ErrFileInUse: "file in use",
	ErrMetadataRequired: "metadata required", ErrBadStatus: "bad status",
	ErrRxTimeout: "receiver timeout",
}

func (e ErrorCode) String() string {
	if s, ok := errorNames[e]; ok {
		return s
	}
	return fmt.Sprintf("error 0x%02x", uint8(e))
}

// TimestampLen is the size of the optional timestamp/nonce field in DATA and
// STATUS frames. Its content is opaque to the receiver, which echoes it.
const TimestampLen = 16

// TimestampType is the first byte of the 16-byte timestamp: how the other
// 15 bytes are to be read.
type TimestampType uint8

// Timestamp types. Every type is accepted on receive (the field is only
// echoed); the sender uses TSPosix64_32.
const (
	TSLocal        TimestampType = 0 // local interpretation: opaque
	TSPosix32      TimestampType = 1 // 32-bit POSIX seconds
	TSPosix64      TimestampType = 2 // 64-bit POSIX seconds
	TSPosix32_32   TimestampType = 3 // 32-bit seconds, 32-bit nanoseconds
	TSPosix64_32   TimestampType = 4 // 64-bit seconds, 32-bit nanoseconds
	TSEpoch2000_32 TimestampType = 5 // 32-bit seconds since 2000-01-01 UTC
)

// epoch2000 is the epoch of directory-entry times and TSEpoch2000_32.
var epoch2000 = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// NewTimestamp encodes t as type TSPosix64_32: byte 0 the type, bytes 1-8
// the seconds, 9-12 the nanoseconds, 13-15 zero.
func NewTimestamp(t time.Time) [TimestampLen]byte {
	var b [TimestampLen]byte
	b[0] = byte(TSPosix64_32)
	ns := t.UnixNano()
	binary.BigEndian.PutUint64(b[1:9], uint64(ns/1e9))
	binary.BigEndian.PutUint32(b[9:13], uint32(ns%1e9))
	return b
}

// ParseTimestamp reads a typed timestamp. ok is false for local
// interpretation, unknown types and out-of-range sub-second fields: such a
// timestamp is still valid on the wire, it just carries no time we can use.
func ParseTimestamp(b [TimestampLen]byte) (t time.Time, ok bool) {
	switch TimestampType(b[0]) {
	case TSPosix32:
		return time.Unix(int64(binary.BigEndian.Uint32(b[1:5])), 0), true
	case TSPosix64:
		s := binary.BigEndian.Uint64(b[1:9])
		if s > 1<<62 {
			return time.Time{}, false
		}
		return time.Unix(int64(s), 0), true
	case TSPosix32_32:
		ns := binary.BigEndian.Uint32(b[5:9])
		if ns >= 1e9 {
			return time.Time{}, false
		}
		return time.Unix(int64(binary.BigEndian.Uint32(b[1:5])), int64(ns)), true
	case TSPosix64_32:
		s, ns := binary.BigEndian.Uint64(b[1:9]), binary.BigEndian.Uint32(b[9:13])
		if ns >= 1e9 || s > 1<<62 {
			return time.Time{}, false
		}
		return time.Unix(int64(s), int64(ns)), true
	case TSEpoch2000_32:
		return epoch2000.Add(time.Duration(binary.BigEndian.Uint32(b[1:5])) * time.Second), true
	}
	return time.Time{}, false
}

// MaxPathLen bounds file names carried in REQUEST and directory entries.
const MaxPathLen = 1024

// Hole is a missing byte range [Start, End) reported in a STATUS frame.
// End is exclusive: the offset of the first byte after the hole.
type Hole struct {
	Start, End uint64
}

// Beacon advertises a peer's identity and capabilities.
type Beacon struct {
	Descriptor Descriptor // largest descriptor the peer handles
	Stream     bool       // peer handles streams
	TxWilling  Willing    // 2 bits: 0 no, 2 capable, 3 yes
	RxWilling  Willing    // 2 bits, as TxWilling
	UDPLite    bool
	HasFree    bool       // free-space field present
	FreeDesc   Descriptor // width of the free-space field
	FreeSpace  uint64     // free space in KiB (a 128-bit field must fit 64 bits)
	EID        string     // endpoint identifier, rest of frame
}

// Request asks a peer to start a transaction.
type Request struct {
	Descriptor Descriptor
	Stream     bool
	// TxWilling and RxWilling (bits 12-13, 14-15) say whether the
	// requester will send and receive; a get needs RxWilling and a put
	// TxWilling set to yes for a peer that checks them.
	TxWilling Willing
	RxWilling Willing
	UDPLite   bool
	Type      RequestType
	Session   uint32
	Path      string
	Auth      []byte // optional authentication field after the path
}

// DirEnt is a Saratoga directory entry, as carried in METADATA.
type DirEnt struct {
	Properties uint8 // 2 bits: 0 file, 1 directory, 2 special file, 3 special dir
	Descriptor Descriptor
	Size       uint64
	Mtime      uint32 // seconds since 2000-01-01T00:00:00Z
	Ctime      uint32 // seconds since 2000-01-01T00:00:00Z
	Path       string
}

// Metadata describes the object being transferred.
type Metadata struct {
	Descriptor   Descriptor
	Transfer     uint8 // 2 bits: 0 file, 1 directory, 2 bundle, 3 stream
	Terminated   bool  // progress bit: transfer terminated early
	UDPLite      bool  // reliability bit
	ChecksumType ChecksumType
	Checksum     []byte
	Session      uint32
	Dirent       DirEnt
}

// Data carries a slice of the object at Offset.
type Data struct {
	Descriptor   Descriptor
	Transfer     uint8
	HasTimestamp bool
	Timestamp    [TimestampLen]byte
	ReqStatus    bool // sender asks for a STATUS in response
	EOD          bool // last byte of the object is in this frame
	Session      uint32
	Offset       uint64
	Payload      []byte
}

// Status reports receiver progress, holes and errors.
type Status struct {
	Descriptor   Descriptor
	HasTimestamp bool
	Timestamp    [TimestampLen]byte
	// MetadataMissing is the draft's metadata-received bit, which is set
	// when METADATA has NOT yet been received.
	MetadataMissing bool
	// Incomplete is the all-holes bit: set when the hole list does not
	// cover every hole the receiver knows of (it was truncated to fit).
	Incomplete bool
	// Voluntary is the holes-requested-or-sent bit: set when the STATUS
	// was sent unprompted rather than in response to a DATA request.
	Voluntary    bool
	Error        ErrorCode
	Session      uint32
	Progress     uint64 // every byte below this offset has been received
	InResponseTo uint64 // offset of the DATA frame that requested this STATUS
	Holes        []Hole
}

// Bit positions of the 32-bit flags word, numbered from the most
// significant bit (bit 0) as the draft's diagrams do. shift(msb, width)
// converts to a right-shift amount.
func shift(msb, width uint) uint { return 32 - msb - width }

func getBits(w uint32, msb, width uint) uint32 {
	return (w >> shift(msb, width)) & (1<<width - 1)
}

func setBits(w *uint32, msb, width uint, v uint32) {
	s := shift(msb, width)
	m := uint32(1<<width-1) << s
	*w = (*w &^ m) | (v<<s)&m
}

func setBool(w *uint32, bit uint, v bool) {
	if v {
		setBits(w, bit, 1, 1)
	}
}

func getBool(w uint32, bit uint) bool { return getBits(w, bit, 1) == 1 }

// Field positions (msb, width) from the draft's frame diagrams.
const (
	fVersionMSB, fVersionW = 0, 3
	fTypeMSB, fTypeW       = 3, 5
	fDescMSB, fDescW       = 8, 2
	fTransferMSB           = 10 // 2 bits, METADATA and DATA
	fStreamBit             = 11 // BEACON, REQUEST
	fTimestampBit          = 12 // DATA, STATUS
	fTxWillingMSB          = 12 // BEACON, REQUEST, 2 bits
	fProgressBit           = 12 // METADATA
	fReliabilityBit        = 13 // METADATA
	fMetaMissingBit        = 13 // STATUS
	fAllHolesBit           = 14 // STATUS
	fRxWillingMSB          = 14 // BEACON, REQUEST, 2 bits
	fVoluntaryBit          = 15 // STATUS
	fReqStatusBit          = 15 // DATA
	fUDPLiteBit            = 16 // BEACON, REQUEST
	fEODBit                = 16 // DATA
	fFreeSpaceBit          = 17 // BEACON
	fFreeDescMSB           = 18 // BEACON, 2 bits
	fCsumLenMSB            = 24 // METADATA, 4 bits, in 32-bit words
	fCsumTypeMSB           = 28 // METADATA, 4 bits
	fLowByteMSB            = 24 // REQUEST type, STATUS error code: 8 bits
)

// Directory-entry flag positions in its 16-bit flags field.
const (
	dSODBit    = 0 // always 1: marks the start of a directory entry
	dPropMSB   = 6 // 2 bits
	dDescMSB   = 8 // 2 bits
	direntBits = 16
)

func header(t FrameType, d Descriptor) uint32 {
	var w uint32
	setBits(&w, fVersionMSB, fVersionW, Version)
	setBits(&w, fTypeMSB, fTypeW, uint32(t))
	setBits(&w, fDescMSB, fDescW, uint32(d))
	return w
}

// Errors returned by the decoder. All decode failures wrap ErrMalformed.
var (
	ErrMalformed   = errors.New("malformed saratoga frame")
	ErrUnsupported = fmt.Errorf("%w: unsupported feature", ErrMalformed)
)

func malformed(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, a...))
}

// putDesc appends v as a big-endian value of width d.
func putDesc(b []byte, d Descriptor, v uint64) ([]byte, error) {
	if v > d.Max() {
		return b, fmt.Errorf("value %d does not fit a %d-bit descriptor", v, d.Bits())
	}
	switch d {
	case D16:
		return binary.BigEndian.AppendUint16(b, uint16(v)), nil
	case D32:
		return binary.BigEndian.AppendUint32(b, uint32(v)), nil
	case D64:
		return binary.BigEndian.AppendUint64(b, v), nil
	}
	b = binary.BigEndian.AppendUint64(b, 0) // D128: upper half
	return binary.BigEndian.AppendUint64(b, v), nil
}

// reader is a bounds-checked cursor over a received frame.
type reader struct {
	b   []byte
	err error
}

func (r *reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || len(r.b) < n {
		r.err = malformed("truncated: need %d bytes, have %d", n, len(r.b))
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) u16() uint16 {
	if v := r.take(2); v != nil {
		return binary.BigEndian.Uint16(v)
	}
	return 0
}

func (r *reader) u32() uint32 {
	if v := r.take(4); v != nil {
		return binary.BigEndian.Uint32(v)
	}
	return 0
}

func (r *reader) desc(d Descriptor) uint64 {
	switch d {
	case D16:
		return uint64(r.u16())
	case D32:
		return uint64(r.u32())
	case D64:
		if v := r.take(8); v != nil {
			return binary.BigEndian.Uint64(v)
		}
		return 0
	}
	v := r.take(16)
	if v == nil {
		return 0
	}
	if binary.BigEndian.Uint64(v[:8]) != 0 {
		r.err = fmt.Errorf("%w: 128-bit value beyond 2^64", ErrUnsupported)
		return 0
	}
	return binary.BigEndian.Uint64(v[8:])
}

// cstring reads a NUL-terminated string of at most MaxPathLen bytes.
func (r *reader) cstring() string {
	if r.err != nil {
		return ""
	}
	for i, c := range r.b {
		if c == 0 {
			if i > MaxPathLen {
				r.err = malformed("path longer than %d bytes", MaxPathLen)
				return ""
			}
			s := string(r.b[:i])
			r.b = r.b[i+1:]
			return s
		}
	}
	r.err = malformed("path not NUL-terminated")
	return ""
}

func checkPath(p string) error {
	if len(p) > MaxPathLen {
		return fmt.Errorf("path longer than %d bytes", MaxPathLen)
	}
	for i := 0; i < len(p); i++ {
		if p[i] == 0 {
			return errors.New("path contains NUL")
		}
	}
	return nil
}

// PeekType returns the type of an encoded frame after checking its version.
func PeekType(b []byte) (FrameType, error) {
	if len(b) < 4 {
		return 0, malformed("frame shorter than flags word")
	}
	w := binary.BigEndian.Uint32(b)
	if v := getBits(w, fVersionMSB, fVersionW); v != Version {
		return 0, malformed("version %d", v)
	}
	return FrameType(getBits(w, fTypeMSB, fTypeW)), nil
}

// Decode parses one frame and returns a *Beacon, *Request, *Metadata,
// *Data or *Status. Payload and Auth alias b.
func Decode(b []byte) (any, error) {
	t, err := PeekType(b)
	if err != nil {
		return nil, err
	}
	w := binary.BigEndian.Uint32(b)
	d := Descriptor(getBits(w, fDescMSB, fDescW))
	r := &reader{b: b[4:]}
	var f any
	switch t {
	case TypeBeacon:
		f = decodeBeacon(w, d, r)
	case TypeRequest:
		f = decodeRequest(w, d, r)
	case TypeMetadata:
		f = decodeMetadata(w, d, r)
	case TypeData:
		f = decodeData(w, d, r)
	case TypeStatus:
		f = decodeStatus(w, d, r)
	default:
		return nil, malformed("unknown frame type %d", t)
	}
	if r.err != nil {
		return nil, fmt.Errorf("%v: %w", t, r.err)
	}
	return f, nil
}

// Encode serialises a frame value (pointer or value of one of the five
// frame structs).
func Encode(f any) ([]byte, error) {
	switch v := f.(type) {
	case *Beacon:
		return v.Append(nil)
	case Beacon:
		return v.Append(nil)
	case *Request:
		return v.Append(nil)
	case Request:
		return v.Append(nil)
	case *Metadata:
		return v.Append(nil)
	case Metadata:
		return v.Append(nil)
	case *Data:
		return v.Append(nil)
	case Data:
		return v.Append(nil)
	case *Status:
		return v.Append(nil)
	case Status:
		return v.Append(nil)
	}
	return nil, fmt.Errorf("encode: unsupported type %T", f)
}

// Append encodes the beacon onto b.
func (f *Beacon) Append(b []byte) ([]byte, error) {
	w := header(TypeBeacon, f.Descriptor)
	setBool(&w, fStreamBit, f.Stream)
	setBits(&w, fTxWillingMSB, 2, uint32(f.TxWilling&3))
	setBits(&w, fRxWillingMSB, 2, uint32(f.RxWilling&3))
	setBool(&w, fUDPLiteBit, f.UDPLite)
	setBool(&w, fFreeSpaceBit, f.HasFree)
	if f.HasFree {
		setBits(&w, fFreeDescMSB, 2, uint32(f.FreeDesc))
	}
	b = binary.BigEndian.AppendUint32(b, w)
	var err error
	if f.HasFree {
		if b, err = putDesc(b, f.FreeDesc, f.FreeSpace); err != nil {
			return nil, fmt.Errorf("beacon free space: %w", err)
		}
	}
	return append(b, f.EID...), nil
}

func decodeBeacon(w uint32, d Descriptor, r *reader) *Beacon {
	f := &Beacon{
		Descriptor: d,
		Stream:     getBool(w, fStreamBit),
		TxWilling:  Willing(getBits(w, fTxWillingMSB, 2)),
		RxWilling:  Willing(getBits(w, fRxWillingMSB, 2)),
		UDPLite:    getBool(w, fUDPLiteBit),
		HasFree:    getBool(w, fFreeSpaceBit),
	}
	if f.HasFree {
		f.FreeDesc = Descriptor(getBits(w, fFreeDescMSB, 2))
		f.FreeSpace = r.desc(f.FreeDesc)
	}
	f.EID = string(r.b)
	return f
}

// Append encodes the request onto b.
func (f *Request) Append(b []byte) ([]byte, error) {
	if err := checkPath(f.Path); err != nil {
		return nil, fmt.Errorf("request: %w", err)
	}
	w := header(TypeRequest, f.Descriptor)
	setBool(&w, fStreamBit, f.Stream)
	setBits(&w, fTxWillingMSB, 2, uint32(f.TxWilling&3))
	setBits(&w, fRxWillingMSB, 2, uint32(f.RxWilling&3))
	setBool(&w, fUDPLiteBit, f.UDPLite)
	setBits(&w, fLowByteMSB, 8, uint32(f.Type))
	b = binary.BigEndian.AppendUint32(b, w)
	b = binary.BigEndian.AppendUint32(b, f.Session)
	b = append(b, f.Path...)
	b = append(b, 0)
	return append(b, f.Auth...), nil
}

func decodeRequest(w uint32, d Descriptor, r *reader) *Request {
	f := &Request{
		Descriptor: d,
		Stream:     getBool(w, fStreamBit),
		TxWilling:  Willing(getBits(w, fTxWillingMSB, 2)),
		RxWilling:  Willing(getBits(w, fRxWillingMSB, 2)),
		UDPLite:    getBool(w, fUDPLiteBit),
		Type:       RequestType(getBits(w, fLowByteMSB, 8)),
	}
	f.Session = r.u32()
	f.Path = r.cstring()
	if len(r.b) > 0 {
		f.Auth = r.b
	}
	return f
}

// Append encodes the directory entry onto b.
func (e *DirEnt) Append(b []byte) ([]byte, error) {
	if err := checkPath(e.Path); err != nil {
		return nil, fmt.Errorf("directory entry: %w", err)
	}
	var w uint32
	// The 16-bit dirent flags reuse the 32-bit helpers on the top half.
	setBits(&w, dSODBit, 1, 1)
	setBits(&w, dPropMSB, 2, uint32(e.Properties&3))
	setBits(&w, dDescMSB, 2, uint32(e.Descriptor))
	b = binary.BigEndian.AppendUint16(b, uint16(w>>direntBits))
	b, err := putDesc(b, e.Descriptor, e.Size)
	if err != nil {
		return nil, fmt.Errorf("directory entry size: %w", err)
	}
	b = binary.BigEndian.AppendUint32(b, e.Mtime)
	b = binary.BigEndian.AppendUint32(b, e.Ctime)
	b = append(b, e.Path...)
	return append(b, 0), nil
}

func decodeDirEnt(r *reader) DirEnt {
	w := uint32(r.u16()) << direntBits
	var e DirEnt
	if r.err == nil && !getBool(w, dSODBit) {
		r.err = malformed("directory entry start bit clear")
		return e
	}
	e.Properties = uint8(getBits(w, dPropMSB, 2))
	e.Descriptor = Descriptor(getBits(w, dDescMSB, 2))
	e.Size = r.desc(e.Descriptor)
	e.Mtime = r.u32()
	e.Ctime = r.u32()
	e.Path = r.cstring()
	return e
}

// Append encodes the metadata onto b.
func (f *Metadata) Append(b []byte) ([]byte, error) {
	words := f.ChecksumType.Words()
	if words < 0 {
		return nil, fmt.Errorf("metadata: unknown checksum type %d", f.ChecksumType)
	}
	if len(f.Checksum) != words*4 {
		return nil, fmt.Errorf("metadata: %v checksum must be %d bytes, have %d", f.ChecksumType, words*4, len(f.Checksum))
	}
	w := header(TypeMetadata, f.Descriptor)
	setBits(&w, fTransferMSB, 2, uint32(f.Transfer&3))
	setBool(&w, fProgressBit, f.Terminated)
	setBool(&w, fReliabilityBit, f.UDPLite)
	setBits(&w, fCsumLenMSB, 4, uint32(words))
	setBits(&w, fCsumTypeMSB, 4, uint32(f.ChecksumType))
	b = binary.BigEndian.AppendUint32(b, w)
	b = binary.BigEndian.AppendUint32(b, f.Session)
	b = append(b, f.Checksum...)
	return f.Dirent.Append(b)
}

func decodeMetadata(w uint32, d Descriptor, r *reader) *Metadata {
	f := &Metadata{
		Descriptor:   d,
		Transfer:     uint8(getBits(w, fTransferMSB, 2)),
		Terminated:   getBool(w, fProgressBit),
		UDPLite:      getBool(w, fReliabilityBit),
		ChecksumType: ChecksumType(getBits(w, fCsumTypeMSB, 4)),
	}
	words := int(getBits(w, fCsumLenMSB, 4))
	if want := f.ChecksumType.Words(); want != words {
		r.err = malformed("checksum type %v with length %d words", f.ChecksumType, words)
		return f
	}
	f.Session = r.u32()
	if c := r.take(words * 4); len(c) > 0 {
		f.Checksum = append([]byte(nil), c...)
	}
	f.Dirent = decodeDirEnt(r)
	return f
}

// DataHeaderLen returns the DATA header size for a descriptor.
func DataHeaderLen(d Descriptor, timestamp bool) int {
	n := 8 + d.Size()
	if timestamp {
		n += TimestampLen
	}
	return n
}

// Append encodes the DATA frame onto b.
func (f *Data) Append(b []byte) ([]byte, error) {
	w := header(TypeData, f.Descriptor)
	setBits(&w, fTransferMSB, 2, uint32(f.Transfer&3))
	setBool(&w, fTimestampBit, f.HasTimestamp)
	setBool(&w, fReqStatusBit, f.ReqStatus)
	setBool(&w, fEODBit, f.EOD)
	b = binary.BigEndian.AppendUint32(b, w)
	b = binary.BigEndian.AppendUint32(b, f.Session)
	if f.HasTimestamp {
		b = append(b, f.Timestamp[:]...)
	}
	b, err := putDesc(b, f.Descriptor, f.Offset)
	if err != nil {
		return nil, fmt.Errorf("data offset: %w", err)
	}
	if uint64(len(f.Payload)) > f.Descriptor.Max()-f.Offset {
		return nil, fmt.Errorf("data: payload end beyond %d-bit descriptor", f.Descriptor.Bits())
	}
	return append(b, f.Payload...), nil
}

func decodeData(w uint32, d Descriptor, r *reader) *Data {
	f := &Data{
		Descriptor:   d,
		Transfer:     uint8(getBits(w, fTransferMSB, 2)),
		HasTimestamp: getBool(w, fTimestampBit),
		ReqStatus:    getBool(w, fReqStatusBit),
		EOD:          getBool(w, fEODBit),
	}
	f.Session = r.u32()
	if f.HasTimestamp {
		copy(f.Timestamp[:], r.take(TimestampLen))
	}
	f.Offset = r.desc(d)
	if r.err == nil {
		if uint64(len(r.b)) > d.Max()-f.Offset {
			r.err = malformed("payload end beyond descriptor range")
			return f
		}
		if len(r.b) > 0 {
			f.Payload = r.b
		}
	}
	return f
}

// StatusHeaderLen returns the STATUS size without holes.
func StatusHeaderLen(d Descriptor, timestamp bool) int {
	n := 8 + 2*d.Size()
	if timestamp {
		n += TimestampLen
	}
	return n
}

// Append encodes the STATUS frame onto b.
func (f *Status) Append(b []byte) ([]byte, error) {
	w := header(TypeStatus, f.Descriptor)
	setBool(&w, fTimestampBit, f.HasTimestamp)
	setBool(&w, fMetaMissingBit, f.MetadataMissing)
	setBool(&w, fAllHolesBit, f.Incomplete)
	setBool(&w, fVoluntaryBit, f.Voluntary)
	setBits(&w, fLowByteMSB, 8, uint32(f.Error))
	b = binary.BigEndian.AppendUint32(b, w)
	b = binary.BigEndian.AppendUint32(b, f.Session)
	if f.HasTimestamp {
		b = append(b, f.Timestamp[:]...)
	}
	var err error
	if b, err = putDesc(b, f.Descriptor, f.Progress); err != nil {
		return nil, fmt.Errorf("status progress: %w", err)
	}
	if b, err = putDesc(b, f.Descriptor, f.InResponseTo); err != nil {
		return nil, fmt.Errorf("status in-response-to: %w", err)
	}
	for _, h := range f.Holes {
		if b, err = putDesc(b, f.Descriptor, h.Start); err != nil {
			return nil, fmt.Errorf("status hole: %w", err)
		}
		if b, err = putDesc(b, f.Descriptor, h.End); err != nil {
			return nil, fmt.Errorf("status hole: %w", err)
		}
	}
	return b, nil
}

func decodeStatus(w uint32, d Descriptor, r *reader) *Status {
	f := &Status{
		Descriptor:      d,
		HasTimestamp:    getBool(w, fTimestampBit),
		MetadataMissing: getBool(w, fMetaMissingBit),
		Incomplete:      getBool(w, fAllHolesBit),
		Voluntary:       getBool(w, fVoluntaryBit),
		Error:           ErrorCode(getBits(w, fLowByteMSB, 8)),
	}
	f.Session = r.u32()
	if f.HasTimestamp {
		copy(f.Timestamp[:], r.take(TimestampLen))
	}
	f.Progress = r.desc(d)
	f.InResponseTo = r.desc(d)
	if r.err != nil {
		return f
	}
	if len(r.b)%(2*d.Size()) != 0 {
		r.err = malformed("hole list of %d bytes is not a whole number of %d-bit pairs", len(r.b), d.Bits())
		return f
	}
	n := len(r.b) / (2 * d.Size())
	if n > 0 {
		f.Holes = make([]Hole, n)
	}
	for i := range f.Holes {
		f.Holes[i].Start = r.desc(d)
		f.Holes[i].End = r.desc(d)
		if f.Holes[i].End < f.Holes[i].Start {
			r.err = malformed("hole end %d before start %d", f.Holes[i].End, f.Holes[i].Start)
			return f
		}
	}
	return f
}
