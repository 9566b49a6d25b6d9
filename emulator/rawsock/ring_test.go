//go:build linux

package rawsock

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"
)

// mkBlock lays frames out as the kernel does in a TPACKET_V3 block: a
// block descriptor, then per frame a tpacket3_hdr, the frame at tp_mac, and
// tp_next_offset to the next header (0 on the last).
func mkBlock(size int, frames [][]byte, sec, nsec uint32) []byte {
	b := make([]byte, size)
	const first = 64 // offset_to_first_pkt, 16-aligned past the descriptor
	binary.NativeEndian.PutUint32(b[bdNumPkts:], uint32(len(frames)))
	binary.NativeEndian.PutUint32(b[bdFirstPkt:], first)
	off := first
	for i, f := range frames {
		h := b[off:]
		const mac = 80 // tpacket3_hdr + sockaddr_ll, aligned
		binary.NativeEndian.PutUint32(h[fhSec:], sec)
		binary.NativeEndian.PutUint32(h[fhNsec:], nsec+uint32(i))
		binary.NativeEndian.PutUint32(h[fhSnaplen:], uint32(len(f)))
		binary.NativeEndian.PutUint32(h[fhLen:], uint32(len(f)))
		binary.NativeEndian.PutUint16(h[fhMac:], mac)
		copy(h[mac:], f)
		next := (mac + len(f) + 15) &^ 15
		if i < len(frames)-1 {
			binary.NativeEndian.PutUint32(h[fhNext:], uint32(next))
		}
		off += next
	}
	return b
}

func TestBlockCursor(t *testing.T) {
	three := [][]byte{testFrame(1, 60), testFrame(2, 1514), testFrame(3, 61)}
	cases := []struct {
		name    string
		blk     func() []byte
		want    [][]byte
		wantErr bool
	}{
		{"three frames", func() []byte { return mkBlock(8192, three, 100, 5) }, three, false},
		{"empty block", func() []byte { return mkBlock(4096, nil, 0, 0) }, nil, false},
		{"shorter than a descriptor", func() []byte { return make([]byte, 20) }, nil, true},
		{"first frame past the end", func() []byte {
			b := mkBlock(4096, three[:1], 0, 0)
			binary.NativeEndian.PutUint32(b[bdFirstPkt:], 4090)
			return b
		}, nil, true},
		{"snaplen past the end", func() []byte {
			b := mkBlock(4096, three[:1], 0, 0)
			binary.NativeEndian.PutUint32(b[64+fhSnaplen:], 5000)
			return b
		}, nil, true},
		{"mac inside the header", func() []byte {
			b := mkBlock(4096, three[:1], 0, 0)
			binary.NativeEndian.PutUint16(b[64+fhMac:], 8)
			return b
		}, nil, true},
		{"count larger than the chain", func() []byte {
			b := mkBlock(8192, three, 0, 0)
			binary.NativeEndian.PutUint32(b[bdNumPkts:], 7)
			return b
		}, three, false},
		{"next offset past the end", func() []byte {
			b := mkBlock(8192, three[:2], 0, 0)
			binary.NativeEndian.PutUint32(b[64+fhNext:], 9000)
			return b
		}, three[:1], true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var bc blockCursor
			err := bc.reset(c.blk())
			var got [][]byte
			for err == nil {
				data, wire, ts, ok, nerr := bc.next()
				if nerr != nil {
					err = nerr
					break
				}
				if !ok {
					break
				}
				if wire != len(data) {
					t.Errorf("wire length %d, captured %d", wire, len(data))
				}
				if c.name == "three frames" && !ts.Equal(time.Unix(100, int64(5+len(got)))) {
					t.Errorf("frame %d time %v", len(got), ts)
				}
				got = append(got, data)
			}
			if (err != nil) != c.wantErr {
				t.Fatalf("error %v, want error %v", err, c.wantErr)
			}
			if len(got) != len(c.want) {
				t.Fatalf("%d frames, want %d", len(got), len(c.want))
			}
			for i := range got {
				if !bytes.Equal(got[i], c.want[i]) {
					t.Errorf("frame %d differs", i)
				}
			}
		})
	}
}

// FuzzBlockCursor: no block, however corrupt, makes the cursor read
// outside it, loop forever or return more frames than the block claims.
func FuzzBlockCursor(f *testing.F) {
	f.Add(mkBlock(4096, [][]byte{testFrame(1, 60), testFrame(2, 200)}, 1, 2))
	f.Add(mkBlock(256, nil, 0, 0))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, blk []byte) {
		var bc blockCursor
		if bc.reset(blk) != nil {
			return
		}
		claimed := bc.left
		n := uint32(0)
		for {
			data, _, _, ok, err := bc.next()
			if err != nil || !ok {
				break
			}
			n++
			if n > claimed {
				t.Fatalf("%d frames from a block claiming %d", n, claimed)
			}
			if len(data) > len(blk) {
				t.Fatalf("%d-byte frame from a %d-byte block", len(data), len(blk))
			}
		}
	})
}
