//go:build !linux

package saratoga

import (
	"io/fs"
	"net"
	"time"
)

// SetSocketBuffers enlarges a UDP socket's buffers where the platform
// allows it.
func SetSocketBuffers(c net.PacketConn, bytes int) {
	if u, ok := c.(*net.UDPConn); ok {
		_ = u.SetReadBuffer(bytes)
		_ = u.SetWriteBuffer(bytes)
	}
}

// changeTime returns the modification time; the inode change time is only
// read on Linux.
func changeTime(fi fs.FileInfo) time.Time { return fi.ModTime() }

// freeKiB is not available here: beacons go without free space.
func freeKiB(string) (uint64, bool) { return 0, false }
