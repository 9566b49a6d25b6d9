package saratoga

import (
	"io/fs"
	"net"
	"syscall"
	"time"
)

// SetSocketBuffers enlarges a UDP socket's buffers so bursts survive a
// receiver that is briefly descheduled. As root it uses the FORCE variants,
// which ignore net.core.rmem_max/wmem_max (208 KB by default); otherwise
// the kernel caps the request at those limits.
func SetSocketBuffers(c net.PacketConn, bytes int) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return
	}
	_ = raw.Control(func(fd uintptr) {
		for _, o := range [][2]int{{syscall.SO_RCVBUFFORCE, syscall.SO_RCVBUF}, {syscall.SO_SNDBUFFORCE, syscall.SO_SNDBUF}} {
			if syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, o[0], bytes) != nil {
				_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, o[1], bytes)
			}
		}
	})
}

// changeTime returns the inode change time, or the modification time if the
// platform does not expose it.
func changeTime(fi fs.FileInfo) time.Time {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return time.Unix(st.Ctim.Sec, st.Ctim.Nsec)
	}
	return fi.ModTime()
}

// freeKiB returns the free space available to unprivileged users under dir.
func freeKiB(dir string) (uint64, bool) {
	var st syscall.Statfs_t
	if syscall.Statfs(dir, &st) != nil {
		return 0, false
	}
	return st.Bavail * uint64(st.Bsize) / 1024, true
}
