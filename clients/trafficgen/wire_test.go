package trafficgen

import (
	"bytes"
	"errors"
	"testing"
)

func TestRequestRoundTrip(t *testing.T) {
	for _, r := range []Request{
		{Direction: Download, Client: 0, Flow: 1, Size: 1},
		{Direction: Upload, Client: 7, Flow: 1 << 40, Size: 0},
		{Direction: Download, Client: 1<<32 - 1, Flow: maxFlowID, Size: MaxSize},
	} {
		got, err := ParseRequest(r.Marshal())
		if err != nil || got != r {
			t.Errorf("round trip of %+v: got %+v, %v", r, got, err)
		}
	}
}

func TestParseRequestRejects(t *testing.T) {
	good := Request{Direction: Upload, Client: 3, Flow: 9, Size: 100}.Marshal()
	mutate := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	cases := []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"short", good[:HeaderLen-1]},
		{"long", append(bytes.Clone(good), 0)},
		{"magic", mutate(func(b []byte) []byte { b[0] = 'X'; return b })},
		{"version", mutate(func(b []byte) []byte { b[4] = 2; return b })},
		{"direction", mutate(func(b []byte) []byte { b[5] = 2; return b })},
		{"reserved", mutate(func(b []byte) []byte { b[7] = 1; return b })},
		{"flow id", mutate(func(b []byte) []byte { b[12] = 0x80; return b })},
		{"size", mutate(func(b []byte) []byte { b[20] = 0xff; return b })},
	}
	for _, c := range cases {
		if _, err := ParseRequest(c.b); !errors.Is(err, ErrBadHeader) {
			t.Errorf("%s: got %v, want ErrBadHeader", c.name, err)
		}
	}
}

func TestReply(t *testing.T) {
	for _, n := range []uint64{0, 1, 12345, MaxSize} {
		got, err := ParseReply(MarshalReply(n))
		if err != nil || got != n {
			t.Errorf("reply %d: got %d, %v", n, got, err)
		}
	}
	for _, b := range [][]byte{nil, make([]byte, 7), make([]byte, 9), {0xff, 0, 0, 0, 0, 0, 0, 0}} {
		if _, err := ParseReply(b); err == nil {
			t.Errorf("reply %x accepted", b)
		}
	}
}

// FuzzParseRequest checks the header parser never panics and that whatever
// it accepts re-encodes to the same bytes.
func FuzzParseRequest(f *testing.F) {
	f.Add(Request{Direction: Upload, Client: 3, Flow: 9, Size: 100}.Marshal())
	f.Add(Request{}.Marshal())
	f.Add([]byte("SBTG"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseRequest(b)
		if err != nil {
			return
		}
		if !bytes.Equal(r.Marshal(), b) {
			t.Fatalf("accepted %x but re-encodes to %x", b, r.Marshal())
		}
		if r.Size > MaxSize || r.Flow > maxFlowID || (r.Direction != Upload && r.Direction != Download) {
			t.Fatalf("accepted out-of-range request %+v", r)
		}
	})
}

// FuzzParseReply: never panics; accepted counts re-encode identically.
func FuzzParseReply(f *testing.F) {
	f.Add(MarshalReply(42))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := ParseReply(b)
		if err == nil && !bytes.Equal(MarshalReply(n), b) {
			t.Fatalf("accepted %x but re-encodes to %x", b, MarshalReply(n))
		}
	})
}
