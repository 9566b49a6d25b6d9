package wanrate

import (
	"bytes"
	"errors"
	"net/netip"
	"reflect"
	"testing"
)

func sampleFrames() []Frame {
	return []Frame{
		{Type: THello, Instance: 7, RateBPS: 8_000_000, TSVal: 123, TSEcr: 99, EcrDelay: 4, PeerInstance: 3, Flags: FlagReply},
		{Type: TOpen, Instance: 7, Stream: 1, Flags: FlagInit,
			Src: netip.MustParseAddrPort("10.99.99.2:40000"), Dst: netip.MustParseAddrPort("10.99.99.254:22")},
		{Type: TOpen, Instance: 7, Stream: 2, Src: netip.MustParseAddrPort("[fd00::1]:1"), Dst: netip.MustParseAddrPort("[fd00::2]:2")},
		{Type: TOpenAck, Instance: 7, Stream: 1},
		{Type: TData, Instance: 7, Stream: 1, Offset: 1 << 40, TSVal: 5, Payload: []byte("hello")},
		{Type: TData, Instance: 7, Stream: 1, Offset: 10, Flags: FlagFin | FlagInit, Payload: []byte{}},
		{Type: TStatus, Instance: 7, Stream: 1, Ack: 100, Limit: 5000, TSEcr: 8, EcrDelay: 1,
			SACK: []Range{{200, 300}, {400, 1000}}},
		{Type: TStatus, Instance: 7, Stream: 9, Ack: 0, Limit: 1, SACK: []Range{}},
		{Type: TReset, Instance: 7, Stream: 1, Reason: 2},
		{Type: TResetAck, Instance: 7, Stream: 1},
	}
}

func TestFrameRoundTrip(t *testing.T) {
	for _, f := range sampleFrames() {
		b, err := Append(nil, &f)
		if err != nil {
			t.Fatalf("type %d: %v", f.Type, err)
		}
		var g Frame
		if err := Decode(b, &g); err != nil {
			t.Fatalf("type %d: decode: %v", f.Type, err)
		}
		if f.Type == TData && len(f.Payload) == 0 {
			f.Payload = g.Payload // empty vs nil
		}
		if f.Type == TStatus && len(f.SACK) == 0 {
			f.SACK = g.SACK
		}
		if !reflect.DeepEqual(f, g) {
			t.Errorf("type %d: got %+v, want %+v", f.Type, g, f)
		}
	}
}

func TestFrameRejects(t *testing.T) {
	good, _ := Append(nil, &Frame{Type: TData, Stream: 1, Payload: []byte("abc")})
	flip := append([]byte(nil), good...)
	flip[15] ^= 0x10
	badSack, _ := Append(nil, &Frame{Type: TStatus, Ack: 10, SACK: []Range{{20, 30}}})
	// Rewrite the block to start at the ack (not above it) with a valid CRC.
	var f Frame
	_ = Decode(badSack, &f)
	f.SACK = []Range{{10, 30}}
	badSack, _ = Append(nil, &f)
	version := append([]byte(nil), good...)
	version[0] = 9
	version, _ = resum(version)
	for _, tc := range []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, ErrShort},
		{"short", good[:10], ErrShort},
		{"bit flip", flip, ErrCRC},
		{"version", version, ErrVersion},
		{"sack at ack", badSack, nil},
		{"unknown type", mustResum([]byte{Version, 99, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0}), nil},
		{"hello short", mustResum(append([]byte{Version, THello, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1}, make([]byte, 5+4)...)), nil},
	} {
		err := Decode(tc.b, &f)
		if err == nil {
			t.Errorf("%s: accepted", tc.name)
			continue
		}
		if tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

// resum rewrites the CRC trailer of b after editing.
func resum(b []byte) ([]byte, error) {
	body := b[:len(b)-crcLen]
	var f Frame
	out := append([]byte(nil), body...)
	out = appendCRC(out)
	return out, Decode(out, &f)
}

func mustResum(b []byte) []byte {
	out, _ := resum(b)
	return out
}

func FuzzDecode(f *testing.F) {
	for _, fr := range sampleFrames() {
		b, err := Append(nil, &fr)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var fr Frame
		if err := Decode(b, &fr); err != nil {
			// The CRC rejects almost every mutation; also try the body
			// with a fresh trailer so the parsers behind it are reached.
			if len(b) < crcLen {
				return
			}
			b = appendCRC(append([]byte(nil), b[:len(b)-crcLen]...))
			if err := Decode(b, &fr); err != nil {
				return
			}
		}
		// Whatever decodes re-encodes to the same bytes (except the
		// reserved byte and an open frame's IPv4 mapping, which decode
		// normalises).
		out, err := Append(nil, &fr)
		if err != nil {
			t.Fatalf("decoded frame does not encode: %v (%+v)", err, fr)
		}
		var again Frame
		if err := Decode(out, &again); err != nil {
			t.Fatalf("re-encoded frame does not decode: %v", err)
		}
		if fr.Type != TOpen && b[3] == 0 && !bytes.Equal(out, b) {
			t.Fatalf("round trip changed the frame:\n%x\n%x", b, out)
		}
	})
}
