package saratoga

import (
	"encoding/binary"
	"unsafe"

	"golang.org/x/sys/unix"
)

// gsoSupported says whether this platform has UDP segmentation offload
// (UDP_SEGMENT, Linux 4.18).
const gsoSupported = true

// gsoCmsgLen is the size of one UDP_SEGMENT control message.
var gsoCmsgLen = unix.CmsgSpace(2)

// putGSOCmsg writes into b (gsoCmsgLen bytes) the control message that
// makes the kernel cut a datagram into segments of size bytes.
func putGSOCmsg(b []byte, size int) []byte {
	b = b[:gsoCmsgLen]
	clear(b)
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level = unix.SOL_UDP
	h.Type = unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	binary.NativeEndian.PutUint16(b[unix.CmsgLen(0):], uint16(size))
	return b
}
