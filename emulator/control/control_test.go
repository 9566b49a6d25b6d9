package control

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

type fakeHandler struct{ set []string }

func (f *fakeHandler) Config() any         { return map[string]int{"x": 1} }
func (f *fakeHandler) Stats() any          { return map[string]int{"frames": 2} }
func (f *fakeHandler) StartClock() float64 { return 1.5 }
func (f *fakeHandler) Set(dir string, p json.RawMessage) error {
	if dir != "a_to_b" {
		return errors.New("bad dir")
	}
	f.set = append(f.set, string(p))
	return nil
}

func TestHandle(t *testing.T) {
	h := &fakeHandler{}
	tests := []struct {
		line   string
		ok     bool
		substr string
	}{
		{`{"op":"get"}`, true, `"config":{"x":1}`},
		{`{"op":"clock"}`, true, `"clock_started_s":1.5`},
		{`{"op":"stats"}`, true, `"frames":2`},
		{`{"op":"set","dir":"a_to_b","params":{"delay_ms":5}}`, true, `"ok":true`},
		{`{"op":"set","dir":"a_to_b","params":{"loss":0.1}}`, true, `"ok":true`},
		{`{"op":"set","dir":"zz","params":{}}`, false, "bad dir"},
		{`{"op":"set","dir":"a_to_b"}`, false, "params"},
		{`{"op":"nope"}`, false, "unknown op"},
		{`{"op":"get","x":1}`, false, "unknown field"},
		{`not json`, false, "bad request"},
	}
	for _, tc := range tests {
		r := Handle(h, []byte(tc.line))
		b, _ := json.Marshal(r)
		if r.OK != tc.ok || !strings.Contains(string(b), tc.substr) {
			t.Errorf("%s -> %s", tc.line, b)
		}
	}
	if len(h.set) != 2 || h.set[0] != `{"delay_ms":5}` || h.set[1] != `{"loss":0.1}` {
		t.Errorf("set calls %v", h.set)
	}
}

func TestServer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ctl.sock")
	s, err := Listen(path, &fakeHandler{})
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v (err %v), want 0600 whatever the umask", fi.Mode().Perm(), err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Serve(ctx); close(done) }()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rd := bufio.NewReader(c)
	for _, req := range []string{`{"op":"get"}`, `{"op":"stats"}`} {
		if _, err := c.Write([]byte(req + "\n")); err != nil {
			t.Fatal(err)
		}
		line, err := rd.ReadString('\n')
		if err != nil || !strings.Contains(line, `"ok":true`) {
			t.Fatalf("%s -> %q %v", req, line, err)
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("server did not stop")
	}
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("socket %s left behind (%v)", path, err)
	}
}

func TestSocketModeIgnoresUmask(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	path := filepath.Join(t.TempDir(), "open.sock")
	s, err := Listen(path, &fakeHandler{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.ln.Close()
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("under umask 000 the socket is %v (err %v), want 0600", fi.Mode().Perm(), err)
	}
}

// FuzzParseRequest: whatever the line, an accepted request names a known op,
// a set carries a JSON object, and the request survives re-encoding.
func FuzzParseRequest(f *testing.F) {
	f.Add([]byte(`{"op":"get"}`))
	f.Add([]byte(`{"op":"set","dir":"both","params":{"ber":1e-7}}`))
	f.Add([]byte(`{"op":"set","dir":"a_to_b","params":{"loss":0.1,"ber":1e-7}}`))
	f.Add([]byte(`{"op":"set","dir":"b_to_a","params":{"loss":1}}`))
	f.Add([]byte(`{"op":"set","dir":"both","params":"loss"}`))
	f.Add([]byte(`{"op":"stats"}`))
	f.Add([]byte(`{"op":"clock"}`))
	f.Add([]byte(`{"op":"set","dir":"<","params":{"a":"<&>","n":1e400}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		r, err := ParseRequest(line)
		if err != nil {
			return
		}
		switch r.Op {
		case "get", "stats", "clock":
		case "set":
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(r.Params, &obj); err != nil || obj == nil {
				t.Fatalf("set accepted with params %q (%v)", r.Params, err)
			}
		default:
			t.Fatalf("accepted op %q", r.Op)
		}
		again, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := ParseRequest(again)
		if err != nil || r2.Op != r.Op || r2.Dir != r.Dir || !reflect.DeepEqual(decode(t, r2.Params), decode(t, r.Params)) {
			t.Fatalf("%q re-encoded as %q parses to %+v, %v", line, again, r2, err)
		}
	})
}

// decode gives raw JSON's value, numbers as written, so that re-encoding
// (which escapes HTML characters) compares equal.
func decode(t *testing.T, raw json.RawMessage) any {
	t.Helper()
	if len(raw) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}
