package quic

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// The raw-QUIC mode's wire format: one bidirectional stream per transfer.
// The client writes one request line, then (put) the file and FIN; the
// server answers with one reply line, then (get) the file and FIN.
//
//	GET <name>\n             ->  OK <size>\n <size bytes>
//	PUT <name> <size>\n ...  ->  OK <size> <sha256 of the file written>\n
//	any                      ->  ERR <message>\n
//
// HTTP/3 answers a PUT with the same reply line as its body, so both modes
// report the receiver's digest through one parser.

// MaxLine bounds a request or reply line, so a peer cannot make the other
// end buffer without limit before it has said anything valid.
const MaxLine = 1024

// Request is a parsed request line.
type Request struct {
	Op   string // "GET" or "PUT"
	Name string // a plain file name inside the server's root
	Size int64  // PUT: the bytes that follow the line
}

// Reply is a parsed reply line.
type Reply struct {
	Size   int64
	SHA256 string // PUT replies only: the receiver's digest of the file it wrote
}

// ValidName accepts a plain file name: no directories, nothing hidden (the
// server's temporary copies start with a dot), printable and short.
func ValidName(name string) error {
	if name == "" || len(name) > 255 || name != filepath.Base(name) || strings.HasPrefix(name, ".") {
		return fmt.Errorf("bad file name %q", name)
	}
	for _, r := range name {
		if r <= ' ' || r == 0x7f || r == '/' || r == '\\' {
			return fmt.Errorf("bad file name %q", name)
		}
	}
	return nil
}

func (r Request) String() string {
	if r.Op == "PUT" {
		return fmt.Sprintf("PUT %s %d\n", r.Name, r.Size)
	}
	return fmt.Sprintf("GET %s\n", r.Name)
}

// ParseRequest reads one request line (with or without its newline).
func ParseRequest(line []byte) (Request, error) {
	f, err := fields(line)
	if err != nil {
		return Request{}, err
	}
	var r Request
	switch {
	case len(f) == 2 && f[0] == "GET":
		r = Request{Op: "GET", Name: f[1]}
	case len(f) == 3 && f[0] == "PUT":
		size, err := parseSize(f[2])
		if err != nil {
			return Request{}, err
		}
		r = Request{Op: "PUT", Name: f[1], Size: size}
	default:
		return Request{}, fmt.Errorf("bad request %q", truncate(line))
	}
	if err := ValidName(r.Name); err != nil {
		return Request{}, err
	}
	return r, nil
}

// OKLine is the success reply; digest is empty for a GET.
func OKLine(size int64, digest string) string {
	if digest == "" {
		return fmt.Sprintf("OK %d\n", size)
	}
	return fmt.Sprintf("OK %d %s\n", size, digest)
}

// ErrLine is the failure reply; the message is kept to one line.
func ErrLine(err error) string {
	msg := strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, err.Error())
	if len(msg) > MaxLine-8 {
		msg = msg[:MaxLine-8]
	}
	return "ERR " + msg + "\n"
}

// ErrRemote is a transfer the peer refused with an ERR line.
var ErrRemote = errors.New("server refused")

// ParseReply reads one reply line; an ERR line is an error wrapping ErrRemote.
func ParseReply(line []byte) (Reply, error) {
	line = bytes.TrimSuffix(line, []byte("\n"))
	if msg, ok := bytes.CutPrefix(line, []byte("ERR ")); ok {
		return Reply{}, fmt.Errorf("%w: %s", ErrRemote, truncate(msg))
	}
	f, err := fields(line)
	if err != nil {
		return Reply{}, err
	}
	if (len(f) != 2 && len(f) != 3) || f[0] != "OK" {
		return Reply{}, fmt.Errorf("bad reply %q", truncate(line))
	}
	size, err := parseSize(f[1])
	if err != nil {
		return Reply{}, err
	}
	r := Reply{Size: size}
	if len(f) == 3 {
		if len(f[2]) != 64 || strings.Trim(f[2], "0123456789abcdef") != "" {
			return Reply{}, fmt.Errorf("bad sha256 %q in reply", truncate([]byte(f[2])))
		}
		r.SHA256 = f[2]
	}
	return r, nil
}

func fields(line []byte) ([]string, error) {
	line = bytes.TrimSuffix(line, []byte("\n"))
	if len(line) > MaxLine {
		return nil, fmt.Errorf("line longer than %d bytes", MaxLine)
	}
	if bytes.ContainsAny(line, "\r\n\x00") {
		return nil, fmt.Errorf("bad line %q", truncate(line))
	}
	// Exactly one space between fields, so each line has one spelling.
	f := strings.Split(string(line), " ")
	for _, s := range f {
		if s == "" {
			return nil, fmt.Errorf("bad line %q", truncate(line))
		}
	}
	return f, nil
}

func parseSize(s string) (int64, error) {
	if s == "" || strings.Trim(s, "0123456789") != "" || (len(s) > 1 && s[0] == '0') {
		return 0, fmt.Errorf("bad size %q", truncate([]byte(s)))
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("bad size %q: %w", truncate([]byte(s)), err)
	}
	return n, nil
}

func truncate(b []byte) string {
	if len(b) > 64 {
		return string(b[:64]) + "..."
	}
	return string(b)
}
