//go:build linux

package rawsock

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A TPACKET_V3 receive ring: the kernel copies each frame into a shared
// memory block and hands over whole blocks, so receiving costs no system
// call per frame (one poll wake-up per block at most), and the ring is sized
// in frame bytes, not in socket-buffer skb truesize (an 8 MiB receive buffer
// held about 3,000 veth frames, 36 ms at 1 Gbit/s, less than one of this
// VM's scheduling stalls).
const (
	// 64 KiB blocks (~40 full-size frames): at low rates a block carries
	// only the frames of one retire period, so many small blocks hold more
	// time (1,024 ms of one-frame blocks) than few big ones would.
	ringBlockSize = 64 << 10
	ringBlocks    = 1024 // 64 MiB per port: ~0.5 s at 1 Gbit/s
	// ringRetire is how long the kernel waits before handing over a block
	// that is not full (TPACKET_V3 tp_retire_blk_tov, ms; the kernel
	// rounds it up to its timer granularity). It bounds the extra delivery
	// latency at low rates; arrival times come from the frames' kernel
	// timestamps, so it is not added to the emulated delay.
	ringRetire = 1
)

// Offsets in struct tpacket_block_desc (version, offset_to_priv, then
// tpacket_hdr_v1) and struct tpacket3_hdr.
const (
	bdStatus   = 8
	bdNumPkts  = 12
	bdFirstPkt = 16
	bdMinLen   = 48
	fhNext     = 0
	fhSec      = 4
	fhNsec     = 8
	fhSnaplen  = 12
	fhLen      = 16
	fhMac      = 24
	fhMinLen   = unix.SizeofTpacket3Hdr
)

var errBadBlock = errors.New("malformed TPACKET_V3 block")

// blockCursor walks the frames of one retired block. The kernel wrote the
// block, but offsets are still checked against its bounds so a corrupt one
// cannot make the reader run outside the mapping.
type blockCursor struct {
	blk  []byte
	left uint32 // frames not yet returned
	off  uint32 // offset of the next frame header
}

// reset points the cursor at a block's first frame.
func (c *blockCursor) reset(blk []byte) error {
	c.blk, c.left, c.off = blk, 0, 0
	if len(blk) < bdMinLen {
		return errBadBlock
	}
	n := binary.NativeEndian.Uint32(blk[bdNumPkts:])
	first := binary.NativeEndian.Uint32(blk[bdFirstPkt:])
	if n > 0 && (first < bdMinLen || uint64(first)+fhMinLen > uint64(len(blk))) {
		return errBadBlock
	}
	c.left, c.off = n, first
	return nil
}

// next returns the next frame: its captured bytes, its length on the wire
// (larger than len(data) if the kernel truncated it) and its kernel receive
// time. ok is false at the end of the block.
func (c *blockCursor) next() (data []byte, wireLen int, ts time.Time, ok bool, err error) {
	if c.left == 0 {
		return nil, 0, time.Time{}, false, nil
	}
	off := uint64(c.off)
	if off+fhMinLen > uint64(len(c.blk)) {
		c.left = 0
		return nil, 0, time.Time{}, false, errBadBlock
	}
	h := c.blk[off:]
	snap := uint64(binary.NativeEndian.Uint32(h[fhSnaplen:]))
	mac := uint64(binary.NativeEndian.Uint16(h[fhMac:]))
	if mac < fhMinLen || off+mac+snap > uint64(len(c.blk)) {
		c.left = 0
		return nil, 0, time.Time{}, false, errBadBlock
	}
	data = c.blk[off+mac : off+mac+snap]
	wireLen = int(binary.NativeEndian.Uint32(h[fhLen:]))
	ts = time.Unix(int64(binary.NativeEndian.Uint32(h[fhSec:])), int64(binary.NativeEndian.Uint32(h[fhNsec:])))
	c.left--
	if c.left > 0 {
		nx := binary.NativeEndian.Uint32(h[fhNext:])
		if nx == 0 {
			c.left = 0 // the kernel says this was the last one
		}
		c.off += nx
	}
	return data, wireLen, ts, true, nil
}

// ring is a mapped TPACKET_V3 receive ring.
type ring struct {
	mem []byte
	cur int // block being read
	bc  blockCursor
	// open reports that bc walks block cur, which must be handed back to
	// the kernel when exhausted.
	open bool
	bad  atomic.Uint64 // malformed blocks skipped
}

// setupRing switches fd to TPACKET_V3 and maps its receive ring. It must
// run before bind so that no frame is queued to the plain socket buffer.
func setupRing(fd int) (*ring, error) {
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VERSION, unix.TPACKET_V3); err != nil {
		return nil, fmt.Errorf("PACKET_VERSION V3: %w", err)
	}
	req := unix.TpacketReq3{
		Block_size: ringBlockSize, Block_nr: ringBlocks,
		// Frame size only has to divide the block for V3 (frames are packed).
		Frame_size: 2048, Frame_nr: ringBlockSize / 2048 * ringBlocks,
		Retire_blk_tov: ringRetire,
	}
	if err := unix.SetsockoptTpacketReq3(fd, unix.SOL_PACKET, unix.PACKET_RX_RING, &req); err != nil {
		return nil, fmt.Errorf("PACKET_RX_RING: %w", err)
	}
	mem, err := unix.Mmap(fd, 0, ringBlockSize*ringBlocks, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("mmap ring: %w", err)
	}
	return &ring{mem: mem}, nil
}

func (r *ring) status(i int) *uint32 {
	return (*uint32)(unsafe.Pointer(&r.mem[i*ringBlockSize+bdStatus]))
}

// fill copies up to len(bufs) frames out of the ring, handing each drained
// block back to the kernel. It returns how many it copied; 0 means the
// ring is empty (wait for readiness). Frames larger than their buffer or cut
// by the kernel are counted in truncated and skipped.
func (r *ring) fill(bufs [][]byte, sizes []int, ages []time.Duration, now time.Time, truncated *atomic.Uint64) int {
	got := 0
	for got < len(bufs) {
		if !r.open {
			if atomic.LoadUint32(r.status(r.cur))&unix.TP_STATUS_USER == 0 {
				return got
			}
			if r.bc.reset(r.mem[r.cur*ringBlockSize:][:ringBlockSize]) != nil {
				r.bad.Add(1)
			}
			r.open = true
		}
		data, wire, ts, ok, err := r.bc.next()
		if err != nil {
			r.bad.Add(1)
		}
		if !ok {
			// Block drained: give it back and move on.
			atomic.StoreUint32(r.status(r.cur), unix.TP_STATUS_KERNEL)
			r.open = false
			r.cur = (r.cur + 1) % ringBlocks
			continue
		}
		if wire != len(data) || len(data) > len(bufs[got]) {
			truncated.Add(1)
			continue
		}
		sizes[got] = copy(bufs[got], data)
		ages[got] = plausibleAge(now.Sub(ts))
		got++
	}
	return got
}

func (r *ring) close() error { return unix.Munmap(r.mem) }

// plausibleAge ignores ages a wall-clock step made implausible.
func plausibleAge(age time.Duration) time.Duration {
	if age < 0 || age > time.Second {
		return 0
	}
	return age
}
