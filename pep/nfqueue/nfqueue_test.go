package nfqueue

import (
	"encoding/binary"
	"net/netip"
	"testing"
)

// segment builds an IPv4 header (ihl words) and a 20-byte TCP header.
func segment(ihl int, proto byte, frag uint16, flags byte) []byte {
	b := make([]byte, ihl*4+20)
	b[0] = 0x40 | byte(ihl)
	binary.BigEndian.PutUint16(b[6:], frag)
	b[9] = proto
	copy(b[12:], []byte{10, 0, 5, 2})
	copy(b[16:], []byte{10, 0, 1, 2})
	t := b[ihl*4:]
	binary.BigEndian.PutUint16(t[0:], 20)
	binary.BigEndian.PutUint16(t[2:], 34567)
	t[13] = flags
	return b
}

func TestParseTCP(t *testing.T) {
	src := netip.MustParseAddrPort("10.0.5.2:20")
	dst := netip.MustParseAddrPort("10.0.1.2:34567")
	v6 := segment(5, 6, 0, 0x02)
	v6[0] = 0x65
	cases := []struct {
		name     string
		pkt      []byte
		ok       bool
		syn, ack bool
	}{
		{"syn", segment(5, 6, 0, 0x02), true, true, false},
		{"syn-ack", segment(5, 6, 0, 0x12), true, true, true},
		{"ip options", segment(7, 6, 0, 0x02), true, true, false},
		{"dont-fragment bit is fine", segment(5, 6, 0x4000, 0x02), true, true, false},
		{"udp", segment(5, 17, 0, 0x02), false, false, false},
		{"fragment", segment(5, 6, 0x0001, 0x02), false, false, false},
		{"ipv6", v6, false, false, false},
		{"truncated tcp", segment(5, 6, 0, 0x02)[:30], false, false, false},
		{"ihl too small", func() []byte { b := segment(5, 6, 0, 2); b[0] = 0x44; return b }(), false, false, false},
		{"empty", nil, false, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := ParseTCP(c.pkt)
			if (err == nil) != c.ok {
				t.Fatalf("err = %v, want ok=%v", err, c.ok)
			}
			if !c.ok {
				return
			}
			if s.Src != src || s.Dst != dst || s.SYN != c.syn || s.ACK != c.ack {
				t.Fatalf("got %+v", s)
			}
		})
	}
}

// packetMessage builds one NFQNL_MSG_PACKET datagram as the kernel sends it.
func packetMessage(id, mark uint32, payload []byte) []byte {
	body := []byte{2, 0, 0, 7} // nfgenmsg: AF_INET, v0, queue 7
	hdr := binary.BigEndian.AppendUint32(nil, id)
	hdr = append(hdr, 0x08, 0x00, 1) // hw protocol, hook
	body = append(body, attr(attrPacketHdr, hdr)...)
	if mark != 0 {
		body = append(body, attr(attrMark, binary.BigEndian.AppendUint32(nil, mark))...)
	}
	body = append(body, attr(attrPayload, payload)...)
	msg := make([]byte, 16, 16+len(body))
	binary.NativeEndian.PutUint32(msg, uint32(16+len(body)))
	binary.NativeEndian.PutUint16(msg[4:], subsysQueue<<8|msgPacket)
	return append(msg, body...)
}

func TestParsePacket(t *testing.T) {
	seg := segment(5, 6, 0, 0x02)
	cases := []struct {
		name     string
		dgram    []byte
		ok       bool
		id, mark uint32
	}{
		{"with mark", packetMessage(41, 0x4, seg), true, 41, 4},
		{"no mark", packetMessage(42, 0, seg), true, 42, 0},
		{"odd payload length is padded", packetMessage(43, 2, seg[:39]), true, 43, 2},
		{"no header", func() []byte {
			m := packetMessage(1, 0, seg)
			// Turn the header attribute into an unknown one.
			binary.NativeEndian.PutUint16(m[16+4+2:], 99)
			return m
		}(), false, 0, 0},
		{"attribute overruns", func() []byte {
			m := packetMessage(1, 0, seg)
			binary.NativeEndian.PutUint16(m[16+4:], 200)
			return m
		}(), false, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			msgs, err := parseMessages(c.dgram)
			if err != nil || len(msgs) != 1 {
				t.Fatalf("messages: %v %d", err, len(msgs))
			}
			p, err := parsePacket(msgs[0].body)
			if (err == nil) != c.ok {
				t.Fatalf("err = %v, want ok=%v", err, c.ok)
			}
			if c.ok && (p.ID != c.id || p.Mark != c.mark || len(p.Payload) == 0) {
				t.Fatalf("got %+v", p)
			}
		})
	}
	if _, err := parseMessages([]byte{255, 255, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}); err == nil {
		t.Fatal("oversized message length accepted")
	}
}

// The parsers read what the kernel sends; they must never panic on any
// byte string.
func FuzzParseTCP(f *testing.F) {
	f.Add(segment(5, 6, 0, 0x02))
	f.Add(segment(15, 6, 0, 0x12))
	f.Fuzz(func(t *testing.T, b []byte) {
		ParseTCP(b)
	})
}

func FuzzParseMessages(f *testing.F) {
	f.Add(packetMessage(1, 2, segment(5, 6, 0, 2)))
	f.Add(append(packetMessage(1, 0, nil), packetMessage(2, 4, []byte{1})...))
	f.Fuzz(func(t *testing.T, b []byte) {
		msgs, err := parseMessages(b)
		if err != nil {
			return
		}
		for _, m := range msgs {
			parsePacket(m.body)
		}
	})
}
