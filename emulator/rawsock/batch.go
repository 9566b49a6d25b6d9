//go:build linux

package rawsock

import (
	"fmt"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// MaxBatch is the largest batch ReadBatch and WriteBatch handle per call.
const MaxBatch = 64

// batchState holds the mmsghdr arrays; one reader and one writer per socket
// may use it concurrently (separate halves).
type batchState struct {
	rmsgs [MaxBatch]unix.Mmsghdr
	riov  [MaxBatch]unix.Iovec
	rcmsg [MaxBatch][64]byte
	wmsgs [MaxBatch]unix.Mmsghdr
	wiov  [MaxBatch]unix.Iovec
}

// ReadBatch receives up to len(bufs) (at most MaxBatch) frames with one
// recvmmsg call, waiting until at least one arrives or the read deadline
// passes. sizes[i] and ages[i] receive each frame's length and age (see
// Read). Frames larger than their buffer are dropped and counted.
func (s *Socket) ReadBatch(bufs [][]byte, sizes []int, ages []time.Duration) (int, error) {
	if s.ring != nil {
		return s.readRing(bufs, sizes, ages)
	}
	if s.batch == nil {
		s.batch = new(batchState)
	}
	bs := s.batch
	m := min(len(bufs), MaxBatch)
	var got int
	var rerr error
	err := s.rc.Read(func(fd uintptr) bool {
		for {
			for i := 0; i < m; i++ {
				bs.riov[i].Base = &bufs[i][0]
				bs.riov[i].SetLen(len(bufs[i]))
				bs.rmsgs[i] = unix.Mmsghdr{Hdr: unix.Msghdr{Iov: &bs.riov[i], Iovlen: 1, Control: &bs.rcmsg[i][0]}}
				bs.rmsgs[i].Hdr.SetControllen(len(bs.rcmsg[i]))
			}
			r, _, errno := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&bs.rmsgs[0])),
				uintptr(m), unix.MSG_TRUNC, 0, 0)
			switch errno {
			case 0:
			case unix.EINTR:
				continue
			case unix.EAGAIN:
				return false
			default:
				rerr = errno
				return true
			}
			now := time.Now()
			got = 0
			for i := 0; i < int(r); i++ {
				n := int(bs.rmsgs[i].Len)
				if n > len(bufs[i]) || bs.rmsgs[i].Hdr.Flags&unix.MSG_TRUNC != 0 {
					s.truncated.Add(1)
					continue
				}
				if got != i {
					// Keep the frames contiguous when one was dropped.
					copy(bufs[got][:n], bufs[i][:n])
				}
				sizes[got] = n
				ages[got] = cmsgAge(bs.rcmsg[i][:], int(bs.rmsgs[i].Hdr.Controllen), now)
				got++
			}
			if got == 0 {
				continue
			}
			return true
		}
	})
	if err == nil {
		err = rerr
	}
	if err != nil {
		return 0, fmt.Errorf("%s: recv: %w", s.Name, err)
	}
	return got, nil
}

// WriteBatch sends frames with as few sendmmsg calls as possible, waiting
// for socket buffer space if needed. It returns how many were sent; on an
// error the frame at that index failed and the rest were not attempted.
func (s *Socket) WriteBatch(frames [][]byte) (int, error) {
	if s.batch == nil {
		s.batch = new(batchState)
	}
	bs := s.batch
	sent := 0
	for sent < len(frames) {
		m := min(len(frames)-sent, MaxBatch)
		for i := 0; i < m; i++ {
			f := frames[sent+i]
			bs.wiov[i].Base = &f[0]
			bs.wiov[i].SetLen(len(f))
			bs.wmsgs[i] = unix.Mmsghdr{Hdr: unix.Msghdr{Iov: &bs.wiov[i], Iovlen: 1}}
		}
		r, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(s.txfd), uintptr(unsafe.Pointer(&bs.wmsgs[0])), uintptr(m), 0, 0, 0)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return sent, fmt.Errorf("%s: send: %w", s.Name, sendErr(errno))
		}
		n := int(r)
		sent += n
	}
	return sent, nil
}

// readRing is ReadBatch on a TPACKET_V3 ring: copy out what the kernel has
// handed over, and wait in the netpoller only when the ring is empty. The
// netpoller is edge-triggered; a block retired between the check and the
// wait is still seen, because the poll descriptor was armed before the
// check ran.
func (s *Socket) readRing(bufs [][]byte, sizes []int, ages []time.Duration) (int, error) {
	m := min(len(bufs), MaxBatch)
	var got int
	var rerr error
	err := s.rc.Read(func(fd uintptr) bool {
		got = s.ring.fill(bufs[:m], sizes, ages, time.Now(), &s.truncated)
		if got > 0 {
			return true
		}
		// recvmmsg would return the socket's error (ENETDOWN when the
		// interface goes down or away, as when a compose swap recreates a
		// neighbour); a ring only stays empty, so the error is asked for.
		if e, gerr := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR); gerr == nil && e != 0 {
			rerr = unix.Errno(e)
			return true
		}
		return false
	})
	if err == nil {
		err = rerr
	}
	if err != nil {
		return 0, fmt.Errorf("%s: recv: %w", s.Name, err)
	}
	return got, nil
}
