package quic

import (
	"errors"
	"strings"
	"testing"
)

func TestParseRequest(t *testing.T) {
	tests := []struct {
		line string
		want Request
		err  bool
	}{
		{"GET payload.bin\n", Request{Op: "GET", Name: "payload.bin"}, false},
		{"GET payload.bin", Request{Op: "GET", Name: "payload.bin"}, false},
		{"PUT up.bin 20000000\n", Request{Op: "PUT", Name: "up.bin", Size: 20000000}, false},
		{"PUT up.bin 0\n", Request{Op: "PUT", Name: "up.bin"}, false},
		{"GET ../etc/passwd\n", Request{}, true},
		{"GET a/b\n", Request{}, true},
		{"GET .hidden\n", Request{}, true},
		{"GET  two-spaces\n", Request{}, true},
		{"GET a b\n", Request{}, true},
		{"PUT up.bin\n", Request{}, true},
		{"PUT up.bin -1\n", Request{}, true},
		{"PUT up.bin 007\n", Request{}, true},
		{"PUT up.bin 99999999999999999999\n", Request{}, true},
		{"DELETE x\n", Request{}, true},
		{"get x\n", Request{}, true},
		{"GET x\r\n", Request{}, true},
		{"", Request{}, true},
		{"GET " + strings.Repeat("a", 256) + "\n", Request{}, true},
		{"GET " + strings.Repeat("a", MaxLine) + "\n", Request{}, true},
	}
	for _, tt := range tests {
		got, err := ParseRequest([]byte(tt.line))
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("ParseRequest(%q) = %+v, %v; want %+v, error %v", tt.line, got, err, tt.want, tt.err)
		}
	}
}

func TestParseReply(t *testing.T) {
	digest := strings.Repeat("ab", 32)
	tests := []struct {
		line   string
		want   Reply
		err    bool
		remote bool
	}{
		{"OK 5\n", Reply{Size: 5}, false, false},
		{"OK 5 " + digest + "\n", Reply{Size: 5, SHA256: digest}, false, false},
		{"OK 5 " + strings.ToUpper(digest) + "\n", Reply{}, true, false},
		{"OK 5 abc\n", Reply{}, true, false},
		{"OK\n", Reply{}, true, false},
		{"OK -5\n", Reply{}, true, false},
		{"ERR no such file\n", Reply{}, true, true},
		{"HTTP/1.1 200 OK\n", Reply{}, true, false},
	}
	for _, tt := range tests {
		got, err := ParseReply([]byte(tt.line))
		if (err != nil) != tt.err || got != tt.want || errors.Is(err, ErrRemote) != tt.remote {
			t.Errorf("ParseReply(%q) = %+v, %v; want %+v, error %v (remote %v)", tt.line, got, err, tt.want, tt.err, tt.remote)
		}
	}
}

func TestLinesRoundTrip(t *testing.T) {
	for _, r := range []Request{{Op: "GET", Name: "f"}, {Op: "PUT", Name: "upload.bin", Size: 1 << 40}} {
		got, err := ParseRequest([]byte(r.String()))
		if err != nil || got != r {
			t.Errorf("%+v -> %q -> %+v, %v", r, r.String(), got, err)
		}
	}
	digest := strings.Repeat("0f", 32)
	if got, err := ParseReply([]byte(OKLine(7, digest))); err != nil || got != (Reply{Size: 7, SHA256: digest}) {
		t.Errorf("OKLine round trip: %+v, %v", got, err)
	}
	_, err := ParseReply([]byte(ErrLine(errors.New("two\nlines"))))
	if !errors.Is(err, ErrRemote) || strings.Contains(err.Error(), "\n") {
		t.Errorf("ErrLine round trip: %v", err)
	}
}

// The parsers read what a peer sent: nothing may panic, and whatever they
// accept must print back as the same line.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{"GET a\n", "PUT b 10\n", "PUT b 0", "GET ../x\n", "GET \xff\n", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		r, err := ParseRequest(line)
		if err != nil {
			return
		}
		if ValidName(r.Name) != nil || r.Size < 0 {
			t.Fatalf("accepted %+v from %q", r, line)
		}
		if again, err := ParseRequest([]byte(r.String())); err != nil || again != r {
			t.Fatalf("%q -> %+v -> %q -> %+v, %v", line, r, r.String(), again, err)
		}
	})
}

func FuzzParseReply(f *testing.F) {
	for _, s := range []string{"OK 1\n", "OK 1 " + strings.Repeat("a", 64) + "\n", "ERR x\n", "OK 1 2 3\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		r, err := ParseReply(line)
		if err != nil {
			return
		}
		if r.Size < 0 || (r.SHA256 != "" && len(r.SHA256) != 64) {
			t.Fatalf("accepted %+v from %q", r, line)
		}
		if again, err := ParseReply([]byte(OKLine(r.Size, r.SHA256))); err != nil || again != r {
			t.Fatalf("%q -> %+v -> %+v, %v", line, r, again, err)
		}
	})
}
